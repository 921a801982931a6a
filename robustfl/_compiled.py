"""robustfl's compiled kernels (numba), at module level so that numba's on-disk cache finds them
again in every new process (kernels defined inside a function are compiled anew in each one: ~3 s).

Imported lazily (numba takes ~0.4 s to import) by the modules that wrap these kernels with their
checks and contracts: :mod:`robustfl._order_stats` (per-coordinate order statistics) and
:mod:`robustfl.defenses._select` (Bulyan's repeated Krum). Nothing else calls them directly.
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
def krum_pick(sq: Any, norms2: Any, pool: Any, n: int, tol: float, amb: Any) -> int:
    """Krum's pick from ``pool`` (ascending row indices) when float64 scores settle it.

    Each pool row's score is the ascending sum of its ``n`` >= 1 smallest squared distances
    ``sq`` (K, K; +inf where non-finite) to the other pool rows, with the error interval of
    :func:`robustfl.defenses._select.select_lowest` (``tol`` x the chosen pairs' squared norms).
    ``amb[a]`` is set for the pool rows whose interval reaches the lowest upper bound (no other
    row surely precedes them). One such row is the pick; with several, -2: the caller re-scores
    them exactly. -1 when a score is not finite.
    """
    m = pool.shape[0]
    scores = np.empty(m)
    errs = np.empty(m)
    others = np.empty(m - 1)
    cols = np.empty(m - 1, dtype=np.int64)
    for a in range(m):
        i = pool[a]
        c = 0
        for b in range(m):
            if b != a:
                others[c] = sq[i, pool[b]]
                cols[c] = pool[b]
                c += 1
        order = np.argsort(others, kind="mergesort")
        s, e = 0.0, 0.0
        for r in range(n):
            s += others[order[r]]
            e += norms2[i] + norms2[cols[order[r]]]
        if not np.isfinite(s):
            return -1
        scores[a], errs[a] = s, tol * e
    top = np.inf  # the lowest upper bound
    for a in range(m):
        top = min(top, scores[a] + errs[a])
    first, count = -1, 0
    for a in range(m):
        amb[a] = scores[a] - errs[a] <= top  # not surely preceded by another row
        if amb[a]:
            count += 1
            if first < 0:
                first = a
    return int(pool[first]) if count == 1 else -2
