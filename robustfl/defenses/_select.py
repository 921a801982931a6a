"""Private helpers shared by the rules: the :class:`Rule` base, Krum scoring and selection, the
round's client ids checked against K (:func:`round_ids`).

Distances come from ONE Gram matrix (``robustfl.kernels.sq_distances``) in the input dtype. A Gram distance
``|u_i|^2 + |u_j|^2 - 2<u_i, u_j>`` carries an absolute rounding error of about
``eps (|u_i|^2 + |u_j|^2) sqrt(P)`` (measured: below ~0.5 sqrt(P) + 4 in those units; we allow
``4 + 2 sqrt(P)``), which swamps the distance itself when the rows are close relative to their
norms (a large common offset). :func:`select_lowest` therefore treats every Krum score as an
interval; rows whose interval straddles the selection boundary are re-scored in float64 from the
Gram matrix of the rows centred at one of them (``Distances.refined``: one float64 GEMM, chunked
over coordinates, never a (K, K, P) temporary, cached across Bulyan's picks) and ranked by
(score, index). Rows with non-finite entries score +inf and rank after every finite row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .._order_stats import MAX_K, order_stat_mean
from ..capabilities import DefenseBase
from ..errors import InputError
from ..kernels import krum_neighbours, row_norms, smallest_sums, sq_distances
from ..types import DefenseContext

_CHUNK = 1 << 16
_SPLIT = 1 << 20  # arrays with at least this many entries are split over torch's threads by column


@dataclass
class Distances:
    """The rows, their (K, K) squared Gram distances (non-finite -> +inf), float64 squared norms."""

    updates: Tensor
    sq: Tensor
    norms2: Tensor
    bad: Tensor  # rows with a non-finite entry
    _refined: Tensor | None = field(default=None, repr=False)

    @classmethod
    def of(cls, updates: Tensor) -> Distances:
        sq = sq_distances(updates)
        sq = torch.where(torch.isfinite(sq), sq, torch.full_like(sq, math.inf))
        norms = row_norms(updates)
        return cls(updates, sq, norms.square(), ~torch.isfinite(norms))

    @property
    def tol(self) -> float:
        """The Gram distances' rounding bound, relative to the pair's squared norms:
        ``eps (4 + 2 sqrt(P))`` of the rows' dtype (the module docstring)."""
        return torch.finfo(self.updates.dtype).eps * (4 + 2 * math.sqrt(self.updates.shape[1]))

    def refined(self, centre: int) -> Tensor:
        """float64 (K, K) squared distances from the float64 Gram matrix of the rows centred at
        row ``centre`` (a finite row among those being compared), computed once and cached.

        Centring removes the common offset that ruins the plain Gram formula: the remaining error
        is ~eps64 sqrt(P) (|u_i - c|^2 + |u_j - c|^2). One float64 GEMM, chunked over coordinates.
        """
        if self._refined is None:
            u = self.updates
            c = u[centre].to(torch.float64)
            g = torch.zeros(u.shape[0], u.shape[0], dtype=torch.float64, device=u.device)
            for start in range(0, u.shape[1], _CHUNK):
                block = u[:, start : start + _CHUNK].to(torch.float64) - c[start : start + _CHUNK]
                g += block @ block.T
            g = (g + g.T) / 2
            d = torch.diagonal(g)
            sq = (d[:, None] + d[None, :] - 2 * g).clamp_(min=0).fill_diagonal_(0)
            self._refined = torch.where(torch.isfinite(sq), sq, torch.full_like(sq, math.inf))
        return self._refined


def exact_scores(dist: Distances, pool: Tensor, rows: Tensor, n: int) -> Tensor:
    """Krum scores (n neighbours within ``pool``) of the pool positions ``rows``, from the float64
    ``Distances.refined`` matrix (centred at the first of them when first built)."""
    exact = dist.refined(int(pool[rows[0]]))[pool[rows]][:, pool]
    exact[torch.arange(len(rows), device=exact.device), rows] = math.inf  # not itself
    return torch.topk(exact, n, dim=1, largest=False).values.sum(1)


def select_lowest(dist: Distances, pool: Tensor | None, n: int, m: int) -> tuple[Tensor, Tensor, bool]:
    """The m rows of ``pool`` (None: all rows, in order) with the lowest Krum score (n
    neighbours); ties to the lowest index.

    Returns (selected indices into the rows, in ascending (score, index) order; float64 scores
    of the pool rows, exact where they were re-scored; whether the choice fell to the index
    tie-break, i.e. the m-th and (m+1)-th rows have equal keys). The scores and their error
    bounds are torch's; the decision on them (comparisons, counts, stable sorts: exact in any
    library) runs in numpy, whose operations on K values cost a fraction of torch's.
    """
    whole = pool is None
    rows = torch.arange(dist.sq.shape[0], device=dist.sq.device) if pool is None else pool
    m = max(0, min(m, len(rows)))
    if n == 0:  # every score is 0: order by (non-finite row, index)
        scores = torch.zeros(len(rows), dtype=torch.float64, device=rows.device)
    else:
        approx, nbr = smallest_sums(dist.sq if whole else dist.sq[rows][:, rows], n, ordered=False)
        scores = approx.to(torch.float64)
        ns = dist.norms2 if whole else dist.norms2[rows]
        tol = dist.tol
        err = (tol * (ns[:, None] + ns[nbr])).sum(1)
        s, e = scores.detach().cpu().numpy(), err.detach().cpu().numpy()
        idx = np.flatnonzero(np.isfinite(s))
        if 0 < m <= len(idx):
            lo, hi = s[idx] - e[idx], s[idx] + e[idx]
            may_precede = (lo[None, :] <= hi[:, None]).sum(1) - 1
            surely_precede = (hi[None, :] < lo[:, None]).sum(1)
            amb = idx[(may_precede >= m) & (surely_precede < m)]
            need = m - int((may_precede < m).sum())  # slots left after the rows surely selected
            if 0 < need < len(amb):  # the choice depends on rounding: re-score those rows in float64
                at = torch.from_numpy(amb).to(rows.device)
                scores[at] = exact_scores(dist, rows, at, n)
    s = scores.detach().cpu().numpy()
    bad = (dist.bad if whole else dist.bad[rows]).cpu().numpy()
    key = np.where(np.isfinite(s), s, math.inf)
    order = np.argsort(key, kind="stable")
    order = order[np.argsort(bad[order].astype(np.uint8), kind="stable")]
    a, b = order[m - 1 : m + 1] if 0 < m < len(rows) else (0, 0)
    tied = 0 < m < len(rows) and bool(key[a] == key[b] and bad[a] == bad[b])
    chosen = torch.from_numpy(order[:m]).to(rows.device)
    return (chosen if whole else rows[chosen]), scores, tied


def repeated_krum(dist: Distances, f: int, count: int) -> Tensor:
    """Bulyan's selection: ``count`` rows picked one at a time by Krum (f-hat ``f``) from the
    shrinking pool, each pick the one :func:`select_lowest` makes (m = 1), in pick order.

    The float64 scores and their error intervals come from a compiled loop
    (:func:`robustfl._compiled.krum_picks`, each row's neighbours sorted once); when intervals
    overlap at the top, the rows that may be first are re-scored from ``Distances.refined`` as in
    :func:`select_lowest` (the lowest exact score wins, ties to the lowest index; the loop itself
    settles the case where their exact scores are sums of the same sequence, e.g. ALIE's copies,
    once the refined matrix exists); a non-finite
    row or no neighbours leave the pick to :func:`select_lowest` itself. Same picks (tested).
    """
    from .. import _compiled  # numba, on first use

    k = dist.sq.shape[0]
    sq = dist.sq.detach().to(torch.float64).cpu().numpy()  # a decision: no gradient through it
    norms2 = dist.norms2.detach().to(torch.float64).cpu().numpy()
    tol = dist.tol
    orders = _compiled.neighbour_orders(sq)
    alive = np.ones(k, dtype=np.bool_)
    out, amb = np.empty(count, dtype=np.int64), np.zeros(k, dtype=np.bool_)
    exact = np.empty((0, 0))  # Distances.refined, once the first unsettled pick has built it
    picks: list[int] = []
    while len(picks) < count:
        made, status = _compiled.krum_picks(
            sq, norms2, orders, alive, f, count - len(picks), tol, out, amb, exact
        )
        picks += out[:made].tolist()
        if status == 0:
            break
        left = np.flatnonzero(alive)
        pool = torch.from_numpy(left).to(dist.sq.device)
        n = krum_neighbours(len(left), f)
        if status == -2:  # may be first: re-score those rows in float64, as select_lowest does
            rows = torch.from_numpy(np.flatnonzero(amb[: len(left)])).to(dist.sq.device)
            scores = exact_scores(dist, pool, rows, n)
            pick = int(pool[rows[int(torch.argmin(scores))]])  # argmin: the first among equals
            if dist._refined is not None and dist._refined.device.type == "cpu":
                exact = dist._refined.detach().numpy()
        else:
            pick = int(select_lowest(dist, pool, n, 1)[0][0])
        picks.append(pick)
        alive[pick] = False
    return torch.tensor(picks, dtype=torch.long, device=dist.sq.device)


def nearest(dist: Distances, m: int) -> Tensor:
    """(K, m) indices of each row's m nearest rows, itself first (other ties: lower index).

    A row whose m-th and (m+1)-th nearest are within Gram rounding of each other (same error
    bound as :func:`select_lowest`) makes every row's neighbours come from the float64
    ``Distances.refined`` matrix instead.
    """
    k = dist.sq.shape[0]
    d = dist.sq.to(torch.float64).clone().fill_diagonal_(-1.0)
    vals, order = torch.sort(d, dim=1, stable=True)
    if 0 < m < k:
        tol = dist.tol
        ns = dist.norms2
        err = tol * (ns[:, None] + ns[order[:, m - 1 : m + 1]]).sum(1)
        if bool(((vals[:, m] - vals[:, m - 1]) <= err).any()) and not bool(dist.bad.all()):
            centre = int(torch.nonzero(~dist.bad)[0])
            order = torch.sort(dist.refined(centre).clone().fill_diagonal_(-1.0), dim=1, stable=True).indices
    return order[:, :m]


class Rule(DefenseBase):
    """Base of the robust rules: ``admits`` from ``min_clients``, a no-op ``reset``
    (:class:`robustfl.capabilities.DefenseBase`).

    ``admits(K, f_hat)`` says whether K rows with f_hat assumed Byzantine are inside the rule's
    guarantee (the runner refuses the cell otherwise unless --allow-outside-guarantee); a rule
    still computes what it can outside it.
    """


def f_hat(ctx: DefenseContext) -> int:
    """The assumed number of Byzantine rows this round (never negative)."""
    return max(0, int(ctx.assumed_byzantine))


def round_ids(ctx: DefenseContext, k: int, rule: str) -> list[int]:
    """The clients of this round's K rows: ``ctx.client_ids`` as a list (the row indices when it
    is None), else a one-line InputError naming the rule when they are not K distinct ids (the
    context itself checks that they are a 1-D tensor)."""
    if ctx.client_ids is None:
        return list(range(k))
    ids = ctx.client_ids.tolist()
    if len(ids) != k:
        raise InputError(f"{rule}: ctx.client_ids must hold one id per row (K = {k}), got {len(ids)} ids")
    if len(set(ids)) != k:
        raise InputError(f"{rule}: ctx.client_ids must be distinct within a round")
    return ids


def by_columns(fn: Callable[[np.ndarray], np.ndarray], a: np.ndarray) -> np.ndarray:
    """``fn`` applied to column blocks of the (K, P) array ``a``, one block per torch thread.

    ``fn`` maps a (K, n) block to the (n,) result of its columns, computed per column, so the
    result is bit-identical for any thread count. numpy's partition releases the GIL: on 2 cores
    a (50, 1e6) float32 selection takes half the time (~0.68 s vs ~1.33 s measured here). Below
    ``_SPLIT`` entries, or with one thread, ``fn`` runs on ``a`` as it is.
    """
    threads = min(torch.get_num_threads(), a.shape[1] // 4096) if a.ndim == 2 else 1
    if threads <= 1 or a.size < _SPLIT:
        return fn(a)
    edges = [a.shape[1] * i // threads for i in range(threads + 1)]
    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(lambda i: fn(a[:, edges[i] : edges[i + 1]]), range(threads)))
    return np.concatenate(parts)


def mean_of_order_stats(updates: Tensor, lo: int, hi: int) -> Tensor:
    """Per coordinate, the mean of the order statistics lo..hi (0-based, inclusive) over the rows.

    NaN sorts above +inf (numpy and torch agree), so a NaN entry acts as the largest value. On CPU
    (float32/float64) with K <= 128 rows: a compiled sorting network over column blocks
    (:func:`robustfl._order_stats.order_stat_mean`: the order statistics summed in float64, in
    order; 4-5 x one ``U.sum(0)`` at (50, 1e6) float32 in the floors benchmark), on torch's thread
    count; with more rows ``numpy.partition`` (one selection pass) split over torch's
    threads by column (:func:`by_columns`); elsewhere ``torch.sort`` along dim 0. Each is
    bit-identical for any thread count. Rows that need a gradient (the worst-case search's ascent)
    take the ``torch.sort`` path, whose gradient reaches the order statistics averaged: the same
    values, summed by torch (within rounding of the compiled sums).
    """
    if updates.requires_grad and torch.is_grad_enabled():
        return torch.sort(updates, dim=0).values[lo : hi + 1].mean(0)
    cpu_float = updates.device.type == "cpu" and updates.dtype in (torch.float32, torch.float64)
    if cpu_float and updates.shape[0] <= MAX_K and updates.ndim == 2 and updates.shape[1] > 0:
        a = updates.detach().numpy()
        return torch.from_numpy(order_stat_mean(a, lo, hi, threads=torch.get_num_threads()))
    if cpu_float:
        kth = sorted({lo, hi})

        def block(a: np.ndarray) -> np.ndarray:
            return np.asarray(np.partition(a, kth, axis=0)[lo : hi + 1].mean(axis=0), dtype=a.dtype)

        return torch.from_numpy(by_columns(block, updates.detach().numpy()))
    return torch.sort(updates, dim=0).values[lo : hi + 1].mean(0)


def generator_for(ctx: DefenseContext) -> torch.Generator:
    """The round's generator; a fresh one seeded 0 when the context has none (deterministic)."""
    return ctx.generator if ctx.generator is not None else torch.Generator().manual_seed(0)


def median_value(x: Tensor) -> float:
    """Median of a 1-D tensor, the mean of the two middle values for even length (NaN as +inf)."""
    s = torch.sort(torch.nan_to_num(x.to(torch.float64), nan=math.inf, posinf=math.inf)).values
    n = len(s)
    return float((s[(n - 1) // 2] + s[n // 2]) / 2)


def gram64(rows: Tensor) -> Tensor:
    """(K, K) Gram matrix in float64 (chunked over coordinates for narrower dtypes), symmetrised.

    For cosine-based rules, whose decisions jump near cos = +-1: float32 products of float32
    values are exact in float64, so collinear rows get cosine exactly +-1.
    """
    if rows.dtype == torch.float64:
        g = rows @ rows.T
    else:
        g = torch.zeros(rows.shape[0], rows.shape[0], dtype=torch.float64, device=rows.device)
        for start in range(0, rows.shape[1], _CHUNK):
            block = rows[:, start : start + _CHUNK].to(torch.float64)
            g += block @ block.T
    return (g + g.T) / 2


def sq_dist_to(rows: Tensor, z: Tensor) -> Tensor:
    """float64 ``||rows_k - z||^2`` by direct differences, chunked over coordinates (no (K, P) temp).

    Each chunk's differences and norms are taken in the input dtype (relative accuracy of that
    dtype, and a float64 reduction is ~15x slower on CPU); a chunk whose norm overflows there is
    redone in float64 for the rows concerned.
    """
    out: Tensor | None = None
    one = rows.shape[1] <= _CHUNK  # one chunk: no slicing
    for start in range(0, rows.shape[1], _CHUNK):
        stop = start + _CHUNK
        r, c = (rows, z) if one else (rows[:, start:stop], z[start:stop])
        part = torch.linalg.vector_norm(r - c, dim=1).to(torch.float64).square()
        if rows.dtype != torch.float64 and not bool(torch.isfinite(part).all()):
            redo = ~torch.isfinite(part)
            diff = rows[redo, start:stop].to(torch.float64) - z[start:stop].to(torch.float64)
            part[redo] = diff.square().sum(1)
        out = part if out is None else out + part  # as 0 + part, then += part: the same sums
    return out if out is not None else torch.zeros(rows.shape[0], dtype=torch.float64, device=rows.device)


def kth_smallest(x: Tensor, k: int) -> Tensor:
    """Per column, the k-th smallest value (0-based) along dim 0; NaN counts as the largest.

    ``numpy.partition`` on CPU (float32/float64: ~10x faster than a torch sort there), split over
    torch's threads by column (:func:`by_columns`), else ``torch.kthvalue``.
    """
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        kth = by_columns(lambda a: np.partition(a, k, axis=0)[k].copy(), x.detach().numpy())
        return torch.from_numpy(kth)
    return torch.kthvalue(x, k + 1, dim=0).values


def closest_mean(rows: Tensor, centre: Tensor, keep: int) -> Tensor:
    """Per coordinate, the mean of the ``keep`` values of ``rows`` closest to ``centre`` (ties: lower
    row index first); NaN where a NaN is among them."""
    dev = (rows - centre).abs()
    thr = kth_smallest(dev, keep - 1)  # the keep-th smallest deviation of each coordinate
    below, at = dev < thr, dev == thr
    take = below | at
    need = keep - below.sum(0)
    cols = torch.nonzero(at.sum(0) > need).flatten()  # more tied values than slots left
    if len(cols):  # keep the first `need` of them in row order
        ties = at[:, cols]
        first = ties & (torch.cumsum(ties.to(torch.int32), dim=0) <= need[cols])
        take[:, cols] = below[:, cols] | first
    out = torch.where(take, rows, torch.zeros_like(rows)).sum(0) / keep
    return torch.where(torch.isnan(thr), thr, out)


def combine(updates: Tensor, weights: Tensor, all_finite: bool) -> Tensor:
    """``sum_k w_k u_k`` in the input dtype; rows with zero weight never touch the result (0 * inf
    would be NaN), at the cost of a copy of the weighted rows only when some row is non-finite."""
    w = weights.to(updates.dtype)
    if all_finite:
        return w @ updates
    used = torch.nonzero(w).flatten()
    return w[used] @ updates[used]
