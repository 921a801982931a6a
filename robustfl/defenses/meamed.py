"""Mean-around-Median (MeaMed): per coordinate, the mean of the K - f values closest to the median.

Paper: Xie, Koyejo, Gupta, "Generalized Byzantine-tolerant SGD", arXiv:1802.10116 (2018), the
"mean-around-median" rule; ByzFL's ``Meamed`` (LPD-EPFL/byzfl, ``byzfl/aggregators/aggregators.py``)
implements the same definition.

Per coordinate j, with ``m_j = median_k u_kj`` (the mean of the two middle values when K is even,
as ``numpy.median``) and f = ctx.assumed_byzantine::

    out_j = (1 / (K - f)) * sum of the K - f values u_kj with the smallest |u_kj - m_j|

Ties at the boundary (equal distance to the median) go to the lower row index, as in Bulyan's
second stage (the paper leaves them open; ByzFL's ``argpartition`` picks an unspecified one).
A NaN entry counts as the largest value for the median; a NaN among the kept values gives NaN.

Guarantee: the paper's dimensional Byzantine resilience needs an honest majority (q < m/2 in its
notation); ByzFL refuses 2f >= K. ``min_clients`` = 2f + 1. Outside it the rule still computes
while K - f >= 1 (K <= f: nothing to average, InputError).
Weights: None (coordinate-wise). Stats: ``num_kept`` (K - f).
Computed without sorting: the (K - f)-th smallest |u_kj - m_j| by a partial selection
(``numpy.partition``, split over torch's threads by column: bit-identical for any thread count).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..errors import InputError
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Rule, closest_mean, f_hat, mean_of_order_stats


@dataclass
class MeaMed(Rule):
    name = "meamed"
    properties = frozenset(
        {"permutation_invariant", "translation_equivariant", "scale_equivariant", "coordinate_bounded"}
    )

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        keep = k - f
        if keep < 1:
            raise InputError(f"meamed: needs K > f_hat rows to keep any, got K = {k}, f_hat = {f}")
        med = mean_of_order_stats(updates, (k - 1) // 2, k // 2)
        return Aggregate(closest_mean(updates, med, keep), None, {"num_kept": float(keep)})
