"""Minimum-Diameter Averaging (MDA): the mean of the K - f rows whose diameter is smallest.

Sources: El Mhamdi, Guerraoui, Rouault, "The Hidden Vulnerability of Distributed Learning in
Byzantium", ICML 2018, and El Mhamdi, Guerraoui, Guirguis, Hoang, Rouault, "Genuinely Distributed
Byzantine Machine Learning", PODC 2020 (the reference ByzFL's ``MDA`` cites); ByzFL's ``MDA``
(LPD-EPFL/byzfl, ``byzfl/aggregators/aggregators.py``) enumerates every subset.

With m = K - f (f = ctx.assumed_byzantine) and diam(S) = max_{i, j in S} ||u_i - u_j||::

    S* = argmin_{|S| = m} diam(S),      out = (1/m) sum_{i in S*} u_i

Ties between subsets of equal diameter: the first subset in ``itertools.combinations`` order (the
lexicographically smallest index tuple), which is ByzFL's choice (it keeps the first subset with
a strictly smaller diameter). Stat ``tie_break`` = 1 when another subset attains the same
diameter (permutation invariance then holds only up to that choice).

Exact, without enumerating the C(K, f) subsets: diam(S) <= t exactly when S is a clique of the
graph G_t joining rows at distance <= t, and the optimum is one of the pairwise distances. A
bisection over the sorted distinct pairwise distances finds the smallest t whose G_t has an
m-clique; a depth-first search in increasing index order (bitsets; a branch is cut when the
chosen rows plus the remaining common neighbours number fewer than m) finds the
lexicographically first such clique, which is S*. Distances come once from the float64 Gram
matrix of the rows centred at their mean (so a large common offset costs no precision); the
pairs whose distance is within that matrix's rounding of another pair's are recomputed from
direct differences, so that equal distances tie exactly.
Cost: the enumeration it replaces is C(K, f) subsets; the search is exponential in the worst case
(max-clique is NP-hard) and fast on update-like data (measured: K = 30, f = 10, P = 1000 in
the tests' timing, see ``tests/defenses/test_set_a.py``).
Refusal: when C(K, f) exceeds ``max_subsets`` (default 10**8, so K = 30, f = 10 with
C(30, 10) = 30,045,015 runs) the rule raises InputError naming the subset count.

Guarantee: an honest majority, K > 2f (ByzFL refuses 2f >= K): ``min_clients`` = 2f + 1. Outside
it the rule computes while m >= 1. Rows with a non-finite entry are at infinite distance from the
others (chosen only when fewer than m rows are finite). Weights 1/m on S*.
Stats: ``diameter``, ``num_subsets`` (C(K, f)), ``tie_break``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, f_hat

_CHUNK = 1 << 16


def centred_sq_distances(rows: Tensor) -> Tensor:
    """float64 (K, K) squared distances from the Gram matrix of the rows centred at their finite
    rows' mean (chunked over coordinates); non-finite -> +inf, diagonal 0."""
    k = rows.shape[0]
    finite = torch.isfinite(rows).all(1)
    g = torch.zeros(k, k, dtype=torch.float64, device=rows.device)
    for start in range(0, rows.shape[1], _CHUNK):
        block = rows[:, start : start + _CHUNK].to(torch.float64)
        centre = block[finite].mean(0) if bool(finite.any()) else torch.zeros_like(block[0])
        block = block - centre
        g += block @ block.T
    g = (g + g.T) / 2
    d = torch.diagonal(g)
    sq = (d[:, None] + d[None, :] - 2 * g).clamp_(min=0)
    sq = torch.where(finite[:, None] & finite[None, :], sq, torch.full_like(sq, math.inf))
    sq.fill_diagonal_(0)
    # Gram rounding, about eps sqrt(P) (|u_i - c|^2 + |u_j - c|^2), can order two equal (or nearly
    # equal) distances either way: pairs whose value is that close to another pair's are recomputed
    # from direct differences, so that equal distances compare equal as in a direct transcription.
    iu = torch.triu_indices(k, k, 1, device=rows.device)
    vals = sq[iu[0], iu[1]]
    tol = torch.finfo(torch.float64).eps * (4 + 2 * math.sqrt(rows.shape[1])) * (d[iu[0]] + d[iu[1]])
    order = torch.argsort(vals)
    close = (vals[order][1:] - vals[order][:-1]) <= (tol[order][1:] + tol[order][:-1])
    redo = torch.zeros(len(vals), dtype=torch.bool, device=rows.device)
    redo[order[1:][close]] = True
    redo[order[:-1][close]] = True
    redo &= torch.isfinite(vals)
    for n in torch.nonzero(redo).flatten().tolist():
        i, j = int(iu[0, n]), int(iu[1, n])
        exact = sum(
            float((rows[i, s : s + _CHUNK].to(torch.float64) - rows[j, s : s + _CHUNK].to(torch.float64))
                  .square().sum())
            for s in range(0, rows.shape[1], _CHUNK)
        )
        sq[i, j] = sq[j, i] = exact
    return sq


def cliques(adj: list[int], m: int) -> Iterator[list[int]]:
    """The m-cliques of the graph (``adj[v]``: bitset of v's neighbours), in lexicographic order."""

    def dfs(chosen: list[int], cand: int) -> Iterator[list[int]]:
        need = m - len(chosen)
        if need == 0:
            yield chosen
            return
        while cand.bit_count() >= need:
            low = cand & -cand
            v = low.bit_length() - 1
            cand ^= low
            yield from dfs([*chosen, v], cand & adj[v])

    yield from dfs([], (1 << len(adj)) - 1)


def min_diameter_subset(sq: Tensor, m: int) -> tuple[list[int], float, bool]:
    """(the lexicographically first m-subset of smallest diameter, its squared diameter, whether
    another m-subset has the same diameter) for the (K, K) squared distances ``sq``."""
    k = sq.shape[0]
    if m <= 1:
        return [0], 0.0, k > 1 and m == 1
    vals = sq.tolist()
    levels = sorted({vals[i][j] for i in range(k) for j in range(i + 1, k)})

    def graph(t: float) -> list[int]:
        return [sum(1 << j for j in range(k) if j != i and vals[i][j] <= t) for i in range(k)]

    lo, hi = 0, len(levels) - 1  # G at levels[-1] is complete: an m-clique exists
    while lo < hi:
        mid = (lo + hi) // 2
        if next(cliques(graph(levels[mid]), m), None) is not None:
            hi = mid
        else:
            lo = mid + 1
    found = cliques(graph(levels[lo]), m)
    best = next(found)
    return best, levels[lo], next(found, None) is not None


@dataclass
class MDA(Rule):
    max_subsets: int = 10**8
    name = "mda"
    properties = frozenset(
        {
            "permutation_invariant",
            "translation_equivariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        }
    )

    def __post_init__(self) -> None:
        params.number(f"defense {self.name}", "max_subsets", self.max_subsets, low=1, integer=True)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def refusal(self, k: int, f_hat: int) -> str | None:
        count = math.comb(k, f_hat) if 0 <= f_hat <= k else 0
        if count <= self.max_subsets:
            return None
        return f"C(K, f_hat) = C({k}, {f_hat}) = {count:,} subsets exceed max_subsets = {self.max_subsets:,}"

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        m = k - f
        if m < 1:
            raise InputError(f"mda: needs K > f_hat rows to keep any, got K = {k}, f_hat = {f}")
        count = math.comb(k, f)
        why = self.refusal(k, f)
        if why is not None:
            raise InputError(f"mda: {why}")
        sq = centred_sq_distances(updates)
        chosen, diam2, tied = min_diameter_subset(sq, m)
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        weights[chosen] = 1.0 / m
        vector = combine(updates, weights, bool(torch.isfinite(updates).all()))
        stats = {"diameter": math.sqrt(diam2), "num_subsets": float(count), "tie_break": float(tied)}
        return Aggregate(vector, weights, stats)
