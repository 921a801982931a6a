"""robustfl's compiled kernels (numba), at module level so that numba's on-disk cache finds them
again in every new process (kernels defined inside a function are compiled anew in each one: ~3 s).

Imported lazily (numba takes ~0.4 s to import) by the modules that wrap these kernels with their
checks and contracts: :mod:`robustfl._order_stats` (per-coordinate order statistics) and
:mod:`robustfl.defenses._select` (Bulyan's repeated Krum) and :mod:`robustfl.defenses.flame` (its
HDBSCAN closed form). Nothing else calls them directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def _network_block(a: Any, j0: int, j1: int, pairs: Any, lo: int, hi: int, out: Any, buf: Any) -> None:
    """Columns j0..j1 of ``a``: copy to ``buf`` (padded with NaN to its N rows), apply the sorting
    network's comparators row against row, and write the mean of rows lo..hi (summed in float64)."""
    k, width, n = a.shape[0], j1 - j0, buf.shape[0]
    for r in range(k):
        for b in range(width):
            buf[r, b] = a[r, j0 + b]
    for r in range(k, n):
        for b in range(width):
            buf[r, b] = np.nan
    for c in range(pairs.shape[0]):
        i, j = pairs[c, 0], pairs[c, 1]
        if i >= k:  # both rows are padding (i < j)
            continue
        ri, rj = buf[i], buf[j]
        for b in range(width):
            x, y = ri[b], rj[b]
            swap = (x > y) | (x != x)  # NaN is the largest value
            ri[b] = y if swap else x
            rj[b] = x if swap else y
    count = hi - lo + 1
    for b in range(width):
        s = 0.0
        for r in range(lo, hi + 1):
            s += np.float64(buf[r, b])
        out[j0 + b] = s / count


@njit(parallel=True, cache=True)
def order_stat_mean(a: Any, pairs: Any, lo: int, hi: int, width: int, n: int) -> Any:
    """Per column of the C-contiguous (K, P) ``a``, the mean of its order statistics lo..hi, by
    the comparators ``pairs`` of an N-row sorting network, over blocks of ``width`` columns."""
    p = a.shape[1]
    out = np.empty(p, dtype=a.dtype)
    blocks = (p + width - 1) // width
    for bi in prange(blocks):
        j0 = bi * width
        buf = np.empty((n, width), dtype=a.dtype)
        _network_block(a, j0, min(p, j0 + width), pairs, lo, hi, out, buf)
    return out


@njit(cache=True, nogil=True)
def order_stat_mean_serial(a: Any, pairs: Any, lo: int, hi: int, width: int, n: int) -> Any:
    """:func:`order_stat_mean` on the calling thread alone (the same blocks, the same numbers):
    no OpenMP team is started, whose idle threads would spin on the cores of other processes."""
    p = a.shape[1]
    out = np.empty(p, dtype=a.dtype)
    buf = np.empty((n, width), dtype=a.dtype)
    for j0 in range(0, p, width):
        _network_block(a, j0, min(p, j0 + width), pairs, lo, hi, out, buf)
    return out


@njit(cache=True, nogil=True)
def neighbour_orders(sq: Any) -> Any:
    """(K, K - 1): each row's other rows by ascending ``sq`` (ties: lower index)."""
    k = sq.shape[0]
    out = np.empty((k, k - 1), dtype=np.int64)
    for i in range(k):
        row = np.empty(k - 1)
        cols = np.empty(k - 1, dtype=np.int64)
        c = 0
        for j in range(k):
            if j != i:
                row[c], cols[c] = sq[i, j], j
                c += 1
        order = np.argsort(row, kind="mergesort")
        for c in range(k - 1):
            out[i, c] = cols[order[c]]
    return out


@njit(cache=True, nogil=True)
def _same_nearest(exact: Any, pool: Any, m: int, amb: Any, n: int) -> bool:
    """Whether every pool row marked in ``amb`` has the same ascending n smallest entries of
    ``exact`` towards the other pool rows (False when ``exact`` is empty)."""
    if exact.shape[0] == 0:
        return False
    first = np.empty(0)
    row = np.empty(m - 1)
    for a in range(m):
        if not amb[a]:
            continue
        c = 0
        for b in range(m):
            if b != a:
                row[c] = exact[pool[a], pool[b]]
                c += 1
        near = np.sort(row)[:n]
        if first.shape[0] == 0:
            first = near
        else:
            for t in range(n):
                if near[t] != first[t]:
                    return False
    return True


@njit(cache=True, nogil=True)
def krum_picks(
    sq: Any,
    norms2: Any,
    orders: Any,
    alive: Any,
    f: int,
    count: int,
    tol: float,
    picks: Any,
    amb: Any,
    exact: Any,
) -> Any:
    """Up to ``count`` successive Krum picks (f-hat ``f``) from the rows still ``alive`` (a pick
    leaves: ``alive`` is updated), while float64 scores settle them. A pool row's score is the
    ascending sum of its n = |pool| - f - 2 smallest squared distances ``sq`` (K, K; +inf where
    non-finite) to the other pool rows (``orders``: :func:`neighbour_orders`), with the error
    interval of :func:`robustfl.defenses._select.select_lowest` (``tol`` x the chosen pairs' squared
    norms). A pick is settled when exactly one row's interval reaches the lowest upper bound.

    An unsettled pick is made here too when the float64 squared distances ``exact`` (K, K; the
    caller's ``Distances.refined``, or a (0, 0) array while it has none) give every row that may
    be first the same ascending sequence of its n smallest: their exact scores, the sums of those
    sequences, are then equal whatever the order of summation, and the lowest index wins, as in
    the caller's re-scoring.

    Returns (picks made, written to ``picks``; status): status 0 when all ``count`` are made;
    -2 when the next pick is unsettled otherwise, ``amb`` then marks, in pool order, the rows that
    may be first (the caller re-scores them exactly); -1 when the next pick has a non-finite score
    or no neighbours (the caller makes it).
    """
    k = sq.shape[0]
    pool = np.empty(k, dtype=np.int64)
    scores = np.empty(k)
    errs = np.empty(k)
    for made in range(count):
        m = 0
        for i in range(k):
            if alive[i]:
                pool[m] = i
                m += 1
        n = m - f - 2
        if n <= 0:
            return made, -1
        for a in range(m):
            i = pool[a]
            s, e, taken = 0.0, 0.0, 0
            for c in range(k - 1):
                j = orders[i, c]
                if alive[j]:
                    s += sq[i, j]
                    e += norms2[i] + norms2[j]
                    taken += 1
                    if taken == n:
                        break
            if not np.isfinite(s):
                return made, -1
            scores[a], errs[a] = s, tol * e
        top = np.inf  # the lowest upper bound
        for a in range(m):
            top = min(top, scores[a] + errs[a])
        first, count_amb = -1, 0
        for a in range(m):
            amb[a] = scores[a] - errs[a] <= top  # not surely preceded by another row
            if amb[a]:
                count_amb += 1
                if first < 0:
                    first = a
        if count_amb > 1 and not _same_nearest(exact, pool, m, amb, n):
            return made, -2
        picks[made] = pool[first]
        alive[pool[first]] = False
    return count, 0


@njit(cache=True, nogil=True)
def hdbscan_majority(dist: Any, m: int) -> Any:
    """The points scikit-learn's HDBSCAN labels as its one cluster for the (n, n) float64
    distances ``dist`` (zero diagonal, n >= 2) at ``min_cluster_size = m > n / 2``,
    ``min_samples = 1``, ``allow_single_cluster = True`` (boolean mask; see
    :func:`robustfl.defenses.flame.majority_cluster` for why this is the whole algorithm there).

    The minimum spanning tree is scikit-learn's Prim's (rows of the current node, ties: the lower
    index), so that an asymmetric ``dist`` gives its edges too; then single linkage up to the first
    component of m points, at distance d*, and on through every edge whose lambda (1 / distance;
    inf at 0) equals that of d*.
    """
    n = dist.shape[0]
    left = np.arange(n)  # nodes not yet in the tree, in index order (left[:rest])
    reach = np.full(n, np.inf)  # their distance to the tree, aligned with ``left``
    eu = np.empty(n - 1, dtype=np.int64)
    ev = np.empty(n - 1, dtype=np.int64)
    ew = np.empty(n - 1)
    current, rest = 0, n
    for e in range(n - 1):
        c = 0
        for a in range(rest):  # drop ``current``, keep the order
            if left[a] != current:
                left[c], reach[c] = left[a], reach[a]
                c += 1
        rest = c
        best = 0
        for a in range(rest):
            r = min(reach[a], dist[current, left[a]])
            reach[a] = r
            if r < reach[best]:
                best = a
        eu[e], ev[e], ew[e] = current, left[best], reach[best]
        current = left[best]
    order = np.argsort(ew)
    parent = np.arange(n)
    size = np.ones(n, dtype=np.int64)
    star, lam = -1, 0.0
    for t in range(n - 1):
        e = order[t]
        w = ew[e]
        wl = 1.0 / w if w > 0.0 else np.inf
        if star >= 0 and wl != lam:
            break
        a, b = eu[e], ev[e]
        while parent[a] != a:
            a = parent[a]
        while parent[b] != b:
            b = parent[b]
        if size[a] < size[b]:
            a, b = b, a
        parent[b] = a
        size[a] += size[b]
        if star < 0 and size[a] >= m:
            star, lam = a, wl
    root = star
    while parent[root] != root:
        root = parent[root]
    out = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        r = i
        while parent[r] != r:
            r = parent[r]
        out[i] = r == root
    return out
