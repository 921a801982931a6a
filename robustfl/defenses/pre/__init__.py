"""Pre-aggregators: maps applied to the rows before an aggregation rule (``compose``).

A pre-aggregator is called as ``pre(updates, ctx) -> (new_updates, new_ctx, pullback)``:
``new_updates`` (K', P) are what the next stage sees, ``new_ctx`` carries f-hat' (and per-row
fields) for them, and ``pullback`` maps the next stage's weights (K',) to weights over the K input
rows -- None when the map is not linear in the rows. ``transform_counts(K, f) -> (K', f')`` says
how the row count and f-hat change without running it (used by ``admits``/``min_clients`` of a
composition). ``preserves`` names the rule properties (see ``robustfl.testing.defenses``) that
survive the map; ``reset()`` forgets any state.

Optional: ``apply_(updates, ctx)``, the same map done in place on ``updates``; and
``fresh_output = True``, a promise that the rows returned are either the input itself or a new
tensor the pre-aggregator keeps no reference to. ``compose`` calls a stage's ``apply_`` only when
its input came fresh from the stage before it (that stage promises ``fresh_output`` and the rows
share no memory with the caller's updates): the caller's updates are never modified.

Built-ins: ``clipping`` (static norm clip), ``arc`` (adaptive robust clipping), ``bucketing``
(random buckets averaged), ``nnm`` (nearest-neighbour mixing). Plugins register under the
entry-point group ``robustfl.pre_aggregators``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from ...capabilities import PreAggregatorBase, Pullback
from ...types import DefenseContext


@runtime_checkable
class PreAggregator(Protocol):
    name: str

    def __call__(
        self, updates: Tensor, ctx: DefenseContext
    ) -> tuple[Tensor, DefenseContext, Pullback | None]: ...

    def transform_counts(self, k: int, f_hat: int) -> tuple[int, int]: ...


Pre = PreAggregatorBase  # the built-ins' base (declared optional behaviour: robustfl.capabilities)


def identity(weights: Tensor) -> Tensor:
    """Pullback of a row-wise map (rows stay one per client): weights are shares of the new rows."""
    return weights


def names() -> list[str]:
    from .. import pre_registry

    return pre_registry.names()


def create(name: str, **params: Any) -> Any:
    from .. import pre_registry

    return pre_registry.create(name, **params)
