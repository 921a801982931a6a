"""FLTrust: trust scores from the cosine with the server's own update, magnitudes normalised to it.

Paper: Cao, Fang, Liu, Gong, "FLTrust: Byzantine-robust Federated Learning via Trust Bootstrapping",
NDSS 2021

Formula (Cao, Fang, Liu, Gong, "FLTrust: Byzantine-robust Federated Learning via Trust
Bootstrapping", NDSS 2021), with g0 the server's update on its root data (``ctx.reference``)::

    c_i  = <u_i, g0> / (‖u_i‖ ‖g0‖)          TS_i = max(0, c_i)
    ū_i  = (‖g0‖ / ‖u_i‖) u_i
    g    = Σ_i TS_i ū_i / Σ_j TS_j            weights TS / ΣTS (shares of the rescaled rows ū_i)

Edge cases: g0 not finite or ‖g0‖ <= eps -> g = 0, ``server_update_degenerate = 1``; a row that is
not finite or has norm <= eps gets TS = 0 and is excluded (``num_invalid``); ΣTS <= eps -> g = 0,
``all_zero_trust = 1`` -- unless ``fallback = "uniform"``, which then averages the rescaled valid
rows with equal weights (off by default: it lets an all-opposing attack through). Under PSFed the
rows and g0 are already the shared sub-vectors.

Stats: ``mean_trust`` (mean TS over all K rows, invalid rows counting 0), ``num_zero_trust``
(rows with TS = 0, invalid ones included), ``num_invalid``, ``server_update_norm`` ‖g0‖,
``max_weight``, ``weight_entropy`` (nats), ``server_update_degenerate``, ``all_zero_trust``
(ΣTS <= eps with a valid g0).

Regime: any number of malicious clients, provided the root data are clean and representative of
the clients' distribution (Theorem 1 assumes a strongly convex, smooth loss and i.i.d. root data;
as printed its proof never yields ρ > 0 -- see docs/bound.md). Deterministically ‖g‖ <= ‖g0‖ and a
row with c_i <= 0 has no influence; scaling a row by c > 0 changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..capabilities import DefenseBase
from ..errors import InputError
from ..kernels import EPS, check_updates, entropy, row_norms, valid_rows
from ..types import Aggregate, DefenseContext

FALLBACKS = ("none", "uniform")


@dataclass
class FLTrust(DefenseBase):
    """Trust-bootstrapped aggregation around the server reference update ``ctx.reference``."""

    fallback: str = "none"

    name = "fltrust"
    needs_reference = True  # reads the server's root-data update g0
    properties = frozenset({"permutation_invariant", "scale_invariant_rows"})

    def __post_init__(self) -> None:
        params.choice(f"defense {self.name}", "fallback", self.fallback, FALLBACKS)

    def min_clients(self, f_hat: int) -> int:
        return 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, "fltrust")
        k, p = updates.shape
        if ctx.reference is None:
            raise InputError(
                "fltrust: needs the server's reference update (set server.root_size > 0), got none"
            )
        if tuple(ctx.reference.shape) != (p,):
            raise InputError(f"fltrust: reference must have shape ({p},), got {tuple(ctx.reference.shape)}")
        g0 = ctx.reference.to(dtype=updates.dtype, device=updates.device)
        g0_norm = torch.linalg.vector_norm(g0, dtype=torch.float64)
        norms = row_norms(updates)
        valid = valid_rows(norms)
        zeros = torch.zeros(k, dtype=torch.float64, device=updates.device)
        degenerate = not (bool(torch.isfinite(g0_norm)) and float(g0_norm) > EPS)
        if degenerate:
            trust = zeros
        else:
            cos = (updates @ g0).to(torch.float64) / (norms * g0_norm)
            trust = torch.where(valid, cos.clamp(min=0), zeros)
        total = float(trust.sum())
        all_zero = not degenerate and total <= EPS
        if degenerate or (all_zero and (self.fallback == "none" or not bool(valid.any()))):
            share = zeros
        elif all_zero:  # fallback = "uniform": equal shares of the rescaled valid rows
            share = valid.to(torch.float64) / valid.sum()
        else:
            share = trust / total
        # row i contributes share_i * ‖g0‖/‖u_i‖ * u_i; invalid rows are dropped (0 * NaN is NaN)
        coef = torch.where(share > 0, share * g0_norm / norms, zeros).to(updates.dtype)
        vector = coef @ updates if bool(valid.all()) else coef[valid] @ updates[valid]
        weights = share.to(updates.dtype)
        stats = {
            "mean_trust": float(trust.mean()),
            "num_zero_trust": float((trust <= 0).sum()),
            "num_invalid": float((~valid).sum()),
            "server_update_norm": float(g0_norm),
            "max_weight": float(share.max()),
            "weight_entropy": entropy(share),
            "server_update_degenerate": float(degenerate),
            "all_zero_trust": float(all_zero),
        }
        return Aggregate(vector=vector, weights=weights, stats=stats)
