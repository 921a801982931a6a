"""NNM's compiled kernel (numba): float64 squared distances from some rows to the others, by direct
differences, at module level so that numba's on-disk cache finds it in every new process.

Imported lazily by :mod:`robustfl.defenses.pre.nnm` (numba takes ~0.4 s to import), only when a
neighbourhood must be re-decided in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

WIDTH = 512  # columns per block: the rows' float64 block (K x 4 KiB) stays in the L2 cache
GROUP = 4  # candidate rows padded to a multiple of this; passes of 8 then one of 4 (independent sums)
_FAST = {"reassoc", "contract"}  # vectorised sums in any order, fused multiply-adds; nothing else


@njit(cache=True, nogil=True, fastmath=_FAST)
def _group(buf: Any, cand: Any, c: int, r: int, w: int, acc: Any) -> None:
    """acc[c + g, r] += sum_t (buf[cand[c + g], t] - buf[r, t])^2 over t < w, for g < 8."""
    a0, a1, a2, a3 = buf[cand[c]], buf[cand[c + 1]], buf[cand[c + 2]], buf[cand[c + 3]]
    a4, a5, a6, a7 = buf[cand[c + 4]], buf[cand[c + 5]], buf[cand[c + 6]], buf[cand[c + 7]]
    b = buf[r]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for t in range(w):
        bt = b[t]
        d0, d1, d2, d3 = a0[t] - bt, a1[t] - bt, a2[t] - bt, a3[t] - bt
        d4, d5, d6, d7 = a4[t] - bt, a5[t] - bt, a6[t] - bt, a7[t] - bt
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        s4 += d4 * d4
        s5 += d5 * d5
        s6 += d6 * d6
        s7 += d7 * d7
    acc[c, r] += s0
    acc[c + 1, r] += s1
    acc[c + 2, r] += s2
    acc[c + 3, r] += s3
    acc[c + 4, r] += s4
    acc[c + 5, r] += s5
    acc[c + 6, r] += s6
    acc[c + 7, r] += s7


@njit(cache=True, nogil=True, fastmath=_FAST)
def _group4(buf: Any, cand: Any, c: int, r: int, w: int, acc: Any) -> None:
    """acc[c + g, r] += sum_t (buf[cand[c + g], t] - buf[r, t])^2 over t < w, for g < 4."""
    a0, a1, a2, a3 = buf[cand[c]], buf[cand[c + 1]], buf[cand[c + 2]], buf[cand[c + 3]]
    b = buf[r]
    s0 = s1 = s2 = s3 = 0.0
    for t in range(w):
        bt = b[t]
        d0, d1, d2, d3 = a0[t] - bt, a1[t] - bt, a2[t] - bt, a3[t] - bt
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
    acc[c, r] += s0
    acc[c + 1, r] += s1
    acc[c + 2, r] += s2
    acc[c + 3, r] += s3


@njit(cache=True, nogil=True, fastmath=_FAST)
def _columns(u: Any, rows: Any, cand: Any, lo: int, hi: int, acc: Any) -> None:
    """Columns lo..hi of the distances, block by block, added to acc (len(cand), len(rows))."""
    nr = rows.shape[0]
    buf = np.empty((nr, WIDTH))
    for j0 in range(lo, hi, WIDTH):
        w = min(WIDTH, hi - j0)
        for r in range(nr):
            src = u[rows[r], j0 : j0 + w]  # a view from 0: vectorised conversion (2x the offset form)
            dst = buf[r]
            for t in range(w):
                dst[t] = src[t]
        eights = cand.shape[0] // 8 * 8
        for r in range(nr):
            for c in range(0, eights, 8):
                _group(buf, cand, c, r, w, acc)
            for c in range(eights, cand.shape[0], 4):
                _group4(buf, cand, c, r, w, acc)


@njit(parallel=True, cache=True)
def pair_sq_distances(u: Any, rows: Any, cand: Any, parts: int) -> Any:
    """(len(cand), len(rows)) float64 ``sum_t (u[rows[cand[c]], t] - u[rows[r], t])^2``.

    ``u``: C-contiguous (K, P) float32; ``rows``: row indices; ``cand``: positions in ``rows``,
    a multiple of ``GROUP`` of them (repeat one to pad). Each of ``parts`` column ranges is summed
    by one task, the ranges then added in order: deterministic for a given ``parts``. Within a
    range the order of the sum is the compiler's (reassociated, with fused multiply-adds); each
    entry is a sum of P non-negative rounded squares of differences rounded once, so its relative
    error is at most gamma_{P+2} (u = 2^-53) whatever that order.
    """
    p = u.shape[1]
    part = np.zeros((parts, cand.shape[0], rows.shape[0]))
    for q in prange(parts):
        _columns(u, rows, cand, p * q // parts, p * (q + 1) // parts, part[q])
    out = np.zeros((cand.shape[0], rows.shape[0]))
    for q in range(parts):
        out += part[q]
    return out
