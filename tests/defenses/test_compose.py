"""Pre-aggregators against literal references, composition (labels, counts, pulled-back weights,
reset) and build_defense.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import robustfl.defenses as D
from robustfl.defenses.compose import Composed, build_defense, compose
from robustfl.defenses.krum import Krum
from robustfl.defenses.pre import names as pre_names
from robustfl.defenses.pre.arc import ARC
from robustfl.defenses.pre.bucketing import Bucketing
from robustfl.defenses.pre.clipping import Clipping
from robustfl.defenses.pre.nnm import NNM
from robustfl.errors import ConfigError, ParameterError, UnknownNameError
from robustfl.types import Aggregate, DefenseContext

from ..factories import defense_ctx as ctx
from ..factories import shifted_rows as rows
from . import _refs as ref


class Spy:
    """A rule that records what it saw and returns fixed weights."""

    name = "spy"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, DefenseContext]] = []

    def __call__(self, updates: torch.Tensor, c: DefenseContext) -> Aggregate:
        self.seen.append((updates.shape[0], c.assumed_byzantine, c))
        w = torch.arange(1, updates.shape[0] + 1, dtype=updates.dtype)
        w = w / w.sum()
        return Aggregate(w @ updates, w)


def test_pre_registry_lists_the_four() -> None:
    assert {"clipping", "arc", "bucketing", "nnm"} <= set(pre_names())


@pytest.mark.parametrize("scale", [1e-10, 1.0, 1e12])
def test_clipping_matches_literal(scale: float) -> None:
    u = rows(9, 5, 0, scale)
    tau = float(torch.linalg.vector_norm(u, dim=1).median())
    out, c, pull = Clipping(tau=tau)(u, ctx(2))
    expected = [r * min(1.0, tau / np.linalg.norm(r)) for r in u.numpy()]
    np.testing.assert_allclose(out.numpy(), np.stack(expected), rtol=1e-14)
    assert c.assumed_byzantine == 2 and Clipping(tau=1.0).transform_counts(9, 2) == (9, 2)
    w = torch.rand(9, dtype=torch.float64)
    assert torch.equal(pull(w), w)


@pytest.mark.parametrize(("k", "f"), [(10, 0), (10, 1), (10, 3), (49, 1), (7, 3), (5, 5)])
def test_arc_matches_literal(k: int, f: int) -> None:
    u = rows(k, 4, k + f) * torch.linspace(0.5, 3.0, k, dtype=torch.float64)[:, None]
    out, _, _ = ARC()(u, ctx(f))
    np.testing.assert_allclose(out.numpy(), ref.arc(u.numpy(), f), rtol=1e-14)
    n_clip = math.floor(2 * (f / k) * (k - f) + 1e-9)
    norms = torch.linalg.vector_norm(out, dim=1)
    assert int((norms >= torch.sort(norms, descending=True).values[n_clip] - 1e-12).sum()) >= n_clip


@pytest.mark.parametrize(("k", "size"), [(10, 2), (10, 3), (7, 7), (5, 1), (11, 4)])
def test_bucketing_matches_literal_with_the_same_permutation(k: int, size: int) -> None:
    u = rows(k, 6, k)
    samples = torch.arange(1, k + 1)
    out, c, pull = Bucketing(size=size)(u, ctx(3, 5, num_samples=samples, client_ids=torch.arange(k)))
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(5)).tolist()
    buckets = [perm[i : i + size] for i in range(0, k, size)]
    expected = np.stack([u.numpy()[b].mean(0) for b in buckets])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-14)
    kb = math.ceil(k / size)
    assert out.shape == (kb, 6) and c.assumed_byzantine == min(3, kb) and c.client_ids is None
    assert c.num_samples is not None and c.num_samples.tolist() == [int(samples[b].sum()) for b in buckets]
    w = torch.rand(kb, dtype=torch.float64)
    w /= w.sum()
    expected_w = np.zeros(k)
    for j, b in enumerate(buckets):
        expected_w[b] = float(w[j]) / len(b)
    np.testing.assert_allclose(pull(w).numpy(), expected_w, rtol=1e-14)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bucketing_keeps_a_non_finite_row_in_its_bucket(bad: float, dtype: torch.dtype) -> None:
    """The GEMM path would spread 0 * inf = NaN to every bucket; the exact means keep it in one."""
    k, size = 9, 2
    u = rows(k, 5, 1).to(dtype)
    u[4, 2] = bad
    out, _, _ = Bucketing(size=size)(u, ctx(1, 3))
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(3)).tolist()
    buckets = [perm[i : i + size] for i in range(0, k, size)]
    with np.errstate(invalid="ignore"):
        expected = np.stack([u.numpy()[b].mean(0) for b in buckets])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6 if dtype == torch.float32 else 1e-14)
    spoiled = [j for j, b in enumerate(buckets) if 4 in b]
    assert (~torch.isfinite(out)).nonzero()[:, 0].unique().tolist() == spoiled


@pytest.mark.parametrize(("k", "f"), [(9, 2), (6, 0), (5, 4), (12, 3)])
def test_nnm_matches_literal(k: int, f: int) -> None:
    u = rows(k, 7, k * 10 + f)
    out, c, pull = NNM()(u, ctx(f))
    expected, mix = ref.nnm(u.numpy(), f)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-13, atol=1e-15)
    w = torch.rand(k, dtype=torch.float64)
    np.testing.assert_allclose(pull(w).numpy(), mix.T @ w.numpy(), rtol=1e-14)
    assert c.assumed_byzantine == f


def test_nnm_keeps_non_finite_rows_out_of_finite_neighbourhoods() -> None:
    u = rows(7, 3, 1)
    u[4] = float("nan")
    out, _, _ = NNM()(u, ctx(2))
    assert bool(torch.isnan(out[4]).all())
    finite = [i for i in range(7) if i != 4]
    expected, _ = ref.nnm(u.numpy()[finite], 1)  # m = 7 - 2 = 5 nearest among the 6 finite rows
    np.testing.assert_allclose(out.numpy()[finite], expected, rtol=1e-13)


def test_composition_label_counts_and_pulled_back_weights() -> None:
    label, d = build_defense({"name": "krum", "pre": ["nnm"]})
    assert label == "nnm+krum" and isinstance(d, Composed) and d.label == "nnm+krum"
    assert compose(NNM(), then=Krum()).label == "nnm+krum"
    u = rows(11, 6, 3)
    out = d(u, ctx(2))
    assert out.weights is not None and float(out.weights.sum()) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(out.vector.numpy(), (out.weights @ u).numpy(), rtol=1e-12)
    # the weights are M^T e_selected: the selected mixed row's neighbourhood, 1/(K - f) each
    _, mix = ref.nnm(u.numpy(), 2)
    sel = int(out.stats["selected_index"])
    np.testing.assert_allclose(out.weights.numpy(), mix[sel], rtol=1e-14)


@pytest.mark.parametrize(("k", "f", "size"), [(10, 3, 2), (10, 7, 2), (13, 2, 3), (9, 0, 4)])
def test_bucketing_changes_the_counts_the_rule_sees(k: int, f: int, size: int) -> None:
    spy = Spy()
    d = compose(Bucketing(size=size), then=spy)
    out = d(rows(k, 3, 0), ctx(f))
    kb = math.ceil(k / size)
    assert spy.seen[0][:2] == (kb, min(f, kb)) == d.transform_counts(k, f)
    assert out.weights is not None and out.weights.shape == (k,)
    assert float(out.weights.sum()) == pytest.approx(1.0, abs=1e-12)
    d2 = compose(NNM(), Bucketing(size=size), then=Spy())
    w2 = d2(rows(k, 3, 1), ctx(f)).weights
    assert w2 is not None and float(w2.sum()) == pytest.approx(1.0, abs=1e-12) and bool((w2 >= 0).all())


def test_weights_stop_at_a_rule_without_weights() -> None:
    out = build_defense({"name": "median", "pre": ["nnm"]})[1](rows(7, 3, 0), ctx(1))
    assert out.weights is None


@pytest.mark.parametrize("f", [0, 1, 2, 5])
def test_min_clients(f: int) -> None:
    table = {
        "krum": 2 * f + 3,
        "multi_krum": 2 * f + 3,
        "median": 2 * f + 1,
        "trimmed_mean": 2 * f + 1,
        "bulyan": 4 * f + 3,
        "geometric_median": 2 * f + 1,
        "centered_clipping": 2 * f + 1,
        "foolsgold": 1,
        "flame": 2 * f + 1,
        "dnc": 2 * f + 1,
    }
    for name, need in table.items():
        rule = D.create(name)
        assert rule.min_clients(f) == need, name
        assert rule.admits(need, f) and not rule.admits(need - 1, f), name
    for size in (1, 2, 3):
        d = compose(Bucketing(size=size), then=Krum())
        brute = next(k for k in range(1, 500) if math.ceil(k / size) >= 2 * min(f, math.ceil(k / size)) + 3)
        assert d.min_clients(f) == brute == size * (2 * f + 2) + 1
        assert d.admits(brute, f) and not d.admits(brute - 1, f)
    assert compose(NNM(), then=D.create("bulyan")).min_clients(f) == 4 * f + 3


def test_reset_resets_every_part() -> None:
    d = build_defense({"name": "centered_clipping", "pre": ["nnm"]})[1]
    u1, u2 = rows(7, 4, 1), rows(7, 4, 2)
    first = d(u1, ctx(1)).vector
    second = d(u2, ctx(1)).vector  # starts from the first aggregate
    cc = D.create("centered_clipping")
    assert torch.equal(cc(NNM()(u1, ctx(1))[0], ctx(1)).vector, first)
    assert torch.equal(cc(NNM()(u2, ctx(1))[0], ctx(1)).vector, second)
    d.reset()
    assert torch.equal(d(u1, ctx(1)).vector, first)


def test_build_defense_specs() -> None:
    assert build_defense("median")[0] == "median"
    label, d = build_defense({"name": "multi_krum", "selected": 3, "label": "mk3"})
    assert label == "mk3" and d.selected == 3
    label, d = build_defense({"name": "krum", "pre": ["nnm", {"name": "bucketing", "size": 3}], "label": "x"})
    assert label == "x" and d.label == "x" and [p.name for p in d.pre] == ["nnm", "bucketing"]
    label, _ = build_defense({"name": "median", "pre": [{"name": "clipping", "tau": 2.0}, "arc"]})
    assert label == "clipping+arc+median"
    with pytest.raises(ConfigError, match="name"):
        build_defense({"pre": ["nnm"]})
    with pytest.raises(ConfigError, match="pre"):
        build_defense({"name": "krum", "pre": "nnm"})
    with pytest.raises(ConfigError, match="name"):
        build_defense({"name": "krum", "pre": [{"size": 2}]})
    with pytest.raises(UnknownNameError, match="bucketting"):
        build_defense({"name": "krum", "pre": ["bucketting"]})
    with pytest.raises(ParameterError, match="sise"):
        build_defense({"name": "krum", "pre": [{"name": "bucketing", "sise": 2}]})
    with pytest.raises(ParameterError, match="selectd"):
        build_defense({"name": "multi_krum", "selectd": 2})
    with pytest.raises(ParameterError, match="tau"):
        build_defense({"name": "krum", "pre": ["clipping"]})  # clipping's tau has no default


# --- in-place stages ------------------------------------------------------------------------
def _with_bad_rows(u: torch.Tensor) -> torch.Tensor:
    u = u.clone()
    u[1, 0] = float("nan")
    u[4, 2] = float("inf")
    return u


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pre", ["clipping", "arc"])
def test_apply_inplace_equals_the_fresh_map_bit_for_bit(pre: str, dtype: torch.dtype) -> None:
    u = _with_bad_rows(rows(12, 33, 3, 1e3).to(dtype)) * torch.linspace(0.2, 4.0, 12, dtype=dtype)[:, None]
    tau = float(torch.linalg.vector_norm(u[torch.isfinite(u).all(1)], dim=1).median())
    stage = Clipping(tau=tau) if pre == "clipping" else ARC()
    fresh, _, _ = stage(u, ctx(3))
    work = u.clone()
    out, _, _ = stage.apply_(work, ctx(3))
    assert out.data_ptr() == work.data_ptr()  # written where it was
    assert torch.equal(out.nan_to_num(7.0), fresh.nan_to_num(7.0))
    assert not torch.equal(u.nan_to_num(7.0), fresh.nan_to_num(7.0))  # something was clipped


def test_apply_inplace_all_rows_over_tau() -> None:
    u = rows(6, 5, 1, 10.0)
    out, _, _ = Clipping(tau=1e-3).apply_(u.clone(), ctx(1))
    np.testing.assert_allclose(torch.linalg.vector_norm(out, dim=1).numpy(), 1e-3, rtol=1e-12)


class _Holds:
    """A pre-aggregator that returns fresh rows but keeps them (no fresh_output promise)."""

    name = "holds"

    def __init__(self) -> None:
        self.kept: torch.Tensor | None = None

    def transform_counts(self, k: int, f: int) -> tuple[int, int]:
        return k, f

    def __call__(self, u: torch.Tensor, c: DefenseContext):  # noqa: ANN204
        self.kept = u * 2.0
        return self.kept, c, lambda w: w


@pytest.mark.parametrize("first", ["nnm", "bucketing", "holds", "arc-noop"])
def test_composition_never_writes_to_rows_it_does_not_own(first: str) -> None:
    u = rows(10, 7, 5, 3.0)
    before = u.clone()
    head = {"nnm": NNM(), "bucketing": Bucketing(size=2), "holds": _Holds(), "arc-noop": ARC()}[first]
    tau = float(torch.linalg.vector_norm(u, dim=1).min()) / 2  # every row is clipped
    spy_in, spy_ref = Spy(), Spy()
    f = 0 if first == "arc-noop" else 2  # ARC with f = 0 returns the caller's rows themselves
    got = compose(head, Clipping(tau=tau), then=spy_in)(u, ctx(f, seed=4))
    head_out, c2, _ = head(u.clone(), ctx(f, seed=4))
    want = compose(Clipping(tau=tau), then=spy_ref)(head_out.clone(), c2)
    assert torch.equal(u, before)  # the caller's rows untouched
    assert torch.equal(got.vector, want.vector)
    if isinstance(head, _Holds):
        assert torch.equal(head.kept, u * 2.0)  # a stage without the promise keeps its rows intact


@pytest.mark.parametrize(
    ("first", "in_place"), [("nnm", True), ("bucketing", True), ("holds", False), ("arc-noop", False)]
)
def test_composition_runs_in_place_exactly_on_private_rows(
    first: str, in_place: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    orig_call, orig_apply = Clipping.__call__, Clipping.apply_
    def spy(tag: str, fn):  # noqa: ANN001, ANN202
        return lambda s, u, c: (calls.append(tag), fn(s, u, c))[1]

    monkeypatch.setattr(Clipping, "__call__", spy("fresh", orig_call))
    monkeypatch.setattr(Clipping, "apply_", spy("in_place", orig_apply))
    head = {"nnm": NNM(), "bucketing": Bucketing(size=2), "holds": _Holds(), "arc-noop": ARC()}[first]
    compose(head, Clipping(tau=0.1), then=Spy())(rows(10, 7, 5), ctx(0 if first == "arc-noop" else 2))
    assert calls == ["in_place" if in_place else "fresh"]
