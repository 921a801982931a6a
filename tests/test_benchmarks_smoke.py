"""Smoke tests of the benchmark suite (``python -m benchmarks``) at toy sizes, without ByzFL.

ByzFL is replaced by a stand-in written here from its documented conventions (0.0.11: Krum scores
with the K - f - 1 nearest rows, the geometric median starts from 0 with an absolute floor,
clipping works in place, bucketing draws ``torch.randperm`` from the global generator). The
benchmark must then report every pair as agreeing -- which checks that its pairings (f, tau, seeds,
neighbour counts) are set up so the comparison is honest -- and must report a wrong stand-in as
disagreeing.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import __main__ as bench_main
from benchmarks import byzfl_env, rules
from benchmarks.floors import FLOORS, bench_floors


def _clip_rows_(v: torch.Tensor, rows: list[int], c: float) -> torch.Tensor:
    for i in rows:
        n = float(torch.linalg.vector_norm(v[i]))
        if n > c:
            v[i] = v[i] * (c / n)
    return v


def _krum_scores(v: torch.Tensor, f: int) -> np.ndarray:
    a = v.double().numpy()
    d = ((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)
    return np.sort(d, axis=1)[:, 1 : len(a) - f].mean(1)


def fake_byzfl(median_is_mean: bool = False) -> types.SimpleNamespace:
    """A stand-in for ByzFL's aggregators: slow literal transcriptions of its conventions."""

    class Average:
        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            return v.mean(0)

    class Median:
        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            return v.mean(0) if median_is_mean else torch.from_numpy(np.median(v.numpy(), axis=0))

    class TrMean:
        def __init__(self, f: int = 0) -> None:
            self.f = f

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(np.sort(v.double().numpy(), axis=0)[self.f : len(v) - self.f].mean(0))

    class GeometricMedian:
        def __init__(self, nu: float = 0.1, T: int = 3) -> None:
            self.nu, self.T = nu, T

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            a, z = v.double().numpy(), np.zeros(v.shape[1])
            for _ in range(self.T):
                b = 1 / np.maximum(np.linalg.norm(a - z, axis=1), self.nu)
                z = (b[:, None] * a).sum(0) / b.sum()
            return torch.from_numpy(z)

    class Krum:
        def __init__(self, f: int = 0) -> None:
            self.f = f

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            return v[int(np.argmin(_krum_scores(v, self.f)))]

    class MultiKrum(Krum):
        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            keep = np.argsort(_krum_scores(v, self.f), kind="stable")[: len(v) - self.f]
            return v[torch.from_numpy(keep)].mean(0)

    class CenteredClipping:
        def __init__(self, m: object = None, L: int = 1, tau: float = 100.0) -> None:
            self.L, self.tau = L, tau

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            c = torch.zeros(v.shape[1], dtype=torch.float64)
            for _ in range(self.L):
                d = v.double() - c
                c = c + (d * torch.clamp(self.tau / torch.linalg.vector_norm(d, dim=1), max=1)[:, None]).mean(
                    0
                )
            return c

    class NNM:
        def __init__(self, f: int = 0) -> None:
            self.f = f

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            a = v.double().numpy()
            d = ((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)
            near = np.argsort(d, axis=1, kind="stable")[:, : len(a) - self.f]
            return torch.from_numpy(np.stack([a[idx].mean(0) for idx in near]))

    class Clipping:
        def __init__(self, c: float = 2.0) -> None:
            self.c = c

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            return _clip_rows_(v, list(range(len(v))), self.c)

    class ARC:
        def __init__(self, f: int = 0) -> None:
            self.f = f

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            n = len(v)
            nb = int(2 * self.f / n * (n - self.f))
            order = torch.argsort(torch.linalg.vector_norm(v, dim=1)).tolist()
            return _clip_rows_(v, order[n - nb :], float(torch.linalg.vector_norm(v[order[n - nb - 1]])))

    class Bucketing:
        def __init__(self, s: int = 1) -> None:
            self.s = s

        def __call__(self, v: torch.Tensor) -> torch.Tensor:
            v = v[torch.randperm(len(v))]
            return torch.stack([v[i : i + self.s].mean(0) for i in range(0, len(v), self.s)])

    classes = [
        Average,
        Median,
        TrMean,
        GeometricMedian,
        Krum,
        MultiKrum,
        CenteredClipping,
        NNM,
        Clipping,
        ARC,
    ]
    return types.SimpleNamespace(**{c.__name__: c for c in [*classes, Bucketing]})


def test_alternate_keeps_the_best_time_of_each_and_alternates(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = {"t": 0.0}
    monkeypatch.setattr(rules, "clock", lambda: clock["t"])
    calls: list[str] = []
    durations = {"a": iter([5.0, 2.0, 4.0]), "b": iter([3.0, 7.0, 6.0])}

    def timed(name: str):
        def fn(x: int) -> None:
            calls.append(name)
            assert x == 42  # the setup's argument
            clock["t"] += next(durations[name])

        return fn

    setup = {"a": lambda: (42,), "b": lambda: (42,)}
    best, ran = rules.alternate({"a": timed("a"), "b": timed("b")}, 3, setup, collect=False)
    assert ran == 3
    assert best == {"a": 2.0, "b": 3.0}
    assert calls == ["a", "b", "b", "a", "a", "b"]


def test_agreement_and_verdict_against_hand_computed_values() -> None:
    a = torch.tensor([1.0, 2.0, 3.0])
    b = torch.tensor([1.0, 2.0, 3.001])
    res = rules.agreement(a, b)
    assert not res["allclose"]
    assert res["rel_err"] == pytest.approx(0.001 / math.sqrt(1 + 4 + 3.001**2), rel=1e-4)
    assert res["max_abs"] == pytest.approx(0.001, rel=1e-3)
    assert rules.agreement(a, a.clone())["allclose"]
    assert rules.agreement(a, a[:2])["allclose"] is False
    assert rules.verdict(5.0, 5.0, True) == "ok"
    assert rules.verdict(4.6, 5.0, True) == "~"
    assert rules.verdict(4.4, 5.0, True) == "MISS"
    assert rules.verdict(2.1, 2.0, False) == "~"
    assert rules.verdict(2.3, 2.0, False) == "MISS"
    assert rules.verdict(1.0, None, False) == "-"


def test_make_updates_layout() -> None:
    u = rules.make_updates(6, 50, 2, seed=3)
    v = rules.make_updates(6, 50, 2, seed=3)
    assert u.dtype == torch.float32 and u.shape == (6, 50)
    assert torch.equal(u, v)
    # the last f rows are sign-flipped draws: their mean points away from the honest rows' mean
    assert float(u[:4].mean(0) @ u[4:].mean(0)) < 0


def test_rules_against_a_byzfl_stand_in_agree_at_toy_size() -> None:
    out = rules.bench_rules(fake_byzfl(), k=12, p=300, f=2, repeats=1, budget_s=0.0)
    by_name = {c["name"]: c for c in out["cases"]}
    assert set(by_name) == set(rules.PAIRS)
    for name, rec in by_name.items():
        assert "error" not in rec, (name, rec.get("error"))
        assert rec["ratio"] == pytest.approx(rec["byzfl_s"] / rec["robustfl_s"])
        if name == "geometric_median":
            assert rec["same"] is None
            assert rec["robustfl_iterations"] <= rec["byzfl_iterations"] == 3
            # both 3-iteration outputs are near the converged median; robustfl (from the mean) nearer
            assert rec["agreement"][1]["rel_err"] < rec["agreement"][2]["rel_err"] < 0.1
        else:
            assert rec["same"] is True, (name, rec["agreement"])
    for name in ("clipping", "arc"):  # ByzFL clips in place: ours in place too, and the fresh forms
        rec = by_name[name]
        assert rec["ratio_fresh"] == pytest.approx(rec["byzfl_s"] / rec["robustfl_fresh_s"])
        assert rec["ratio_with_copy"] == pytest.approx(rec["byzfl_with_copy_s"] / rec["robustfl_fresh_s"])
        inplace = [a for a in rec["agreement"] if a["check"] == "in place (apply_)"]
        assert len(inplace) == 1 and inplace[0]["allclose"], rec["agreement"]
    # Krum at equal neighbour counts agrees; the f_hat = f comparison is reported beside it
    assert len(by_name["krum"]["agreement"]) == 2
    assert out["robustfl_only"] and "bulyan" in out["robustfl_only"]


def test_a_wrong_stand_in_is_reported_as_disagreeing() -> None:
    out = rules.bench_rules(fake_byzfl(median_is_mean=True), k=9, p=200, f=1, repeats=1, names=["median"])
    assert out["cases"][0]["same"] is False


def test_floors_at_toy_size() -> None:
    out = bench_floors(k=12, p=500, f=2, repeats=1)
    assert [c["name"] for c in out["cases"]] == list(FLOORS)
    for rec in out["cases"]:
        assert "error" not in rec, rec
        assert rec["rule_s"] > 0 and rec["floor_s"] > 0
        assert rec["ratio"] == pytest.approx(rec["rule_s"] / rec["floor_s"])


def _fake_one_step(clients: int, model: str, repeats: int) -> dict:
    """A stand-in for the one-step benchmark (a full-size CNN step, ~30 s; tested on its own)."""
    return {"name": f"one step {model} K={clients}", "params": 1, "engine_s": 0.01, "floor_s": 0.005,
            "ratio_floor": 2.0, "previous_s": 0.02, "speedup_previous": 2.0, "max_rel_diff": 0.0}


def test_main_writes_json_and_table_and_skips_rules_without_byzfl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the engine benchmark (benchmarks/engine.py, tested with the engine) is replaced by a stand-in
    # with known times: this checks the plumbing -- sizes, targets, verdicts, JSON, table
    asked: list[tuple[int, int]] = []

    def fake_engine(clients: int, samples: int, bsz: int, repeats: int, threads: int | None) -> dict:
        asked.append((clients, repeats))
        loop = {100: 1.0, 1000: 15.0}[clients]
        return {
            "name": f"engine round K={clients}",
            "clients": clients,
            "engine_s": 0.05,
            "loop_s": loop,
            "speedup": loop / 0.05,
        }

    def fake_matrix(scenario: str, workers: int, repeats: int, **_: object) -> dict:
        asked.append((workers, repeats))
        walls = {1: [30.0, 31.0, 32.0], 2: [20.0, 18.0, 19.0]}
        return {
            "scenario": scenario,
            "workers": workers,
            "cells": 70,
            "wall_1_s": walls[1],
            "wall_2_s": walls[2],
            "ratio_best": 30.0 / 18.0,
            "ratio_median": 31.0 / 19.0,
            "identical": True,
            "machine": {"alone_s": 1.0, "together_s": 1.05, "ceiling": 2 / 1.05},
        }

    monkeypatch.setattr(bench_main, "bench_engine", fake_engine)
    monkeypatch.setattr(bench_main, "bench_one_step", _fake_one_step)
    monkeypatch.setattr("benchmarks.matrix.bench_matrix", fake_matrix)
    monkeypatch.setattr(byzfl_env, "load", lambda install_missing=True: (None, "no network here"))
    out = tmp_path / "bench.json"
    argv = ["--clients", "9", "--params", "200", "--byzantine", "1", "--out", str(out), "--no-install"]
    assert bench_main.main(argv) == 0
    data = json.loads(out.read_text())
    assert asked == [(100, 5), (1000, 3), (2, 3)]
    assert (data["matrix"]["target"], data["matrix"]["verdict"]) == (1.7, "~")  # 1.67x: within 10%
    (k100, k1000) = data["engine"]["cases"]
    assert (k100["target"], k100["verdict"]) == (10.0, "ok")  # 20x against >= 10x
    assert (k1000["target"], k1000["verdict"]) == (20.0, "ok")  # 300x against >= 20x
    assert data["rules"]["skipped"] == "no network here"
    assert len(data["floors"]["cases"]) == len(FLOORS)
    assert data["peak_rss_bytes"] >= max(data["peak_rss_after"].values()) > 0
    text = capsys.readouterr().out
    assert "rules: skipped: no network here" in text
    assert "engine round K=1000" in text and "peak RSS" in text
    assert "ratio best 1.67x (median 1.63x)" in text
    assert "ceiling for 2 single-threaded processes: 1.90x" in text


def test_engine_verdicts_against_targets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def slow_engine(clients: int, samples: int, bsz: int, repeats: int, threads: int | None) -> dict:
        return {"name": f"K={clients}", "clients": clients, "engine_s": 1.0, "loop_s": 9.5, "speedup": 9.5}

    monkeypatch.setattr(bench_main, "bench_engine", slow_engine)
    monkeypatch.setattr(bench_main, "bench_one_step", _fake_one_step)
    res = bench_main.main(["--only", "engine", "--out", str(tmp_path / "b.json")])
    data = json.loads((tmp_path / "b.json").read_text())
    assert res == 0 and "rules" not in data and "floors" not in data
    assert [c["verdict"] for c in data["engine"]["cases"]] == ["~", "MISS"]  # 9.5x vs 10x, vs 20x


def test_stub_module_answers_anything() -> None:
    mod = byzfl_env.stub_module("not_installed_pkg")
    thing = mod.transforms.Compose([mod.transforms.ToTensor()])
    assert "not_installed_pkg" in repr(thing)
    with pytest.raises(AttributeError):
        _ = mod.__wrapped__


def test_import_byzfl_stubs_what_is_missing_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "byzfl"
    (pkg / "aggregators").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from torchvision import datasets, transforms\n"
        "import robustfl_bench_missing_dep as sns\n"
        "T = transforms.Compose([transforms.ToTensor()])\n"
        "from .aggregators import *\n"
    )
    (pkg / "aggregators" / "__init__.py").write_text("class Average:\n    pass\n")
    for name in [m for m in sys.modules if m == "byzfl" or m.startswith("byzfl.")]:
        monkeypatch.delitem(sys.modules, name)
    path_before = list(sys.path)
    try:
        mod, reason = byzfl_env.import_byzfl(tmp_path)
        assert reason is None and mod is not None
        assert mod.Average.__name__ == "Average"
        assert "robustfl_bench_missing_dep" not in sys.modules
        tv = sys.modules.get("torchvision")
        assert tv is None or not (tv.__doc__ or "").startswith("benchmark stub")
        assert sys.path == path_before
    finally:
        for name in [m for m in sys.modules if m == "byzfl" or m.startswith("byzfl.")]:
            del sys.modules[name]


def test_load_without_install_reports_why(tmp_path: Path) -> None:
    mod, reason = byzfl_env.load(target=tmp_path / "missing", install_missing=False)
    assert mod is None and reason is not None and "not installed" in reason


def test_matrix_group_runs_the_cli_and_compares_cells(tmp_path: Path) -> None:
    """The real group on a 2-cell subset: both worker counts give the same cells, the ratio is the
    ratio of the measured walls, and both ceilings (spin loop, the matrix's cells) are finite positive
    numbers."""
    from benchmarks.matrix import bench_matrix

    extra = ["--attacks", "none", "--defenses", "fedavg,median", "--seeds", "0"]
    extra += ["--set", "federation.rounds=3"]
    r = bench_matrix("quick", workers=2, repeats=1, extra=extra, spin_iterations=500, sample_step=1,
                     ceiling_rounds=1)
    assert r["identical"] and r["cells"] == 2
    assert r["ratio_best"] == pytest.approx(r["wall_1_s"][0] / r["wall_2_s"][0])
    assert 0 < r["machine"]["ceiling"] < 3
    (pair,) = r["pairs"]  # one pair, beside its own ceilings
    assert pair["speedup"] == pytest.approx(r["wall_1_s"][0] / r["wall_2_s"][0])
    assert pair["efficiency"] == pytest.approx(pair["speedup"] / pair["ceiling"])
    assert 0 < pair["cells_ceiling"] < 3  # the matrix's two cells, alone and as two copies
    assert pair["cells_efficiency"] == pytest.approx(pair["speedup"] / pair["cells_ceiling"])
    assert 0 < pair["busy_1"] <= 1 and 0 < pair["busy_2"] <= 1  # within each run: cells' time / processes'
    assert pair["pool_efficiency"] == pytest.approx(pair["busy_2"] / pair["busy_1"])


def test_one_step_benchmark_at_toy_size() -> None:
    """The one-step benchmark itself (the main-entry tests use a stand-in for it): engine against the
    plain batched floor, and the previous path agreeing with the engine."""
    from benchmarks.engine import bench_one_step

    r = bench_one_step(clients=2, model="cnn", repeats=1)
    assert r["engine_s"] > 0 and r["floor_s"] > 0
    assert r["ratio_floor"] == pytest.approx(r["engine_s"] / r["floor_s"])
    assert r["max_rel_diff"] < 1e-4


def test_catalogue_benchmark_at_toy_size() -> None:
    """benchmarks.catalogue: the closed-form cell, the compiled Bulyan selection, FLAME's closed-form
    clustering, DnC's single filter and optimal's line each against the path they replaced,
    identical results, ratio = old / new of the measured times."""
    from benchmarks.catalogue import bench_bulyan, bench_cell, bench_dnc, bench_flame, bench_optimal_line

    for r in (
        bench_cell(rounds=2, repeats=1),
        bench_bulyan(k=15, p=20, f=3, repeats=1),
        bench_flame(k=15, p=20, f=3, repeats=1),
        bench_dnc(k=15, p=20, f=3, repeats=1),
        bench_optimal_line(k=15, p=20, f=3, repeats=1),
    ):
        assert r["identical"]
        assert r["ratio"] == pytest.approx(r["old_s"] / r["new_s"])
