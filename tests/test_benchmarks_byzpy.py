"""The three-way benchmark (robustfl vs ByzFL vs ByzPy, ``benchmarks/three_way.py``) at toy sizes.

ByzPy is installed on first use into ``runs/bench-deps-byzpy`` (``benchmarks/byzpy_env.py``); where
it cannot be installed or imported (no network, say) the test that needs it is skipped with the
reason. ByzFL is used when it loads and left out otherwise. The other tests need neither: the
deadline, the table and the skip path run on stand-ins.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks import byzfl_env, byzpy_env, three_way

# where the definitions agree (or are aligned by a check), outputs must match to float32 rounding
AGREE = 1e-5


def _load_byzpy(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PIP_RETRIES", "0")  # no network: fail fast instead of retrying for minutes
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "15")
    py, why = byzpy_env.load()
    if py is None:
        pytest.skip(f"ByzPy unavailable: {why}")
    return py


def test_three_way_tiny_with_byzpy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    py = _load_byzpy(monkeypatch)
    fl, _ = byzfl_env.load(install_missing=False)  # optional: the pairs with ByzFL run when it is there
    res = three_way.bench_three_way(
        fl, py, three_way.settings(quick=True), repeats=1, timeout_s=30, budget_s=0.0
    )
    assert byzpy_env.version(py) == byzpy_env.BYZPY_VERSION
    seen = set()
    for r in res["rows"]:
        assert "error" not in r, r
        assert all(st == "ok" for st in r["status"].values()), (r["rule"], r["status"])
        assert r["robustfl_s"] > 0
        if "byzpy" in r["status"]:
            seen.add(r["rule"])
            assert r["ratio_byzpy"] == pytest.approx(r["byzpy_s"] / r["robustfl_s"])
        checks = {(a["lib"], a["check"]): a["max_rel_diff"] for a in r["agreement"]}
        same = checks.get(("byzpy", "same inputs"))
        if r["rule"] in (
            "trimmed_mean",
            "monna",
            "mda",
            "nnm",
            "clipping",
            "arc",
            "bucketing",
            "centered_clipping",
        ):
            assert same is not None and same < AGREE, (r["rule"], checks)
        if r["rule"] in ("median", "meamed"):  # even K: ByzPy's lower median; odd K: the same rule
            aligned = [v for (lib, c), v in checks.items() if lib == "byzpy" and c != "same inputs"]
            assert aligned and aligned[0] < AGREE, (r["rule"], checks)
        if r["rule"] in ("krum", "multi_krum"):  # at equal neighbour counts
            aligned = [v for (lib, c), v in checks.items() if lib == "byzpy" and "K-f-1" in c]
            assert aligned and aligned[0] < AGREE, (r["rule"], checks)
        if r["rule"] == "geometric_median":  # both from the mean, 3 iterations: the same iterate
            assert same is not None and same < 1e-4, checks
    assert seen >= {"median", "trimmed_mean", "krum", "mda", "nnm", "bucketing"}
    text = three_way.markdown(res)
    assert text.startswith("| rule | setting | robustfl ms | ByzFL ms | ByzPy ms |")
    assert len(text.splitlines()) == 2 + len(res["rows"])
    json.dumps(res, default=str)  # the --json payload serialises


def test_a_call_past_the_deadline_is_reported_as_timed_out() -> None:
    def slow(x: torch.Tensor) -> torch.Tensor:
        end = time.perf_counter() + 30
        while time.perf_counter() < end:  # a Python-level loop, like ByzFL's subset enumeration
            pass
        return x.mean(0)

    case = three_way.Case(
        "toy",
        {"robustfl": "mean", "byzfl": "slow mean"},
        {"robustfl": lambda x: x.mean(0), "byzfl": slow},
        {"robustfl": lambda x: x, "byzfl": lambda x: x},
    )
    t0 = time.perf_counter()
    rec = three_way.run_case(case, torch.ones(4, 3), repeats=2, timeout_s=0.3, budget_s=0.0)
    assert time.perf_counter() - t0 < 10
    assert rec["status"] == {"robustfl": "ok", "byzfl": "timed out"}
    assert rec["byzfl_s"] is None and rec["ratio_byzfl"] is None and rec["robustfl_s"] > 0
    row = {**rec, "setting": "x", "f": 0}
    assert "timed out (> 0.3 s)" in three_way.markdown({"rows": [row], "timeout_s": 0.3})


def test_max_rel_diff_and_list_outputs() -> None:
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert three_way.max_rel_diff(list(a.unbind(0)), a) == 0.0
    assert three_way.max_rel_diff(a + 0.04, a) == pytest.approx(0.01)
    assert three_way.max_rel_diff(a[0], a) == float("inf")


def test_main_skips_when_neither_library_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(byzfl_env, "load", lambda install_missing=True: (None, "no network here"))
    monkeypatch.setattr(byzpy_env, "load", lambda install_missing=True: (None, "no network either"))
    assert three_way.main(["--quick", "--no-install"]) == 0
    assert "three-way: skipped: ByzFL: no network here; ByzPy: no network either" in capsys.readouterr().out


def test_byzpy_load_without_install_reports_why(tmp_path: Path) -> None:
    py, why = byzpy_env.load(target=tmp_path / "missing", install_missing=False)
    assert py is None and why is not None and "not installed" in why
