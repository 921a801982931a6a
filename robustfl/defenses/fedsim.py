"""FedSim: cosine-similarity weights with ReLU clipping and a water-filled weight cap.

Formula (the FedSim validation report in ``seeds/``, corrected and made exact; in short in docs/maths.md).
``basis = "model"``: v_k = w + u_k, r = w (the global model); ``basis = "update"``: v_k = u_k,
r = ``ctx.reference`` if given, else the coordinate-wise median of the valid rows::

    V    = {k : v_k finite, ‖v_k‖ > eps}             (others: weight 0, counted in ``excluded``)
    s_k  = clip(<v_k, r> / (‖v_k‖ ‖r‖), -1, 1)        k in V
    a_k  = s_k if s_k >= max(τ, 0) else 0             (``threshold`` τ)
    ω    = a / Σa, then capped at c by water-filling  (``cap`` c; c·|P| < 1 -> c = 1/|P|)
    g    = Σ_k ω_k u_k                                (the model Σ ω_k v_k on the model basis)

Water-filling: with P = {k : a_k > 0}, rows whose share reaches c get exactly c and the rest
``1 - c·|saturated|`` is shared by the others in proportion to a_k, repeated until nothing new
saturates (at most |P| passes): Σω = 1, 0 <= ω <= c, order kept, zeros stay zero.
Zero update (every weight 0, ``fallback_used = 1``): r invalid, V empty, or Σa <= eps. Under
PSFed the rows, w and the reference are already the shared sub-vectors.

Stats: ``avg_similarity`` and ``similarity_variance`` (mean and population variance of s over V;
0.0 when V is empty or r invalid), ``max_weight``, ``min_weight`` (over all K), ``weight_entropy``
(nats), ``num_capped`` (rows whose share a_k/Σa exceeded c), ``cap_infeasible``,
``fallback_used``, ``excluded``.

Regime: no Byzantine guarantee. It down-weights divergent clients under heterogeneity; on the
model basis every benign cosine is ≈ 1, so a malicious w + δ with δ ⟂ w keeps cos >= τ for
‖δ‖ <= ‖w‖·sqrt(1/τ² - 1). The cap bounds each row's weight, never the sum over Sybils.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..capabilities import DefenseBase
from ..errors import InputError
from ..kernels import EPS, check_updates, entropy, row_norms, valid_rows
from ..types import Aggregate, DefenseContext

log = logging.getLogger(__name__)

BASES = ("model", "update")


def water_fill(a: Tensor, cap: float) -> tuple[Tensor, int, bool]:
    """Shares of the non-negative scores ``a`` (Σa > 0) capped at ``cap``: (ω, num_capped, infeasible)."""
    pos = a > 0
    infeasible = cap * int(pos.sum()) < 1
    c = 1.0 / int(pos.sum()) if infeasible else cap
    share = a / a.sum()
    num_capped = int((share > c).sum())
    saturated = torch.zeros_like(pos)
    while True:  # each pass saturates at least one more row, so at most |P| passes
        free = pos & ~saturated
        rest = a[free].sum()
        if rest <= 0:
            break
        share = torch.where(free, (1 - c * int(saturated.sum())) * a / rest, share)
        new = free & (share >= c)
        if not bool(new.any()):
            break
        saturated |= new
        share = torch.where(saturated, torch.full_like(share, c), share)
    return torch.where(pos, share, torch.zeros_like(share)), num_capped, infeasible


@dataclass
class FedSim(DefenseBase):
    """Similarity-weighted averaging on the ``basis`` vectors, ReLU ``threshold`` and weight ``cap``."""

    basis: str = "model"
    threshold: float = 0.0
    cap: float = 1.0

    name = "fedsim"
    properties = frozenset({"permutation_invariant"})

    def __post_init__(self) -> None:
        c = f"defense {self.name}"
        params.choice(c, "basis", self.basis, BASES)
        params.number(c, "threshold", self.threshold, low=-1, high=1)
        params.number(c, "cap", self.cap, low=0, strict_low=True, high=1)

    def min_clients(self, f_hat: int) -> int:
        return 1

    def _vector(self, ctx: DefenseContext, field: str, p: int, like: Tensor) -> Tensor | None:
        t = getattr(ctx, field)
        if t is not None and tuple(t.shape) != (p,):
            raise InputError(f"fedsim: ctx.{field} must have shape ({p},), got {tuple(t.shape)}")
        return None if t is None else t.to(dtype=like.dtype, device=like.device)

    def _similarity_inputs(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, Tensor, Tensor]:
        """(<v_k, r>, ‖v_k‖, ‖r‖) in float64 without forming the (K, P) matrix of models v_k."""
        p = updates.shape[1]
        unorm = row_norms(updates)
        if self.basis == "model":
            w = self._vector(ctx, "global_model", p, updates)
            if w is None:
                raise InputError("fedsim: basis 'model' needs the global model (ctx.global_model), got none")
            wn = torch.linalg.vector_norm(w, dtype=torch.float64)
            uw = (updates @ w).to(torch.float64)
            vn2 = unorm**2 + 2 * uw + wn**2
            dots = uw + wn**2
            # ‖w + u_k‖² by expansion cancels when v_k is small next to u_k and w: recompute those rows
            near = torch.isfinite(vn2) & (vn2 <= 1e-2 * (unorm**2 + wn**2))
            if bool(near.any()):
                v = updates[near] + w
                vn2[near] = row_norms(v) ** 2
                dots[near] = (v @ w).to(torch.float64)
            return dots, vn2.clamp(min=0).sqrt(), wn
        r = self._vector(ctx, "reference", p, updates)
        if r is None:  # coordinate-wise median of the valid rows (mean of the two middle values)
            ok = valid_rows(unorm)
            rows = updates if bool(ok.all()) else updates[ok]
            n = rows.shape[0]
            srt = rows.sort(dim=0).values
            r = (srt[(n - 1) // 2] + srt[n // 2]) / 2 if n else updates.new_zeros(p)
        return (updates @ r).to(torch.float64), unorm, torch.linalg.vector_norm(r, dtype=torch.float64)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, "fedsim")
        k = updates.shape[0]
        dots, vnorm, rnorm = self._similarity_inputs(updates, ctx)
        valid = valid_rows(vnorm)
        zeros = torch.zeros(k, dtype=torch.float64, device=updates.device)
        r_ok = bool(torch.isfinite(rnorm)) and float(rnorm) > EPS
        excluded = int((~valid).sum())
        if excluded:
            log.warning("fedsim: excluded %d of %d rows (non-finite or zero %s)", excluded, k, self.basis)
        if not r_ok:
            log.warning("fedsim: %s-basis reference is zero or not finite; zero update", self.basis)
        cos = (dots / (vnorm * rnorm)).clamp(-1, 1) if r_ok else zeros
        cos = torch.where(valid, cos, zeros)
        s = cos[valid] if r_ok else zeros[:0]  # the similarities over V, for the stats
        a = torch.where(valid & (cos >= max(self.threshold, 0.0)), cos, zeros)
        fallback = float(a.sum()) <= EPS
        num_capped, infeasible = 0, False
        share = zeros
        if not fallback:
            share, num_capped, infeasible = water_fill(a, self.cap)
        coef = share.to(updates.dtype)
        vector = coef @ updates if bool(valid.all()) else coef[valid] @ updates[valid]
        stats = {
            "avg_similarity": float(s.mean()) if s.numel() else 0.0,
            "similarity_variance": float(s.var(correction=0)) if s.numel() else 0.0,
            "max_weight": float(share.max()),
            "min_weight": float(share.min()),
            "weight_entropy": entropy(share),
            "num_capped": float(num_capped),
            "cap_infeasible": float(infeasible),
            "fallback_used": float(fallback),
            "excluded": float(excluded),
        }
        return Aggregate(vector=vector, weights=coef, stats=stats)
