"""Adaptive robust clipping, ARC: the k largest rows are clipped to the norm of the (k+1)-th.

Paper: Allouah, Guerraoui, Gupta, Jellouli, Rizk, Stephan, "Boosting Robustness by Clipping
Gradients in Distributed Learning", ICLR 2025

With k = floor(2 (f/K) (K - f)) (f = f-hat), the k rows of largest norm are scaled down to the
norm of the (k+1)-th largest; the others are untouched (k = 0: nothing changes). The threshold
scales with the rows, so ARC keeps a rule's scale equivariance. Rows keep their client: the next
stage's weights carry over unchanged (shares of the clipped rows). Rows with non-finite entries
count as the largest and are left untouched. K and f-hat are unchanged.

``apply_`` is the same map done in place (only the k clipped rows are written); ``compose`` uses
it on a private intermediate, never on the caller's updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...kernels import check_updates, row_norms
from ...types import DefenseContext
from .._select import f_hat
from . import Pre, Pullback, identity
from .clipping import clip_rows, clip_rows_


def arc_count(k: int, f: int) -> int:
    """floor(2 (f/K) (K - f)), computed exactly in integers, never negative."""
    return max(0, 2 * f * (k - f) // k) if k else 0


@dataclass
class ARC(Pre):
    name = "arc"
    fresh_output = True
    preserves = frozenset({"permutation_invariant", "scale_equivariant"})

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        return self._run(updates, ctx, inplace=False)

    def apply_(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        """The same map, rescaling ``updates`` in place (for rows nobody else holds)."""
        return self._run(updates, ctx, inplace=True)

    def _run(
        self, updates: Tensor, ctx: DefenseContext, inplace: bool
    ) -> tuple[Tensor, DefenseContext, Pullback]:
        check_updates(updates, self.name)
        k = updates.shape[0]
        n = arc_count(k, f_hat(ctx))
        if n == 0:
            return updates, ctx, identity
        norms = row_norms(updates)
        ranked = torch.sort(torch.nan_to_num(norms, nan=float("inf")), descending=True).values
        return (clip_rows_ if inplace else clip_rows)(updates, norms, ranked[n]), ctx, identity
