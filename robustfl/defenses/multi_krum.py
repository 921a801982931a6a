"""Multi-Krum: the mean of the m rows with the lowest Krum scores.

Paper: Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine Learning with Adversaries: Byzantine
Tolerant Gradient Descent", NeurIPS 2017

With Krum's scores ``s_i`` (sum of squared distances to the max(0, K - f - 2) nearest other
rows), average the m rows with the lowest scores (ties: lower index first); m = ``selected``,
default K - f (at least 1, at most K). Weights are 1/m on the selected rows.

Guarantee as Krum's: K >= 2f + 3 (``min_clients``). Near-tied scores at the selection boundary
are re-scored in float64 (``_select.select_lowest``).
Stats: ``num_selected``; ``score_gap`` (relative gap between the two lowest scores);
``tie_break`` = 1 when the m-th and (m+1)-th scores are exactly equal and the index decided.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates, krum_neighbours
from ..types import Aggregate, DefenseContext
from ._select import Distances, Rule, combine, f_hat, select_lowest
from .krum import score_gap


@dataclass
class MultiKrum(Rule):
    selected: int | None = None
    name = "multi_krum"
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
        if self.selected is not None:
            params.number(f"defense {self.name}", "selected", self.selected, low=1, integer=True)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 3

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        m = min(k, self.selected if self.selected is not None else max(1, k - f))
        dist = Distances.of(updates)
        sel, scores, tied = select_lowest(dist, None, krum_neighbours(k, f), m)
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        weights[sel] = 1.0 / m
        vector = combine(updates, weights, not bool(dist.bad.any()))
        stats = {"num_selected": float(m), "score_gap": score_gap(scores), "tie_break": float(tied)}
        return Aggregate(vector, weights, stats)
