"""Issue 16, set B: SMEA, MoNNA, FoundationFL and FLDetector against plain numpy transcriptions of
their formulas (brute force, Python loops) on the seeded bank at scales 1e-10 ... 1e12 (1e-6
relative), plus edge cases, refusals, and FLDetector over several rounds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import robustfl.defenses as D
from robustfl.defenses.fldetector import kmeans_1d, lbfgs_hvp
from robustfl.errors import InputError, ParameterError
from robustfl.testing.strategies import SCALES

from ..factories import defense_ctx as ctx
from .test_reference import assert_rel, bank

SHAPES = [(7, 5, 1), (11, 20, 2), (9, 1, 2), (4, 6, 0), (10, 3, 3), (13, 8, 3)]


def cases() -> list:
    return [
        pytest.param(k, p, f, s, i, id=f"K{k}-P{p}-f{f}-s{s:g}")
        for s in SCALES
        for i, (k, p, f) in enumerate(SHAPES)
    ]


# -- literal transcriptions ------------------------------------------------------------------------


def smea_ref(u: np.ndarray, f: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """argmin over |S| = K - f of the largest eigenvalue of (1/|S|) sum (u_i - mean)(u_i - mean)^T."""
    best, best_s = math.inf, tuple(range(len(u) - f))
    for s in itertools.combinations(range(len(u)), len(u) - f):
        rows = u[list(s)]
        c = rows - rows.mean(0)
        lam = float(np.linalg.eigvalsh(c.T @ c / len(s))[-1])
        if lam < best:
            best, best_s = lam, s
    return u[list(best_s)].mean(0), best_s


def monna_ref(u: np.ndarray, f: int, pivot: np.ndarray) -> tuple[np.ndarray, list[int]]:
    d = [float(np.linalg.norm(row - pivot)) for row in u]
    chosen = sorted(range(len(u)), key=lambda i: (d[i], i))[: len(u) - f]
    return np.mean([u[i] for i in chosen], axis=0), sorted(chosen)


def foundationfl_ref(u: np.ndarray, f: int, rule: str, m: int) -> tuple[np.ndarray, int]:
    """Fang et al. (NDSS 2025) Eqs. (2)-(7): extremes per coordinate, s_i = min(||u_i - g_max||,
    ||u_i - g_min||), i* = the first argmax, m copies of u_i*, then the trimmed mean (c = f) or the
    median of the K + m values per coordinate. Returns (the aggregate, i*)."""
    k, p = u.shape
    g_max = [max(u[i][j] for i in range(k)) for j in range(p)]
    g_min = [min(u[i][j] for i in range(k)) for j in range(p)]
    s = [
        min(
            math.sqrt(sum((u[i][j] - g_max[j]) ** 2 for j in range(p))),
            math.sqrt(sum((u[i][j] - g_min[j]) ** 2 for j in range(p))),
        )
        for i in range(k)
    ]
    star = 0
    for i in range(k):
        if s[i] > s[star]:
            star = i
    rows = [list(r) for r in u] + [list(u[star])] * m
    out = np.empty(p)
    for j in range(p):
        col = sorted(r[j] for r in rows)
        if rule == "median":
            n = len(col)
            out[j] = col[n // 2] if n % 2 else (col[n // 2 - 1] + col[n // 2]) / 2
        else:
            kept = col[f : len(col) - f]
            out[j] = sum(kept) / len(kept)
    return out, star


def lbfgs_ref(ss: list[np.ndarray], ys: list[np.ndarray], v: np.ndarray) -> np.ndarray:
    """The compact L-BFGS product as written in the authors' ``lbfgs`` (numpy, explicit inverse)."""
    s, y = np.stack(ss, 1), np.stack(ys, 1)
    sty = s.T @ y
    low = sty - np.triu(sty)
    sigma = float(ys[-1] @ ss[-1]) / float(ss[-1] @ ss[-1])
    mat = np.block([[sigma * (s.T @ s), low], [low.T, -np.diag(np.diag(sty))]])
    p = np.concatenate([s.T @ (sigma * v), y.T @ v])
    return sigma * v - np.concatenate([sigma * s, y], 1) @ np.linalg.inv(mat) @ p


# -- the bank --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), cases())
def test_smea_matches_brute_force(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    expected, chosen = smea_ref(u, f)
    out = D.create("smea")(torch.from_numpy(u), ctx(f))
    assert_rel(out.vector, expected)
    assert out.weights is not None
    assert torch.nonzero(out.weights).flatten().tolist() == list(chosen)
    assert out.stats["num_subsets"] == math.comb(k, f)


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), cases())
def test_monna_matches_transcription(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    ref = np.random.default_rng(seed + 100).normal(size=p) * scale + u.mean(0)
    expected, chosen = monna_ref(u, f, ref)
    out = D.create("monna")(torch.from_numpy(u), ctx(f, reference=torch.from_numpy(ref)))
    assert_rel(out.vector, expected)
    assert out.weights is not None and torch.nonzero(out.weights).flatten().tolist() == chosen
    for i in (0, k - 1):  # ByzFL's idx: the pivot row is one of its own neighbours
        expected, chosen = monna_ref(u, f, u[i])
        out = D.create("monna", pivot=i)(torch.from_numpy(u), ctx(f))
        assert_rel(out.vector, expected)
        assert i in chosen


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), cases())
@pytest.mark.parametrize("rule", ["trimmed_mean", "median"])
def test_foundationfl_matches_transcription(
    k: int, p: int, f: int, scale: float, seed: int, rule: str
) -> None:
    u = bank(k, p, f, scale, seed)
    expected, star = foundationfl_ref(u, f, rule, k // 2)
    out = D.create("foundationfl", rule=rule)(torch.from_numpy(u), ctx(f))
    assert_rel(out.vector, expected)
    assert out.stats["num_synthetic"] == k // 2 and out.stats["selected_index"] == star
    assert out.stats["tie_break"] == 0.0 and out.stats["score_gap"] > 1e-6
    for m in (0, 2, 3 * k):
        if rule == "trimmed_mean" and k + m <= 2 * f:
            continue
        out = D.create("foundationfl", rule=rule, synthetic=m)(torch.from_numpy(u), ctx(f))
        assert_rel(out.vector, foundationfl_ref(u, f, rule, m)[0])
    plain = D.create(rule)(torch.from_numpy(u), ctx(f)).vector  # m = 0: the foundational rule itself
    bare = D.create("foundationfl", rule=rule, synthetic=0)(torch.from_numpy(u), ctx(f)).vector
    assert torch.equal(bare, plain)


@pytest.mark.parametrize("scale", SCALES)
def test_fldetector_lbfgs_and_first_rounds(scale: float) -> None:
    rng = np.random.default_rng(3)
    ss = [rng.normal(size=12) * scale for _ in range(4)]
    a = rng.normal(size=(12, 12))
    h = a @ a.T / 12 + np.eye(12)
    ys = [h @ s for s in ss]
    v = rng.normal(size=12) * scale
    st, yt = [torch.from_numpy(s) for s in ss], [torch.from_numpy(y) for y in ys]
    assert_rel(lbfgs_hvp(st, yt, torch.from_numpy(v)), lbfgs_ref(ss, ys, v), rtol=1e-9)
    last = lbfgs_hvp(st, yt, st[-1])
    assert_rel(last, ys[-1], rtol=1e-8)  # the secant equation B s = y holds for the pairs
    # before any detection the rule is its inner rule (median by default) on every row
    rule = D.create("fldetector")
    for r in range(3):
        u = bank(9, 6, 2, scale, r)
        out = rule(torch.from_numpy(u), ctx(2, global_model=torch.full((6,), float(r) * scale)))
        assert_rel(out.vector, np.median(u, axis=0), rtol=1e-15)


# -- edges and refusals ----------------------------------------------------------------------------


def test_f_zero_is_the_mean_and_ties_go_to_the_lower_index() -> None:
    u = bank(6, 4, 0, 1.0, 1)
    for name in ("smea", "monna"):
        c = ctx(0, reference=torch.zeros(4, dtype=torch.float64))
        assert_rel(D.create(name)(torch.from_numpy(u), c).vector, u.mean(0), rtol=1e-14)
    # FoundationFL with f = 0: the mean of the K + m rows, u_i* counted m + 1 times
    out = D.create("foundationfl")(torch.from_numpy(u), ctx(0))
    i = int(out.stats["selected_index"])
    assert_rel(out.vector, (u.sum(0) + 3 * u[i]) / 9, rtol=1e-14)
    # four equidistant rows around the reference: the boundary tie keeps the lower indices
    v = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    out = D.create("monna")(torch.from_numpy(v), ctx(1, reference=torch.zeros(2, dtype=torch.float64)))
    assert torch.nonzero(out.weights).flatten().tolist() == [0, 1, 2] and out.stats["tie_break"] == 1.0
    # SMEA on duplicated rows: equal eigenvalues, the first subset in lexicographic order
    w = np.array([[0.0], [0.0], [5.0], [5.0]])
    out = D.create("smea")(torch.from_numpy(w), ctx(2))
    assert torch.nonzero(out.weights).flatten().tolist() == [0, 1] and out.stats["tie_break"] == 1.0


def test_preconditions_and_refusals() -> None:
    assert [D.create(n).min_clients(3) for n in ("smea", "monna", "foundationfl", "fldetector")] == [7] * 4
    assert D.create("fldetector", rule="krum").min_clients(3) == 9
    u = torch.from_numpy(bank(7, 3, 3, 1.0, 0))
    with pytest.raises(InputError, match=r"^smea: exact search over C\(30, 25\) = 142,506 subsets exceeds "
                       r"max_subsets = 100,000 \(K = 30, f_hat = 5\)$"):
        D.create("smea")(torch.zeros(30, 2, dtype=torch.float64), ctx(5))
    zeros = torch.zeros(12, 2, dtype=torch.float64)
    with pytest.raises(InputError, match=r"C\(12, 9\) = 220 subsets exceeds max_subsets = 219"):
        D.create("smea", max_subsets=219)(zeros, ctx(3))
    assert D.create("smea", max_subsets=220)(zeros, ctx(3)).vector.sum() == 0
    with pytest.raises(InputError, match="smea: needs K > f_hat rows, got K = 7, f_hat = 7"):
        D.create("smea")(u, ctx(7))
    with pytest.raises(InputError, match="monna: pivot 'reference' needs the server's reference update"):
        D.create("monna")(u, ctx(1))
    with pytest.raises(InputError, match="monna: pivot row 9 does not exist, got K = 7"):
        D.create("monna", pivot=9)(u, ctx(1))
    with pytest.raises(InputError, match=r"foundationfl: the trimmed mean needs K \+ synthetic > 2 f_hat"):
        D.create("foundationfl", synthetic=0)(u, ctx(4))
    with pytest.raises(InputError, match="fldetector: needs ctx.global_model of shape \\(3,\\)"):
        D.create("fldetector")(u, ctx(1))
    for name, kw, msg in [
        ("smea", {"max_subsets": 0}, "smea: parameter max_subsets must be an integer >= 1, got 0"),
        ("monna", {"pivot": "median"}, "monna: parameter pivot must be one of 'reference', got 'median'"),
        ("monna", {"pivot": -1}, "monna: parameter pivot must be 'reference' or an integer >= 0, got -1"),
        ("foundationfl", {"rule": "krum"}, "foundationfl: parameter rule must be one of"),
        ("foundationfl", {"synthetic": -1}, "parameter synthetic must be an integer >= 0, got -1"),
        ("fldetector", {"window": 0}, "fldetector: parameter window must be an integer >= 1, got 0"),
        ("fldetector", {"rule": "fldetector"}, "fldetector: parameter rule must be a defense name or table"),
    ]:
        with pytest.raises(ParameterError, match=msg):
            D.create(name, **kw)
    assert D.create("monna").needs_reference and not D.create("monna", pivot=0).needs_reference
    assert "permutation_invariant" not in D.create("monna", pivot=0).properties


def test_foundationfl_small_case_by_hand() -> None:
    """K = 5, f = 1: g_max = (10, 10), g_min = (0, 0); s = (0, sqrt 2, 2 sqrt 2, 3, 0) (row 3:
    min(||(-7, -10)||, ||(3, 0)||) = 3), so i* = 3 and m = floor(5 / 2) = 2 copies of (3, 0) join.
    Coordinate 0: 0 1 2 3 3 3 10, coordinate 1: 0 0 0 0 1 2 10. Trimmed mean (drop one each side):
    (1 + 2 + 3 + 3 + 3) / 5 = 2.4 and (0 + 0 + 0 + 1 + 2) / 5 = 0.6; median: the 4th values, 3 and 0."""
    u = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 0.0], [10.0, 10.0]], dtype=torch.float64)
    out = D.create("foundationfl")(u, ctx(1))
    assert out.vector.tolist() == pytest.approx([2.4, 0.6], rel=1e-15)
    assert out.stats == pytest.approx(
        {"selected_index": 3.0, "num_synthetic": 2.0, "score_gap": 1 - 2 * math.sqrt(2) / 3, "tie_break": 0.0}
    )
    assert D.create("foundationfl", rule="median")(u, ctx(1)).vector.tolist() == [3.0, 0.0]
    # an explicit m: 4 copies make (3, 0) the trimmed mean's majority: 0 1 2 3 3 3 3 3 10 -> 18 / 7
    out = D.create("foundationfl", synthetic=4)(u, ctx(1))
    assert out.vector.tolist() == pytest.approx([18 / 7, 3 / 7], rel=1e-15)


def test_foundationfl_edges() -> None:
    # a one-sided push: the pushed rows sit on g_max (score 0), so an honest row is copied
    rng = np.random.default_rng(0)
    honest = rng.normal(size=(7, 5))
    u = np.concatenate([honest, np.full((3, 5), 1e6)])
    out = D.create("foundationfl", rule="median")(torch.from_numpy(u), ctx(3))
    assert out.stats["selected_index"] < 7 and out.stats["num_synthetic"] == 5
    v = out.vector.numpy()
    assert np.all(v >= honest.min(0)) and np.all(v <= honest.max(0))
    # odd K rounds down; a non-finite row is never chosen and leaves the extremes and scores alone
    w = bank(7, 4, 2, 1.0, 5)
    expected, star = foundationfl_ref(w, 2, "trimmed_mean", 3)
    out = D.create("foundationfl")(torch.from_numpy(w), ctx(2))
    assert out.stats["num_synthetic"] == 3 and out.stats["selected_index"] == star
    assert_rel(out.vector, expected)
    for bad in (math.nan, math.inf):
        x = np.concatenate([w, np.full((1, 4), bad)])
        out = D.create("foundationfl", rule="median")(torch.from_numpy(x), ctx(2))
        assert out.stats["selected_index"] == star
    assert D.create("foundationfl")(torch.full((4, 3), math.nan, dtype=torch.float64), ctx(1)).stats[
        "selected_index"
    ] == 0.0
    # identical rows: every score is 0, row 0 is copied, no tie is reported (the copies are equal)
    same = torch.ones(5, 3, dtype=torch.float64)
    out = D.create("foundationfl")(same, ctx(2))
    assert torch.equal(out.vector, same[0]) and out.stats["tie_break"] == 0.0
    # two different rows with the best score: the lower index, reported as a tie
    line = torch.tensor([[0.0], [1.0], [3.0], [4.0]], dtype=torch.float64)
    out = D.create("foundationfl", rule="median")(line, ctx(1))
    assert out.stats["selected_index"] == 1.0 and out.stats["tie_break"] == 1.0
    assert out.stats["score_gap"] == 0.0
    assert out.vector.tolist() == [1.0]  # 0 1 1 1 3 4 -> (1 + 1) / 2


def test_kmeans_1d_is_the_exact_optimum() -> None:
    x = np.sort(np.random.default_rng(2).uniform(size=9))
    for k in (1, 2, 3):
        best = min(
            sum(float(((x[a:b] - x[a:b].mean()) ** 2).sum())
                for a, b in zip((0, *cuts), (*cuts, 9), strict=True))
            for cuts in itertools.combinations(range(1, 9), k - 1)
        )
        assert kmeans_1d(x, k)[0] == pytest.approx(best, rel=1e-12, abs=1e-15)


# -- FLDetector over rounds ------------------------------------------------------------------------


def _quadratic_rounds(rule: object, rounds: int, flip_from: int, flipper: int, seed: int = 0) -> list:
    """K = 10 clients on a quadratic loss: u_i = -eta (A w - b_i) + small noise; the server applies
    the aggregate. Client ``flipper`` sends -u from round ``flip_from`` on. Returns the Aggregates."""
    rng = np.random.default_rng(seed)
    p, k, eta = 8, 10, 0.1
    a = rng.normal(size=(p, p))
    a = a @ a.T / p + np.eye(p)
    b = rng.normal(size=(k, p)) * 0.3 + rng.normal(size=p)
    w = rng.normal(size=p) * 3
    ids = list(range(k))
    outs = []
    for t in range(rounds):
        u = np.stack([-eta * (a @ w - b[i]) + 1e-3 * rng.normal(size=p) for i in ids])
        if t >= flip_from:
            u[flipper] = -u[flipper]
        perm = rng.permutation(k)  # rows arrive in any order: the state follows client ids
        out = rule(torch.from_numpy(u[perm]), ctx(2, t, global_model=torch.from_numpy(w.copy()),
                                                   client_ids=torch.tensor(perm)))
        outs.append((out, perm))
        w = w + out.vector.numpy()
    return outs


def test_fldetector_flags_a_client_that_turns_to_sign_flipping() -> None:
    rule = D.create("fldetector", warmup=3, window=4)
    outs = _quadratic_rounds(rule, rounds=20, flip_from=10, flipper=6)
    assert outs[-1][0].weights is None  # the median's, passed through
    flagged_at = [t for t, (o, _) in enumerate(outs) if o.stats["attack_detected"] == 1.0]
    assert flagged_at and flagged_at[0] >= 10  # nobody is flagged while everyone is honest
    assert rule._flagged == {6}  # the flipper, and only it
    assert outs[-1][0].stats["num_excluded"] == 1.0
    weighted = D.create("fldetector", rule="multi_krum", warmup=3, window=4)
    out, perm = _quadratic_rounds(weighted, rounds=20, flip_from=10, flipper=6)[-1]
    assert weighted._flagged == {6}
    assert out.weights is not None and float(out.weights[list(perm).index(6)]) == 0.0
    assert abs(float(out.weights.sum()) - 1) < 1e-12
    rule.reset()
    assert not rule._flagged and rule._t == 0 and not rule._pairs


def test_fldetector_flags_nobody_without_an_attack() -> None:
    rule = D.create("fldetector", warmup=3, window=4)
    outs = _quadratic_rounds(rule, rounds=20, flip_from=10**6, flipper=0)
    assert all(o.stats["attack_detected"] == 0.0 for o, _ in outs) and not rule._flagged
