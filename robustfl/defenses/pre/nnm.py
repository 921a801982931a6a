"""Nearest-neighbour mixing, NNM: replace each row by the mean of its K - f nearest rows.

Paper: Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan, "Fixing by Mixing: A Recipe for
Optimal Byzantine ML under Heterogeneity", AISTATS 2023

Each row is replaced by the mean of its m = K - f nearest rows (f = f-hat; at least 1), itself
included (first, even among equal distances; other ties to the lower index; neighbourhoods
decided within Gram rounding are re-decided on float64 distances, as Krum's scores are):
``u'_i = (1/m) sum_{j in N_i} u_j``, i.e. ``U' = M U`` with M (K x K) row-stochastic. Squared
distances come from one Gram matrix. Linear: the pullback of weights w' is ``M^T w'``. Rows with
non-finite entries are at infinite distance from every other row, so they only mix into rows
whose neighbourhood must reach them. K and f-hat are unchanged.

Re-deciding (float32 CPU rows): the float64 matrix ``Distances.refined`` (a centred float64 Gram
matrix over all K rows) is computed only when rigorous error bounds cannot show that it would pick
the same neighbourhoods as cheaper distances (:class:`_Bounded`): the float32 Gram distances
for the rows they settle, float64 direct differences (:mod:`._nnm_kernel`) for the rest. The
neighbourhoods, hence the output, are those of ``nearest`` on the refined matrix, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ...kernels import check_updates
from ...types import DefenseContext
from .._select import Distances, f_hat, nearest
from . import Pre, Pullback

_U32, _U64 = 2.0**-24, 2.0**-53  # unit roundoffs
_SAFE = 2.0  # every bound doubled: room for the rounding of the bounds themselves


def mixing_matrix(dist: Distances, m: int) -> Tensor:
    """(K, K) float64 matrix with 1/m at each row's m nearest rows (itself first)."""
    k = dist.sq.shape[0]
    if isinstance(dist, _Bounded):
        dist.m = m
    mix = torch.zeros(k, k, dtype=torch.float64, device=dist.sq.device)
    return mix.scatter_(1, nearest(dist, m), 1.0 / m)


def _gamma(n: int, unit: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of a sum of n terms (or n
    roundings) in any order, fused multiply-adds included; inf when n u >= 1/2."""
    nu = n * unit
    return nu / (1 - nu) if nu < 0.5 else math.inf


def _ieee_float32_matmul() -> bool:
    """Whether float32 matrix products are plain float32 (not bf16 passes, which the float32 Gram
    bound would not cover): torch's default ("highest", backends "none"/"ieee")."""
    try:
        if torch.get_float32_matmul_precision() != "highest":
            return False
    except RuntimeError:  # legacy and new precision APIs mixed
        return False
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return all(
        getattr(obj, "fp32_precision", "none") in ("none", "ieee") for obj in (torch.backends, mkldnn)
    )


def _settled(v: Tensor, slack: Tensor, finite: Tensor, m: int) -> Tensor:
    """Per row of ``v`` (R, K; -1 at the row's own column, +inf at non-finite rows' columns): whether
    every matrix within ``slack`` of ``v`` on the finite columns (equal elsewhere) has the same m
    first columns in a stable sort. True when the m-th and (m+1)-th intervals do not overlap, or
    when the m first columns take every finite column (the rest are +inf, ordered by index)."""
    first = torch.sort(v, dim=1, stable=True).indices[:, :m]
    inset = torch.zeros_like(v, dtype=torch.bool).scatter_(1, first, True)
    cols = finite[None, :].expand_as(v)
    hi = torch.where(inset & cols, v + slack, -math.inf).amax(1)
    lo = torch.where(~inset & cols, v - slack, math.inf).amin(1)
    valid = (torch.isfinite(v) & torch.isfinite(slack) | ~cols).all(1)
    return valid & ((hi < lo) | (m >= int(finite.sum())))


@dataclass
class _Bounded(Distances):
    """NNM's distances: ``refined`` returns, where rigorous error bounds allow, a cheaper matrix
    whose rows put their m = ``self.m`` first columns (stable sort, own column first) exactly where
    the float64 refined matrix would -- all that ``nearest`` reads from it -- and otherwise the
    refined matrix itself (computed as before, so the neighbourhoods are always the same).

    Bounds on the exact ``D = |u_i - u_j|^2`` (u32 = 2^-24, u64 = 2^-53; gamma_n = n u / (1 - n u)
    bounds the relative error of a sum of n terms in any order, fused multiply-adds included):

    * the Gram distance ``sq`` (one float32 GEMM, its diagonal, a sum and a difference):
      |sq - D| <= (gamma32_P + 3 u32) (1 + gamma32_P) (|u_i| + |u_j|)^2; |u_i|^2 from ``norms2``
      (float32 blocks of a sum of squares) inflated by 1 / (1 - gamma32_{P+8});
    * the refined distance (rows centred at c in float64, |x - y| <= u64 |y| with y = u - c exact;
      float64 Gram sums over P products; symmetrised; a sum and a difference):
      |refined - D| <= (gamma64_{2P+64} + 9 u64) 1.02 (|y_i| + |y_j|)^2, with |y_i| <= |u_i| + |c|,
      or |y_i|^2 = D(i, c) <= est(i, c) / (1 - gamma64_{P+4}) once the centre's row is estimated;
    * the direct float64 differences ``est`` (:mod:`._nnm_kernel`: P non-negative terms):
      |est - D| <= gamma64_{P+4} est / (1 - gamma64_{P+4}).

    A row is settled (:func:`_settled`) when the intervals value +- (2 x both bounds + 4 u64 |value|)
    of its m chosen columns lie strictly below those of the others; columns of rows with
    non-finite entries are +inf in both (ordered by index). The Gram distances settle what they can
    (only with plain float32 products); the remaining finite rows, and the centre, get direct
    differences when they are at most half the rows (beyond that the refined matrix is cheaper);
    if a row is still unsettled, or the rows are not contiguous float32 on the CPU, the refined
    matrix is computed.
    """

    m: int = 0

    def refined(self, centre: int) -> Tensor:
        proxy = self._settled_proxy(centre) if self._refined is None else None
        return proxy if proxy is not None else super().refined(centre)

    def _settled_proxy(self, centre: int) -> Tensor | None:
        u, m = self.updates, self.m
        k, p = u.shape
        if u.dtype != torch.float32 or u.device.type != "cpu" or not u.is_contiguous() or not 0 < m < k:
            return None
        fin = ~self.bad
        ref_coef = (_gamma(2 * p + 64, _U64) + 9 * _U64) * 1.02
        sq = self.sq.to(torch.float64).clone().fill_diagonal_(-1.0)
        g32 = _gamma(p + 8, _U32)
        done = torch.zeros(k, dtype=torch.bool)
        if math.isfinite(g32) and _ieee_float32_matmul():
            nrm = (self.norms2 / (1 - g32)).sqrt() * (1 + 4 * _U64)
            pair = nrm[:, None] + nrm[None, :]
            slack = _SAFE * (
                (g32 + 3 * _U32) * (1 + g32) * pair.square() + ref_coef * (pair + 2 * nrm[centre]).square()
            ) + 4 * _U64 * sq.abs()
            done = _settled(sq, slack.fill_diagonal_(0.0), fin, m) & fin
        proxy = torch.where(fin[:, None] & fin[None, :], sq, math.inf)
        need = fin & ~done
        if not bool(need.any()):
            return proxy
        rows = torch.nonzero(fin).flatten()
        pos = torch.full((k,), -1, dtype=torch.long)
        pos[rows] = torch.arange(len(rows))
        cand = torch.nonzero(need).flatten()
        cand = torch.cat([cand, torch.tensor([centre])]) if not bool(need[centre]) else cand
        if 2 * len(cand) > k:
            return None  # direct differences for most rows would cost more than the refined matrix
        est = _direct(u, rows, pos[cand])
        ge = _gamma(p + 4, _U64)
        y = (est[int(torch.nonzero(cand == centre)[0])] / (1 - ge)).sqrt() * (1 + 4 * _U64)
        own = need[cand]
        v = torch.full((int(own.sum()), k), math.inf, dtype=torch.float64)
        v[:, rows] = est[own]
        v[torch.arange(len(v)), cand[own]] = -1.0
        ynear = torch.zeros(k, dtype=torch.float64)
        ynear[rows] = y
        yy = (ynear[cand[own], None] + ynear[None, :]).square()
        slack = _SAFE * (ge * v.abs() / (1 - ge) + ref_coef * yy) + 4 * _U64 * v.abs()
        slack[torch.arange(len(v)), cand[own]] = 0.0
        slack = torch.where(torch.isfinite(v), slack, 0.0)
        if not bool(_settled(v, slack, fin, m).all()):
            return None
        proxy[cand[own]] = v
        return proxy


def _direct(u: Tensor, rows: Tensor, cand: Tensor) -> Tensor:
    """float64 (len(cand), len(rows)) squared distances from rows[cand] to rows by direct
    differences (:func:`._nnm_kernel.pair_sq_distances`, on torch's thread count)."""
    import numba

    from . import _nnm_kernel  # numba's kernel, imported on first use

    config = numba.config
    threads = max(1, min(torch.get_num_threads(), int(getattr(config, "NUMBA_NUM_THREADS", 1))))
    numba.set_num_threads(threads)
    n = len(cand)
    padded = torch.cat([cand, cand[-1:].expand((-n) % _nnm_kernel.GROUP)])
    out = _nnm_kernel.pair_sq_distances(u.detach().numpy(), rows.numpy(), padded.numpy(), threads)
    return torch.from_numpy(out[:n])


@dataclass
class NNM(Pre):
    name = "nnm"
    fresh_output = True
    preserves = frozenset(
        {
            "permutation_invariant",
            "translation_equivariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        }
    )

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        check_updates(updates, self.name)
        k = updates.shape[0]
        dist = _Bounded.of(updates)
        mix = mixing_matrix(dist, max(1, k - f_hat(ctx)))
        m = mix.to(updates.dtype)
        if not bool(dist.bad.any()):
            mixed = m @ updates
        else:  # 0 * inf would spread NaN: add the non-finite rows only where they are neighbours
            mixed = m @ torch.where(dist.bad[:, None], torch.zeros_like(updates), updates)
            for b in torch.nonzero(dist.bad).flatten().tolist():
                users = torch.nonzero(mix[:, b]).flatten()
                mixed[users] += m[users, b, None] * updates[b]

        def pullback(weights: Tensor) -> Tensor:
            return (mix.to(weights.device).T @ weights.to(torch.float64)).to(weights.dtype)

        return mixed, ctx, pullback
