"""Coordinate-wise median of the rows.

Paper: Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning: Towards Optimal
Statistical Rates", ICML 2018

``out_j = median_k u_kj``: the middle value of each coordinate, the mean of the two middle values
when K is even (as ``numpy.median``). A NaN entry counts as the largest value.

Guarantee: with K >= 2f + 1 (``min_clients``) and at most f Byzantine rows, each coordinate of
the output lies within the honest rows' range of that coordinate, whatever the Byzantine values.
Weights: None (coordinate-wise). Runs on any K >= 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Rule, mean_of_order_stats


@dataclass
class Median(Rule):
    name = "median"
    properties = frozenset(
        {"permutation_invariant", "translation_equivariant", "scale_equivariant", "coordinate_bounded"}
    )

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k = updates.shape[0]
        return Aggregate(mean_of_order_stats(updates, (k - 1) // 2, k // 2))
