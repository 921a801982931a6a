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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...kernels import check_updates
from ...types import DefenseContext
from .._select import Distances, f_hat, nearest
from . import Pre, Pullback


def mixing_matrix(dist: Distances, m: int) -> Tensor:
    """(K, K) float64 matrix with 1/m at each row's m nearest rows (itself first)."""
    k = dist.sq.shape[0]
    mix = torch.zeros(k, k, dtype=torch.float64, device=dist.sq.device)
    return mix.scatter_(1, nearest(dist, m), 1.0 / m)


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
        dist = Distances.of(updates)
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
