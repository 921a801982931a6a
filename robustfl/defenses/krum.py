"""Krum: the row with the smallest sum of squared distances to its K - f - 2 nearest rows.

Paper: Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine Learning with Adversaries: Byzantine
Tolerant Gradient Descent", NeurIPS 2017

Score of row i: ``s_i = sum of ||u_i - u_j||^2 over the n = max(0, K - f - 2) rows j != i
nearest to u_i`` (squared distances, as in the paper; f = ctx.assumed_byzantine). Krum returns
the row with the lowest score, ties to the lowest index; weights are one-hot.

Guarantee: with K >= 2f + 3 (``min_clients``) and at most f Byzantine rows, the output lies within
``sqrt(K - f - 2) * diam(honest rows)`` of some honest row (it is not always an honest row: a
Byzantine row at the honest mean wins). Below 2f + 3 it still selects a row.

Distances come from one Gram matrix in the input dtype; where two scores are within rounding of
each other and the choice depends on it, those rows are re-scored in float64
(``_select.select_lowest``). Rows with non-finite entries are never preferred over finite ones.
Stats: ``selected_index``; ``score_gap`` = (s_(2) - s_(1)) / s_(2), the relative margin of the
choice (0 when K = 1 or s_(2) = 0); ``tie_break`` = 1 when the two lowest scores are exactly equal
and the lower index decided (e.g. K = 3, f = 0: the closest pair always ties) -- permutation
invariance holds up to such ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..kernels import check_updates, krum_neighbours
from ..types import Aggregate, DefenseContext
from ._select import Distances, Rule, f_hat, select_lowest


def score_gap(scores: Tensor) -> float:
    """Relative gap between the two lowest scores (0 when undefined)."""
    if scores.numel() < 2:
        return 0.0
    s = torch.sort(scores.detach()).values  # a statistic: never part of a gradient
    return float((s[1] - s[0]) / s[1]) if torch.isfinite(s[1]) and s[1] > 0 else 0.0


@dataclass
class Krum(Rule):
    name = "krum"
    properties = frozenset(
        {
            "permutation_invariant",
            "translation_equivariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        }
    )

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 3

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k = updates.shape[0]
        dist = Distances.of(updates)
        sel, scores, tied = select_lowest(dist, None, krum_neighbours(k, f_hat(ctx)), 1)
        i = int(sel[0])
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        weights[i] = 1
        stats = {"selected_index": float(i), "score_gap": score_gap(scores), "tie_break": float(tied)}
        return Aggregate(updates[i].clone(), weights, stats)
