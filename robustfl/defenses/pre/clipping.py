"""Static norm clipping: ``u_k <- u_k * min(1, tau / ||u_k||)``.

``tau`` (required, > 0) is in the units of the updates, so it is not scale-free. Rows keep their
client (one row in, one out): the next stage's weights carry over unchanged, as shares of the
clipped rows. Rows with non-finite entries pass through untouched (the rule decides). K and
f-hat are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ...types import DefenseContext
from .._select import require_number
from .._util import check_updates, row_norms
from . import Pre, Pullback, identity


def clip_rows(updates: Tensor, norms: Tensor, tau: Tensor | float) -> Tensor:
    """Scale the finite rows whose norm exceeds tau down to tau (a new tensor)."""
    factor = torch.where(torch.isfinite(norms) & (norms > tau), tau / norms, torch.ones_like(norms))
    return updates * factor.to(updates.dtype)[:, None]


@dataclass
class Clipping(Pre):
    tau: float
    name: ClassVar[str] = "clipping"
    preserves: ClassVar[frozenset[str]] = frozenset({"permutation_invariant"})

    def __post_init__(self) -> None:
        require_number(self.name, "tau", self.tau, strict=True)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        check_updates(updates, self.name)
        return clip_rows(updates, row_norms(updates), float(self.tau)), ctx, identity
