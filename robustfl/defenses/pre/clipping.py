"""Static norm clipping: ``u_k <- u_k * min(1, tau / ||u_k||)``.

``tau`` (required, > 0) is in the units of the updates, so it is not scale-free. Rows keep their
client (one row in, one out): the next stage's weights carry over unchanged, as shares of the
clipped rows. Rows with non-finite entries pass through untouched (the rule decides). K and
f-hat are unchanged.

``apply_`` is the same map done in place: only the rows over tau are rescaled, in the tensor given
(torch's trailing-underscore convention). ``compose`` uses it on a private intermediate (the fresh
rows an earlier stage of the same composition returned), never on the caller's updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ... import params
from ...kernels import check_updates, row_norms
from ...types import DefenseContext
from . import Pre, Pullback, identity


def _factors(norms: Tensor, tau: Tensor | float) -> tuple[Tensor, Tensor]:
    """Per-row scale min(1, tau / ||u||) (1 for non-finite rows) and which rows it changes."""
    over = torch.isfinite(norms) & (norms > tau)
    return torch.where(over, tau / norms, torch.ones_like(norms)), over


def clip_rows(updates: Tensor, norms: Tensor, tau: Tensor | float) -> Tensor:
    """Scale the finite rows whose norm exceeds tau down to tau (a new tensor)."""
    factor, _ = _factors(norms, tau)
    return updates * factor.to(updates.dtype)[:, None]


def clip_rows_(updates: Tensor, norms: Tensor, tau: Tensor | float) -> Tensor:
    """:func:`clip_rows` in place: only the rows over tau are written. Returns ``updates``."""
    factor, over = _factors(norms, tau)
    factor = factor.to(updates.dtype)
    idx = torch.nonzero(over).flatten()
    if idx.numel() == updates.shape[0]:
        updates.mul_(factor[:, None])
    else:  # a row at a time: no (n, P) gather/scatter temporaries
        for i in idx.tolist():
            updates[i].mul_(factor[i])
    return updates


@dataclass
class Clipping(Pre):
    tau: float
    name = "clipping"
    fresh_output = True
    preserves = frozenset({"permutation_invariant"})

    def __post_init__(self) -> None:
        params.number(f"pre-aggregator {self.name}", "tau", self.tau, low=0, strict_low=True)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        check_updates(updates, self.name)
        return clip_rows(updates, row_norms(updates), float(self.tau)), ctx, identity

    def apply_(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        """The same map, rescaling ``updates`` in place (for rows nobody else holds)."""
        check_updates(updates, self.name)
        return clip_rows_(updates, row_norms(updates), float(self.tau)), ctx, identity
