"""Bulyan: K - 2f rows chosen by repeated Krum, then a per-coordinate average of the values closest to
the median.

Paper: El Mhamdi, Guerraoui, Rouault, "The Hidden Vulnerability of Distributed Learning in
Byzantium", ICML 2018

1. Selection: theta = K - 2f rows by repeated Krum on the shrinking pool -- a pool of n' rows
   scores each row by the sum of squared distances to its max(0, n' - f - 2) nearest others in the
   pool (so the last picks, with 0 neighbours, fall to the lowest original index); the pick leaves
   the pool. All distances come from one Gram matrix.
2. Aggregation: per coordinate j, with m_j the median of the theta selected values, average the
   beta = theta - 2f selected values closest to m_j (ties: lower original index). Computed
   without sorting: the beta-th smallest |u_kj - m_j| by a partial selection, every value below
   it, and the first tied values in index order.

Guarantee: K >= 4f + 3 (``min_clients``). It computes for K >= 4f + 1 (beta >= 1); below that
there is nothing to average: InputError. Weights: None (coordinate-wise second stage).
Not declared permutation-invariant: the last pick scores a pool of 2f + 1 rows with f - 1
neighbours, so at f = 1 (0 neighbours: all scores 0) and f = 2 (1 neighbour: the closest pair
always ties) the lowest index decides, as specified. For f = 0 and f >= 3 the result is
permutation-invariant up to exact score ties (tested).
Stats: ``num_selected`` (theta), ``beta``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Distances, Rule, closest_mean, f_hat, mean_of_order_stats, repeated_krum


@dataclass
class Bulyan(Rule):
    name = "bulyan"
    properties = frozenset(
        {"translation_equivariant", "scale_equivariant", "coordinate_bounded"}
    )

    def min_clients(self, f_hat: int) -> int:
        return 4 * f_hat + 3

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        theta, beta = k - 2 * f, k - 4 * f
        if beta < 1:
            raise InputError(f"bulyan: needs K >= 4 f_hat + 1 rows, got K = {k}, f_hat = {f}")
        picks = repeated_krum(Distances.of(updates), f, theta)  # one distance matrix
        chosen = updates[torch.sort(picks).values]  # original index order
        med = mean_of_order_stats(chosen, (theta - 1) // 2, theta // 2)
        vector = closest_mean(chosen, med, beta)  # the beta values closest to the median
        return Aggregate(vector, None, {"num_selected": float(theta), "beta": float(beta)})
