"""Divide-and-Conquer, DnC: drop the rows with the largest projections on the top singular vector of
random coordinate subsets.

Paper: Shejwalkar, Houmansadr, "Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
Defenses for Federated Learning", NDSS 2021, Algorithm 2

For each of ``iterations`` (default 5) rounds of the filter:
1. ``r``: b = min(``subsample``, P) coordinates drawn without replacement --
   ``torch.randperm(P, generator=ctx.generator)[:b]``, sorted (one draw per iteration, in order);
2. ``R = U[:, r]`` (float64), centred: ``C = R - mean_k R``;
3. ``v`` = top right singular vector of C; outlier scores ``s_k = <C_k, v>^2``, computed as
   ``sigma_1^2 a_k^2`` with (sigma_1^2, a) the top eigenpair of the K x K matrix ``C C^T``
   (the same numbers as the SVD, ~10x cheaper);
4. keep the K - floor(c f) rows with the smallest scores (ties: lower index), f = f-hat,
   ``c`` default 1.0; at least one row is kept.
The good set is the intersection over the iterations; the output is its mean (weights 1/|good|),
or the zero update with zero weights if the intersection is empty. When ``subsample >= P`` every
draw is the whole coordinate set and the filter is computed once (the draws are still made, so
the generator advances as before).
Rows with non-finite entries are removed before the filter (weight 0). Without a generator in
the context a fresh one seeded 0 is used.
Guarantee: the paper evaluates honest majorities; ``min_clients`` = 2f + 1.
Stats: ``num_kept``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, f_hat, generator_for


@dataclass
class DnC(Rule):
    iterations: int = 5
    subsample: int = 10_000
    c: float = 1.0
    name = "dnc"
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
        params.number(f"defense {self.name}", "iterations", self.iterations, low=1, integer=True)
        params.number(f"defense {self.name}", "subsample", self.subsample, low=1, integer=True)
        params.number(f"defense {self.name}", "c", self.c, low=0)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        finite = torch.isfinite(row_norms(updates))
        ok = torch.nonzero(finite).flatten()
        n = len(ok)
        keep_n = max(1, n - math.floor(self.c * f_hat(ctx) + 1e-9))
        good = torch.ones(n, dtype=torch.bool, device=updates.device)
        g = generator_for(ctx)
        keep: Tensor | None = None
        for _ in range(self.iterations if n else 0):
            r = torch.sort(torch.randperm(p, generator=g, device=g.device)[: self.subsample]).values
            if keep is not None and self.subsample >= p:
                continue  # every draw is all P coordinates: the same filter (the draws still advance g)
            sub = updates[:, r.to(updates.device)][ok].to(torch.float64)
            centred = sub - sub.mean(0)
            lam, vecs = torch.linalg.eigh(centred @ centred.T)  # <C_k, v>^2 = sigma_1^2 u_k^2
            scores = lam[-1].clamp(min=0) * vecs[:, -1].square()
            keep = torch.zeros_like(good)
            keep[torch.sort(scores, stable=True).indices[:keep_n]] = True
            good &= keep
        kept = ok[good]
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        vector = torch.zeros(p, dtype=updates.dtype, device=updates.device)
        if len(kept):
            weights[kept] = 1.0 / len(kept)
            vector = combine(updates, weights, bool(finite.all()))
        return Aggregate(vector, weights, {"num_kept": float(len(kept))})
