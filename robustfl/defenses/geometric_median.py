"""Geometric median by smoothed Weiszfeld iterations (RFA).

Paper: Pillutla, Kakade, Harchaoui, "Robust Aggregation for Federated Learning", IEEE Transactions
on Signal Processing 2022

Approximates ``argmin_z sum_k ||u_k - z||`` by the iteration, from the mean of the rows,
``beta_k = 1 / max(nu * s, ||u_k - z||)``, ``z <- sum_k beta_k u_k / sum_k beta_k``, with s the mean
row norm (so ``nu``, default 1e-6, is scale-free), until ``||z_new - z|| <= tol * max(||z_new||, s)``
(tol = 1e-10, raised to 32 eps of the dtype when that is coarser: float32 cannot resolve 1e-10) or
``max_iter`` (default 1000) iterations. In float64 each iteration needs only ``U z`` and
``beta^T U``: distances come from ``||u_k||^2 - 2<u_k, z> + ||z||^2``, and a row where that
expansion's rounding error (~eps sqrt(P) (||u_k||^2 + ||z||^2)) could exceed 1e-7 of the distance
is measured directly instead. In narrower dtypes (float32: eps sqrt(P) is ~1e-4 at P = 1e6, so the
expansion cannot resolve distances below ~1e-2 of the norms) every distance is measured directly,
by differences chunked over coordinates (one pass over U, no (K, P) temporary).

Weights: ``beta / sum(beta)`` of the last step (so the output is exactly that convex combination).
Rows with non-finite entries are left out (weight 0, stat ``excluded``); if none is left the
output is the zero update. Guarantee: breakdown point 1/2, ``min_clients`` = 2f + 1.
Equivariances hold up to the nu-smoothing and the stopping tolerance.
Stats: ``iterations``, ``converged`` (1/0), ``excluded``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, sq_dist_to


@dataclass
class GeometricMedian(Rule):
    nu: float = 1e-6
    max_iter: int = 1000
    name = "geometric_median"
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
        params.number(f"defense {self.name}", "nu", self.nu, low=0, strict_low=True)
        params.number(f"defense {self.name}", "max_iter", self.max_iter, low=1, integer=True)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        norms = row_norms(updates)
        ok = torch.isfinite(norms)
        rows, n2 = (updates, norms.square()) if bool(ok.all()) else (updates[ok], norms[ok].square())
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        stats = {"iterations": 0.0, "converged": 1.0, "excluded": float(k - len(rows))}
        if len(rows) == 0:
            return Aggregate(torch.zeros(p, dtype=updates.dtype, device=updates.device), weights, stats)
        s = float(n2.sqrt().mean())
        floor = self.nu * s
        eps = torch.finfo(updates.dtype).eps
        tol, rounding = max(1e-10, 32 * eps), eps * (4 + 2 * math.sqrt(p))
        expand = updates.dtype == torch.float64  # narrower dtypes cannot resolve the expansion
        w = torch.full((len(rows),), 1.0 / len(rows), dtype=torch.float64, device=updates.device)
        z = rows.mean(0)
        for it in range(1, self.max_iter + 1 if floor > 0 else 1):  # floor 0: all rows are zero
            if expand:
                z2 = float(torch.linalg.vector_norm(z)) ** 2
                d2 = (n2 - 2 * (rows @ z) + z2).clamp_(min=0)
                unsure = rounding * (n2 + z2) > 1e-7 * d2
                if bool(unsure.any()):
                    d2[unsure] = sq_dist_to(rows[unsure], z)
            else:
                d2 = sq_dist_to(rows, z)
            beta = d2.sqrt().clamp(min=floor).reciprocal()  # 1 / max(floor, d): torch's 1.0 / x is this
            w = beta / beta.sum()
            z_new = w.to(updates.dtype) @ rows
            change = float(torch.linalg.vector_norm(z_new - z, dtype=torch.float64))
            z = z_new
            stats["iterations"] = float(it)
            stats["converged"] = float(change <= tol * max(float(torch.linalg.vector_norm(z)), s))
            if stats["converged"]:
                break
        weights[ok] = w.to(updates.dtype)
        return Aggregate(z, weights, stats)
