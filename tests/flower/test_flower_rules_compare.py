"""Flower 1.42's Message-API robust strategies beside robustfl's rules (docs/flower-rules.md):
one agreement and two documented differences, pinned on small hand-built replies, plus a smoke
run of ``benchmarks.flower_rules`` at a small P."""

from __future__ import annotations

import os

import pytest

os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
os.environ["FLWR_DISABLE_UPDATE_CHECK"] = "1"
pytest.importorskip("flwr")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import flower_rules as fr  # noqa: E402
from robustfl.simulation.components import build_defense  # noqa: E402
from robustfl.types import DefenseContext  # noqa: E402

STRATEGY = fr.flwr_modules()


def replies(models: np.ndarray, w: np.ndarray, f: int) -> fr.Replies:
    """Replies carrying the given (K, P) float64 models, equal num-examples."""
    case = fr.Case("test", "float64", attack="none", k=len(models), f=f)
    exact = models - w
    return fr.Replies(case, w, models, exact, exact, [10] * len(models), [], ((models.shape[1],),))


def test_fedmedian_is_robustfl_median_bit_for_bit_on_float64_models() -> None:
    """Agreement: FedMedian's per-coordinate numpy median of the models is robustfl's median of
    the same rows, bit for bit (both: mean of the two middle values at even K); on the update rows
    the two differ only by the rounding of w + u_k - w."""
    r = fr.make_replies(fr.Case("median", "float64", seed=7), 3000)
    arrays, _ = STRATEGY.FedMedian().aggregate_train(1, fr.messages(r))
    flower_model = torch.from_numpy(arrays["layer0"].numpy())
    ctx = DefenseContext(assumed_byzantine=r.case.f)
    median = build_defense("median")
    assert torch.equal(median(torch.from_numpy(r.models), ctx).vector, flower_model)
    on_updates = median(torch.from_numpy(r.rows), ctx).vector.numpy()
    bound = 4 * np.finfo(np.float64).eps * np.abs(r.models).max()
    assert np.abs((flower_model.numpy() - r.w) - on_updates).max() <= bound


def test_krum_neighbours_below_the_guarantee_flower_uses_one_robustfl_none() -> None:
    """Difference: Flower scores with max(1, K - f - 2) neighbours, robustfl with the paper's
    max(0, K - f - 2). At K = 3, f = 1 (below Krum's K >= 2f + 3) robustfl's scores are all 0
    and the lowest index wins (the far row 0); Flower picks one of the close pair."""
    w = np.zeros(2)
    r = replies(np.array([[10.0, 10.0], [0.0, 0.0], [0.1, 0.0]]), w, f=1)
    _, flower_sel = fr.flower_run(STRATEGY, "Krum", r)
    ours, our_sel = fr.robustfl_run("krum", r)
    assert our_sel == [0] and np.array_equal(ours, [10.0, 10.0])
    assert flower_sel is not None and flower_sel[0] in (1, 2)


def test_fedtrimmedavg_beta_as_fraction_trims_nothing_at_k49_f1() -> None:
    """Difference: FedTrimmedAvg(beta = f/K) trims int(beta * K) values per side; at K = 49,
    f = 1 that is int(0.999...) = 0, so one outlier row moves the mean; robustfl trims f = 1."""
    k, p = 49, 4
    models = np.tile(np.arange(k, dtype=np.float64)[:, None], (1, p))
    models[7] = 1e6
    r = replies(models, np.zeros(p), f=1)
    flower, _ = fr.flower_run(STRATEGY, "FedTrimmedAvg", r)
    ours, _ = fr.robustfl_run("trimmed_mean", r)
    assert np.allclose(flower, models.mean(0))
    assert np.allclose(ours, np.sort(models, axis=0)[1:-1].mean(0))
    assert flower[0] > 2e4 > ours[0]


def test_benchmark_runs_and_explains_each_pair() -> None:
    res = fr.run(2000, [fr.Case("sign_flip", "float64", seed=1)])
    rows = {r["robustfl"]: r for r in res["rows"]}
    assert set(rows) == {"krum", "multi_krum", "bulyan", "median", "trimmed_mean"}
    assert all(r["why"] != "unexplained" for r in rows.values())
    for rule in ("krum", "multi_krum", "bulyan"):
        assert rows[rule]["robustfl_set"] == rows[rule]["paper_set"]
    assert rows["bulyan"]["robustfl_set_check"] < 1e-12
    for rule in ("median", "trimmed_mean"):
        assert rows[rule]["why"].startswith("agree") and rows[rule]["rel"] < 1e-12
    assert "| Krum / krum |" in fr.table(res["rows"], res["distance_checks"])
