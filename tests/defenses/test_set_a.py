"""Issue 16, set A -- signguard, meamed, mda, caf -- against plain numpy transcriptions of their
papers' formulas on the seeded bank (scales 1e-10 ... 1e12, within 1e-6 relative), and their edge
cases: ties, f-hat = 0, K at the precondition's edge, refusals, thread counts.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import torch
from sklearn.cluster import MeanShift, estimate_bandwidth

import robustfl.defenses as D
from robustfl.errors import InputError, ParameterError

from ..factories import defense_ctx as ctx
from .test_reference import SHAPES, assert_rel, bank, cases

# -- references: loops over rows and coordinates, float64 numpy ------------------------------------


def ref_meamed(u: np.ndarray, f: int) -> np.ndarray:
    k, p = u.shape
    out = np.empty(p)
    for j in range(p):
        col = u[:, j]
        med = float(np.median(col))
        keep = sorted(range(k), key=lambda i: (abs(col[i] - med), i))[: k - f]
        out[j] = sum(col[i] for i in keep) / (k - f)
    return out


def ref_mda(u: np.ndarray, f: int) -> tuple[np.ndarray, tuple[int, ...]]:
    k = len(u)
    dist = np.array([[np.linalg.norm(a - b) for b in u] for a in u])
    best, best_d = tuple(range(k - f)), math.inf
    for s in itertools.combinations(range(k), k - f):  # ByzFL's order, strict improvement only
        d = max((dist[i, j] for i, j in itertools.combinations(s, 2)), default=0.0)
        if d < best_d:
            best, best_d = s, d
    return u[list(best)].mean(0), best


def ref_caf(u: np.ndarray, f: int) -> np.ndarray:
    k = len(u)
    c = np.ones(k)
    best, best_lam = u.mean(0), math.inf
    while c.sum() > k - 2 * f:
        mu = (c[:, None] * u).sum(0) / c.sum()
        d = u - mu
        cov = sum(c[i] * np.outer(d[i], d[i]) for i in range(k)) / c.sum()
        vals, vecs = np.linalg.eigh(cov)
        lam, v = vals[-1], vecs[:, -1]
        if lam < best_lam:
            best, best_lam = mu, lam
        if lam <= 0:
            break
        tau = np.array([float(d[i] @ v) ** 2 for i in range(k)])
        tmax = max(tau[i] for i in range(k) if c[i] > 0)
        c = np.array([c[i] * max(0.0, 1 - tau[i] / tmax) if c[i] > 0 else 0.0 for i in range(k)])
    return best


def ref_signguard(u: np.ndarray, seed: int, fraction: float = 0.1) -> tuple[np.ndarray, list[int]]:
    k, p = u.shape
    norms = np.array([np.linalg.norm(r) for r in u])
    med = float(np.median(norms))
    s1 = {i for i in range(k) if 0.1 * med < norms[i] < 3.0 * med}
    q = max(1, int(fraction * p))
    start = int(torch.randint(0, p - q + 1, (1,), generator=torch.Generator().manual_seed(seed)))
    block = u[:, start : start + q]
    feats = np.array([[np.sum(r > 0) / q, np.sum(r == 0) / q, np.sum(r < 0) / q] for r in block])
    feats = feats / (feats.max(0) + 1e-8)
    bw = estimate_bandwidth(feats, quantile=0.5)
    if bw > 0:
        labels = MeanShift(bandwidth=bw, bin_seeding=True, cluster_all=False).fit(feats).labels_
    else:  # identical points together, the groups ranked by (size, point) descending
        groups = sorted({tuple(r) for r in feats}, key=lambda g: (sum(tuple(r) == g for r in feats), g))[::-1]
        labels = np.array([groups.index(tuple(r)) for r in feats])
    counts = np.bincount(labels[labels >= 0])
    s2 = {i for i in range(k) if labels[i] == int(np.argmax(counts))}
    kept = sorted(s1 & s2)
    if not kept:
        return np.zeros(p), kept
    return sum(u[i] * min(1.0, med / norms[i]) for i in kept) / len(kept), kept


# -- the bank ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
def test_set_a_matches_references(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    t = torch.from_numpy(u)
    assert_rel(D.create("meamed")(t, ctx(f)).vector, ref_meamed(u, f), rtol=1e-13)
    expected, chosen = ref_mda(u, f)
    out = D.create("mda")(t, ctx(f))
    assert out.weights is not None
    assert tuple(torch.nonzero(out.weights).flatten().tolist()) == chosen
    assert_rel(out.vector, expected, rtol=1e-13)
    caf = D.create("caf")(t, ctx(f))
    assert_rel(caf.vector, ref_caf(u, f), rtol=1e-6)
    assert caf.weights is not None
    assert_rel(caf.vector, caf.weights.numpy() @ u, rtol=1e-12)
    expected, kept = ref_signguard(u, seed)
    sg = D.create("signguard")(t, ctx(f, seed))
    assert sg.weights is not None and torch.nonzero(sg.weights).flatten().tolist() == kept
    assert_rel(sg.vector, expected, rtol=1e-12) if kept else None


def test_bank_shapes_are_the_shared_ones() -> None:
    assert (23, 40, 5) in SHAPES and len(SHAPES) == 6


# -- MeaMed -----------------------------------------------------------------------------------------


def test_meamed_ties_go_to_the_lower_index() -> None:
    u = torch.tensor([[-1.0], [1.0], [3.0], [-3.0]], dtype=torch.float64)  # median 0, |d| = 1, 1, 3, 3
    assert D.create("meamed")(u, ctx(1)).vector.item() == pytest.approx((-1 + 1 + 3) / 3, rel=1e-15)
    assert D.create("meamed")(u.flip(0), ctx(1)).vector.item() == pytest.approx((-3 + 1 - 1) / 3, rel=1e-15)
    assert ref_meamed(u.numpy(), 1)[0] == pytest.approx(1.0)


def test_meamed_edges_and_refusal() -> None:
    u = torch.from_numpy(bank(7, 5, 0, 1.0, 3))
    assert_rel(D.create("meamed")(u, ctx(0)).vector, u.numpy().mean(0), rtol=1e-13)
    assert_rel(D.create("meamed")(u, ctx(3)).vector, ref_meamed(u.numpy(), 3), rtol=1e-14)  # K = 2f + 1
    assert D.create("meamed").min_clients(3) == 7
    assert_rel(D.create("meamed")(u, ctx(5)).vector, ref_meamed(u.numpy(), 5), rtol=1e-14)  # outside
    with pytest.raises(InputError, match="meamed: needs K > f_hat rows to keep any, got K = 7, f_hat = 7"):
        D.create("meamed")(u, ctx(7))


# -- MDA --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_mda_brute_force_with_ties(seed: int) -> None:
    """Integer points on a line and in the plane: many subsets share the smallest diameter."""
    rng = np.random.default_rng(seed)
    u = rng.integers(-3, 4, size=(9, 1 + seed % 2)).astype(np.float64)
    for f in range(0, 5):
        expected, chosen = ref_mda(u, f)
        out = D.create("mda")(torch.from_numpy(u), ctx(f))
        assert out.weights is not None
        assert tuple(torch.nonzero(out.weights).flatten().tolist()) == chosen, f
        np.testing.assert_allclose(out.vector.numpy(), expected, rtol=1e-14)
        others = sum(
            max((np.linalg.norm(u[i] - u[j]) for i, j in itertools.combinations(s, 2)), default=0.0)
            == out.stats["diameter"]
            for s in itertools.combinations(range(9), 9 - f)
        )
        assert out.stats["tie_break"] == float(others > 1)


def test_mda_refuses_past_max_subsets() -> None:
    u = torch.from_numpy(bank(12, 3, 0, 1.0, 0))
    message = r"mda: C\(K, f_hat\) = C\(12, 4\) = 495 subsets exceed max_subsets = 494"
    with pytest.raises(InputError, match=message):
        D.create("mda", max_subsets=494)(u, ctx(4))
    assert D.create("mda", max_subsets=495)(u, ctx(4)).stats["num_subsets"] == 495
    with pytest.raises(InputError, match="mda: needs K > f_hat"):
        D.create("mda")(u, ctx(12))
    with pytest.raises(ParameterError, match="mda: parameter max_subsets must be an integer >= 1, got 0"):
        D.create("mda", max_subsets=0)


def test_mda_f0_is_the_mean_and_n30_f10_is_fast() -> None:
    u = bank(30, 1000, 10, 1.0, 0)
    t = torch.from_numpy(u)
    assert_rel(D.create("mda")(t, ctx(0)).vector, u.mean(0), rtol=1e-13)
    start = time.perf_counter()
    out = D.create("mda")(t, ctx(10))
    elapsed = time.perf_counter() - start
    assert out.stats["num_subsets"] == 30_045_015
    assert elapsed < 10, elapsed  # measured ~0.03 s on 2 cores: far from enumerating 30M subsets
    assert out.weights is not None
    # the 20 rows chosen have a diameter no other 20 rows beat: every pair is within it ...
    chosen = torch.nonzero(out.weights).flatten().tolist()
    dist = np.linalg.norm(u[:, None] - u[None], axis=-1)
    assert dist[np.ix_(chosen, chosen)].max() == pytest.approx(out.stats["diameter"], rel=1e-12)
    # ... and at any smaller threshold no 20 rows are pairwise within it (max-clique by brute force
    # would be 30M subsets; the displaced rows are far, so check the honest 20 are the answer)
    honest = sorted(set(range(30)) - set(np.random.default_rng(0).choice(30, 10, replace=False).tolist()))
    assert dist[np.ix_(honest, honest)].max() >= out.stats["diameter"] * (1 - 1e-12)


# -- CAF --------------------------------------------------------------------------------------------


def test_caf_edges_and_refusal() -> None:
    u = torch.from_numpy(bank(9, 6, 2, 1.0, 4))
    out = D.create("caf")(u, ctx(0))  # the loop never runs: the mean
    assert_rel(out.vector, u.numpy().mean(0), rtol=1e-13)
    assert out.stats["iterations"] == 0
    assert_rel(D.create("caf")(u, ctx(4)).vector, ref_caf(u.numpy(), 4), rtol=1e-9)  # K = 2f + 1
    with pytest.raises(InputError, match="caf: needs K > 2 f_hat rows, got K = 9, f_hat = 5"):
        D.create("caf")(u, ctx(5))
    same = u[:1].repeat(5, 1)
    torch.testing.assert_close(D.create("caf")(same, ctx(2)).vector, same[0], rtol=1e-13, atol=0)


def test_caf_removes_a_far_outlier() -> None:
    u = bank(11, 20, 0, 1.0, 5)
    u[3] += 1e6
    out = D.create("caf")(torch.from_numpy(u), ctx(2))
    assert out.weights is not None and float(out.weights[3]) == 0.0
    assert float(np.abs(out.vector.numpy()).max()) < 10


# -- SignGuard --------------------------------------------------------------------------------------


def test_signguard_filters_sign_flip_and_large_norms() -> None:
    rng = np.random.default_rng(0)
    honest = np.abs(rng.normal(size=(14, 200))) * rng.choice([1, -1], p=[0.7, 0.3], size=(14, 200))
    u = np.concatenate([honest, -honest[:3], honest[3:4] * 50])
    out = D.create("signguard")(torch.from_numpy(u), ctx(4, 1))
    assert out.weights is not None
    kept = torch.nonzero(out.weights).flatten().tolist()
    assert set(kept) <= set(range(14)) and len(kept) >= 10, kept
    expected, ref_kept = ref_signguard(u, 1)
    assert kept == ref_kept
    assert_rel(out.vector, expected, rtol=1e-12)


def test_signguard_draws_from_the_generator_and_validates() -> None:
    u = torch.from_numpy(bank(11, 200, 2, 1.0, 2))
    a = D.create("signguard", fraction=0.05)(u, ctx(2, 7))
    b = D.create("signguard", fraction=0.05)(u, ctx(2, 7))
    assert torch.equal(a.vector, b.vector)
    expected, _ = ref_signguard(u.numpy(), 7, fraction=0.05)
    assert_rel(a.vector, expected, rtol=1e-12)
    assert D.create("signguard")(torch.zeros(4, 3, dtype=torch.float64), ctx(0)).stats["empty"] == 1
    with pytest.raises(ParameterError, match="signguard: parameter fraction must be a finite number > 0"):
        D.create("signguard", fraction=0.0)
    with pytest.raises(ParameterError, match="signguard: parameter upper must be"):
        D.create("signguard", lower=2.0, upper=1.0)


# -- all four ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["signguard", "meamed", "mda", "caf"])
def test_bit_identical_across_thread_counts(name: str) -> None:
    g = torch.Generator().manual_seed(3)
    u = torch.randn(21, 70_001, generator=g, dtype=torch.float64) + torch.randn(1, 70_001, generator=g)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = D.create(name)(u, ctx(3, 1)).vector
        torch.set_num_threads(2)
        two = D.create(name)(u, ctx(3, 1)).vector
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


@pytest.mark.parametrize("name", ["signguard", "meamed", "mda", "caf"])
def test_float32_and_non_finite_rows(name: str) -> None:
    u = bank(11, 30, 2, 1.0, 2)
    a = D.create(name)(torch.from_numpy(u), ctx(2)).vector
    b = D.create(name)(torch.from_numpy(u).float(), ctx(2)).vector
    assert b.dtype == torch.float32
    assert float((a - b.double()).abs().max()) <= 1e-4 * float(a.abs().max()), name
    bad = torch.from_numpy(u).clone()
    bad[4, 2] = float("inf")
    if name != "meamed":  # the row-wise rules drop the row: a finite answer
        assert bool(torch.isfinite(D.create(name)(bad, ctx(2)).vector).all()), name
