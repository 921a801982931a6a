"""Parameters, refusals, rows with non-finite entries, running outside the guarantee, and state
under partial sharing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import robustfl.defenses as D
from robustfl.errors import InputError, ParameterError
from robustfl.types import DefenseContext

from ..factories import defense_ctx as ctx
from ..factories import shifted_rows as rows
from . import _refs as ref


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("multi_krum", {"selected": 0}, "multi_krum: parameter selected must be an integer >= 1, got 0"),
        ("multi_krum", {"selected": 2.5}, "parameter selected must be an integer >= 1, got 2.5"),
        (
            "geometric_median",
            {"nu": 0.0},
            "geometric_median: parameter nu must be a finite number > 0, got 0.0",
        ),
        ("geometric_median", {"max_iter": 0}, "parameter max_iter must be an integer >= 1, got 0"),
        ("centered_clipping", {"tau": -1.0}, "centered_clipping: parameter tau must be a finite number > 0"),
        ("centered_clipping", {"tau": math.inf}, "parameter tau must be a finite number > 0, got inf"),
        ("centered_clipping", {"iterations": True}, "parameter iterations must be an integer >= 1, got True"),
        ("foolsgold", {"kappa": 0}, "foolsgold: parameter kappa must be a finite number > 0, got 0"),
        ("flame", {"noise": -0.1}, "flame: parameter noise must be a finite number >= 0, got -0.1"),
        ("dnc", {"iterations": 0}, "dnc: parameter iterations must be an integer >= 1, got 0"),
        ("dnc", {"subsample": "10"}, "dnc: parameter subsample must be an integer >= 1, got '10'"),
        ("dnc", {"c": float("nan")}, "dnc: parameter c must be a finite number >= 0, got nan"),
    ],
)
def test_bad_parameters(name: str, params: dict, message: str) -> None:
    with pytest.raises(ParameterError) as err:
        D.create(name, **params)
    assert message in str(err.value)


def test_bad_pre_parameters() -> None:
    with pytest.raises(ParameterError, match="bucketing: parameter size must be an integer >= 1, got 0"):
        D.pre_registry.create("bucketing", size=0)
    with pytest.raises(ParameterError, match="clipping: parameter tau must be a finite number > 0, got 0"):
        D.pre_registry.create("clipping", tau=0)


def test_refusals_only_where_nothing_can_be_computed() -> None:
    u = rows(6, 3, 0)
    with pytest.raises(InputError, match="trimmed_mean: needs K > 2 f_hat rows.*K = 6, f_hat = 3"):
        D.create("trimmed_mean")(u, ctx(3))
    with pytest.raises(InputError, match="bulyan: needs K >= 4 f_hat \\+ 1 rows, got K = 6, f_hat = 2"):
        D.create("bulyan")(u, ctx(2))
    with pytest.raises(InputError, match="floating"):
        D.create("krum")(torch.ones(3, 2, dtype=torch.int64), ctx(0))
    # outside the guarantee, but computable: each still gives an answer
    out = D.create("krum")(u, ctx(3))  # K = 6 < 2*3 + 3; 1 neighbour
    assert out.stats["selected_index"] == ref.krum(u.numpy(), 3)[1]
    np.testing.assert_allclose(
        D.create("bulyan")(rows(5, 3, 1), ctx(1)).vector.numpy(), ref.bulyan(rows(5, 3, 1).numpy(), 1)
    )
    mk = D.create("multi_krum", selected=50)(u, ctx(1))
    assert mk.stats["num_selected"] == 6 and torch.allclose(mk.vector, u.mean(0))
    assert D.create("multi_krum")(u, ctx(9)).stats["num_selected"] == 1  # K - f <= 0: at least one row


def test_single_row() -> None:
    u = rows(1, 4, 0)
    for name in (
        "krum",
        "multi_krum",
        "median",
        "trimmed_mean",
        "bulyan",
        "geometric_median",
        "foolsgold",
        "flame",
        "dnc",
    ):
        out = D.create(name)(u, ctx(0))
        torch.testing.assert_close(out.vector, u[0], rtol=1e-12, atol=0, msg=name)


def test_non_finite_rows() -> None:
    u = rows(9, 5, 3)
    bad = u.clone()
    bad[2] = float("nan")
    bad[6, 1] = float("inf")
    finite = [i for i in range(9) if i not in (2, 6)]
    # Krum never prefers a row with a non-finite entry, and scores the others as if those were far
    out = D.create("krum")(bad, ctx(2))
    assert int(out.stats["selected_index"]) in finite and bool(torch.isfinite(out.vector).all())
    # median: NaN sorts as the largest value, like +inf
    as_inf = torch.nan_to_num(bad, nan=math.inf)
    torch.testing.assert_close(
        D.create("median")(bad, ctx(2)).vector, D.create("median")(as_inf, ctx(2)).vector
    )
    assert bool(torch.isfinite(D.create("trimmed_mean")(bad, ctx(2)).vector).all())
    # rules that drop non-finite rows: the same as on the finite rows alone, weight 0 on the others
    for name in ("geometric_median", "dnc", "flame", "foolsgold"):
        a = D.create(name)(bad, ctx(2, 1))
        b = D.create(name)(u[finite], ctx(2, 1, client_ids=torch.tensor(finite)))
        torch.testing.assert_close(a.vector, b.vector, rtol=1e-10, atol=1e-12, msg=name)
        assert a.weights is not None and float(a.weights[2]) == 0 == float(a.weights[6]), name
    cc = D.create("centered_clipping", tau=1.0)(bad, ctx(2)).vector
    expected = ref.centered_clipping([u.numpy()[finite]], 1.0, 1)[0] * len(finite) / 9  # 1/K stays
    np.testing.assert_allclose(cc.numpy(), expected, rtol=1e-12)
    assert D.create("geometric_median")(bad, ctx(2)).stats["excluded"] == 2


def test_zero_rows_and_identical_rows() -> None:
    z = torch.zeros(5, 3, dtype=torch.float64)
    for name in (
        "krum",
        "multi_krum",
        "median",
        "trimmed_mean",
        "bulyan",
        "geometric_median",
        "centered_clipping",
        "foolsgold",
        "flame",
        "dnc",
    ):
        out = D.create(name)(z, ctx(1))
        assert bool((out.vector == 0).all()), name
    same = rows(1, 4, 0).repeat(6, 1)
    for name in ("krum", "multi_krum", "median", "trimmed_mean", "geometric_median", "flame", "dnc"):
        torch.testing.assert_close(D.create(name)(same, ctx(1)).vector, same[0], rtol=1e-12, atol=0, msg=name)
    fg = D.create("foolsgold")(same, ctx(1))  # identical histories: every client looks like a Sybil
    assert fg.weights is not None and bool((fg.weights == 0).all()) and bool((fg.vector == 0).all())


def test_centered_clipping_state_under_partial_sharing() -> None:
    """Full-length state: only the shared coordinates move; unseen ones start at 0."""
    p = 8
    r1, r2, r3 = rows(6, 5, 1), rows(6, 3, 2), rows(6, p, 3)
    c1, c2 = torch.tensor([0, 2, 3, 5, 6]), torch.tensor([1, 2, 7])
    rule = D.create("centered_clipping", tau=0.7)
    full = np.zeros(p)

    def literal(u: torch.Tensor, coords: np.ndarray) -> np.ndarray:
        v = full[coords].copy()
        acc = np.zeros_like(v)
        for row in u.numpy():
            x = row - v
            acc += x * min(1.0, 0.7 / np.linalg.norm(x))
        return v + acc / len(u)

    for u, c in ((r1, c1), (r2, c2)):
        expected = literal(u, c.numpy())
        full[c.numpy()] = expected
        out = rule(u, ctx(1, coordinates=c)).vector
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-13)
    out = rule(r3, ctx(1)).vector  # a full round starts from the merged state
    np.testing.assert_allclose(out.numpy(), literal(r3, np.arange(p)), rtol=1e-13)


def test_foolsgold_histories_under_partial_sharing() -> None:
    p = 6
    rule = D.create("foolsgold")
    history: dict[int, np.ndarray] = {}
    rng = np.random.default_rng(0)
    for coords, ids in (
        ([0, 1, 4], [0, 1, 2, 3]),
        ([2, 4, 5], [3, 1, 0, 4]),
        (list(range(p)), [0, 1, 2, 3, 4]),
    ):
        u = rng.normal(size=(len(ids), len(coords)))
        full = np.zeros((len(ids), p))
        full[:, coords] = u
        # the reference keeps full-length histories; the aggregate is over the shared coordinates
        expected = ref.foolsgold_round(history, ids, full, 1.0)[coords]
        out = rule(
            torch.from_numpy(u), ctx(0, client_ids=torch.tensor(ids), coordinates=torch.tensor(coords))
        )
        np.testing.assert_allclose(out.vector.numpy(), expected, rtol=1e-12, atol=1e-14)


def test_foolsgold_rejects_duplicate_client_ids() -> None:
    with pytest.raises(InputError, match="distinct"):
        D.create("foolsgold")(rows(3, 2, 0), ctx(0, client_ids=torch.tensor([1, 1, 2])))


def test_geometric_median_reports_iterations_and_stops_at_max_iter() -> None:
    u = rows(15, 10, 4)
    full = D.create("geometric_median")(u, ctx(0))
    assert full.stats["converged"] == 1.0 and 1 < full.stats["iterations"] < 1000
    short = D.create("geometric_median", max_iter=2)(u, ctx(0))
    assert short.stats["iterations"] == 2 and short.stats["converged"] == 0.0
    # two literal Weiszfeld steps from the mean
    v = u.numpy()
    z = v.mean(0)
    s = np.linalg.norm(v, axis=1).mean()
    for _ in range(2):
        beta = 1 / np.maximum(1e-6 * s, np.linalg.norm(v - z, axis=1))
        z = beta @ v / beta.sum()
    np.testing.assert_allclose(short.vector.numpy(), z, rtol=1e-12)


def test_dnc_removes_floor_c_f_rows_per_iteration() -> None:
    u = rows(10, 50, 0)
    for c, f, removed_at_most in ((1.0, 2, 2), (1.5, 3, 4), (0.3, 10, 3), (0.0, 4, 0)):
        out = D.create("dnc", c=c, iterations=1)(u, ctx(f))
        assert out.stats["num_kept"] == 10 - removed_at_most


def test_stats_values() -> None:
    u = rows(11, 6, 2)
    u[0] *= 50
    out = D.create("flame")(u, ctx(2))
    assert out.stats["median_norm"] == pytest.approx(
        float(torch.linalg.vector_norm(u, dim=1).median()), rel=1e-14
    )
    cc = D.create("centered_clipping")(u, ctx(2))
    assert cc.stats["tau"] == pytest.approx(float(torch.linalg.vector_norm(u, dim=1).median()), rel=1e-14)
    assert cc.stats["clipped_fraction"] == pytest.approx(5 / 11)
    kr = D.create("krum")(u, ctx(2))
    scores = sorted(ref.krum_scores(list(u.numpy()), 2))
    assert kr.stats["score_gap"] == pytest.approx((scores[1] - scores[0]) / scores[1], rel=1e-9)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_coordinate_rules_split_over_threads_bit_for_bit(
    threads: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Median / trimmed mean / Bulyan's selections split the columns over threads: the same bits
    as a whole-array numpy reference, whatever the thread count."""
    from robustfl.defenses import _select

    monkeypatch.setattr(_select.torch, "get_num_threads", lambda: threads)
    g = torch.Generator().manual_seed(7)
    u = (torch.randn(21, 60_001, generator=g, dtype=torch.float64) * 1e3).to(dtype)
    u[2, 5], u[4, 60_000], u[0, 30_000] = float("nan"), float("inf"), -float("inf")
    assert u.numel() >= _select._SPLIT
    a = u.numpy()
    # the order statistics 5..15 summed in float64, in order (robustfl/_order_stats.py), cast back
    want_mean = (np.sort(a, axis=0)[5:16].astype(np.float64).sum(axis=0) / 11).astype(a.dtype)
    want_kth = np.partition(a, 10, axis=0)[10]
    assert np.array_equal(_select.mean_of_order_stats(u, 5, 15).numpy(), want_mean, equal_nan=True)
    assert np.array_equal(_select.kth_smallest(u, 10).numpy(), want_kth, equal_nan=True)
    med = D.create("median")(u, DefenseContext(assumed_byzantine=2)).vector.numpy()
    assert np.array_equal(med, np.partition(a, 10, axis=0)[10], equal_nan=True)


def test_foolsgold_copy_is_independent() -> None:
    """The oracle's trial copy of FoolsGold (its own ``__deepcopy__``): the same history, the same
    next output, and a call on the copy leaves the original's history as it was."""
    import copy

    from robustfl import defenses
    from robustfl.types import DefenseContext

    g = torch.Generator().manual_seed(4)
    rule = defenses.create("foolsgold")
    ctx = DefenseContext(assumed_byzantine=2, client_ids=torch.arange(9))
    for _ in range(3):
        rule(torch.randn(9, 12, generator=g), ctx)
    before = rule._hist.clone()
    trial = copy.deepcopy(rule)
    u = torch.randn(9, 12, generator=g)
    out = trial(u, ctx)
    assert torch.equal(rule._hist, before) and rule._index == trial._index  # the original as it was
    assert not torch.equal(trial._hist, before)  # the copy moved on
    assert torch.equal(out.vector, rule(u, ctx).vector)  # the same state: the same output
