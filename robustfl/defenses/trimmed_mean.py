"""Coordinate-wise trimmed mean: per coordinate drop the f largest and f smallest values, average the
rest.

Paper: Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning: Towards Optimal
Statistical Rates", ICML 2018

Per coordinate drop the f largest and the f smallest values and average the K - 2f others
(f = ctx.assumed_byzantine): ``out_j = mean(sort(u_.j)[f : K - f])``. This trims exactly f from
each side (``scipy.stats.trim_mean(U, f/K)`` trims ``int(f/K * K)``, one fewer for some (f, K)).

Guarantee: with K > 2f (``min_clients`` = 2f + 1) and at most f Byzantine rows, each coordinate
lies within the honest rows' range. K <= 2f leaves nothing to average: InputError.
Weights: None (coordinate-wise).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..errors import InputError
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Rule, f_hat, mean_of_order_stats


@dataclass
class TrimmedMean(Rule):
    name = "trimmed_mean"
    properties = frozenset(
        {"permutation_invariant", "translation_equivariant", "scale_equivariant", "coordinate_bounded"}
    )

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        if k <= 2 * f:
            raise InputError(f"trimmed_mean: needs K > 2 f_hat rows to keep any, got K = {k}, f_hat = {f}")
        return Aggregate(mean_of_order_stats(updates, f, k - f - 1), None, {"num_trimmed": float(2 * f)})
