"""The shapes every part of robustfl speaks: updates are rows of a (K, P) tensor.

* :class:`Aggregate` -- what a defense returns.
* :class:`DefenseContext` -- what the server knows in a round (never which rows are Byzantine).
* :class:`Knowledge` and :class:`AttackContext` -- what an attacker is granted.
* :class:`Defense` and :class:`Attack` -- the two protocols plugins implement.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from torch import Tensor


@dataclass(frozen=True)
class Aggregate:
    """A defense's output.

    ``vector`` (P,) is the aggregated update. ``weights`` (K,) is each row's influence share
    (>= 0, summing to 1 for weighted averages, all zeros when the rule returns the zero update,
    None for coordinate-wise rules). ``stats`` holds the rule's diagnostics.
    """

    vector: Tensor
    weights: Tensor | None = None
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DefenseContext:
    """What a server knows this round, and nothing else.

    ``assumed_byzantine`` is f-hat as a count for this round's rows; ``client_ids`` says which
    client each row came from; ``num_samples`` each row's sample count (None = equal weights);
    ``reference`` the server's own update on its root data (None without root data);
    ``coordinates`` the indices of the shared coordinates under PSFed (None = all).
    """

    round: int = 0
    global_model: Tensor | None = None
    assumed_byzantine: int = 0
    client_ids: Tensor | None = None
    num_samples: Tensor | None = None
    reference: Tensor | None = None
    coordinates: Tensor | None = None
    generator: Any = None  # torch.Generator


class Knowledge(enum.Flag):
    """What an attack needs. ``OWN`` is always granted."""

    OWN = enum.auto()
    HONEST = enum.auto()
    REFERENCE = enum.auto()
    ORACLE = enum.auto()

    @classmethod
    def grant(cls, level: str) -> Knowledge:
        """The scenario's ``threat.knowledge`` as flags: own, honest or full."""
        table = {
            "own": cls.OWN,
            "honest": cls.OWN | cls.HONEST,
            "full": cls.OWN | cls.HONEST | cls.REFERENCE | cls.ORACLE,
        }
        return table[level]

    def describe(self) -> str:
        return "|".join(m.name.lower() for m in Knowledge if m in self and m.name)


@dataclass(frozen=True, kw_only=True)
class AttackContext:
    """What the Byzantine clients see this round.

    ``own`` (f, P): what they would have sent honestly. ``honest``, ``reference`` and ``oracle``
    are set only where the threat model grants them. ``oracle(rows)`` returns the Aggregate the
    defense would produce with ``rows`` as the Byzantine rows; it never changes the defense's state.
    """

    own: Tensor
    round: int | None = None
    num_clients: int | None = None
    global_model: Tensor | None = None
    generator: Any = None  # torch.Generator
    honest: Tensor | None = None
    reference: Tensor | None = None
    oracle: Callable[[Tensor], Aggregate] | None = None


@runtime_checkable
class Defense(Protocol):
    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate: ...


@runtime_checkable
class Attack(Protocol):
    knowledge: Knowledge

    def __call__(self, ctx: AttackContext) -> Tensor: ...


@dataclass(frozen=True)
class TaskInfo:
    """What an attack may learn about the task (data-poisoning attacks need it)."""

    name: str
    num_classes: int | None  # None for regression
    input_shape: tuple[int, ...]
    is_image: bool
