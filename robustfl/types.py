"""The shapes every part of robustfl speaks: updates are rows of a (K, P) tensor.

* :class:`Aggregate` -- what a defense returns.
* :class:`DefenseContext` -- what the server knows in a round (never which rows are Byzantine).
* :class:`Knowledge` and :class:`AttackContext` -- what an attacker is granted.
* :class:`Defense` and :class:`Attack` -- the two protocols plugins implement.
* :func:`layer_ends`, :func:`restrict_layers`, :func:`layers_error` -- a model's layer boundaries
  as ``DefenseContext.layers`` states them, for the full vector and for PSFed's shared coordinates.
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from .errors import InputError


def _described(value: Any) -> str:
    """A value as an input error names it: a tensor by its shape and dtype, a number by its type
    and value, anything else by its type."""
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}" if isinstance(value, numbers.Number) else type(value).__name__


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

    ``layers``: where the model's parameter tensors (its layers) end in the rows, as cumulative
    end offsets, strictly increasing, the last equal to the rows' width: a model with a (5, 20)
    weight then a (5,) bias has ``layers = (100, 105)``; layer i is ``row[a:b]`` with
    ``b = layers[i]`` and ``a = layers[i - 1]`` (0 for i = 0). The tensors are in the order the
    flat vector lays them out (the task's ``named_parameters`` order; in Flower, the global
    model's floating arrays in key order). Under PSFed the offsets describe the rows as passed:
    the shared coordinates of each layer, in the rows' order (:func:`restrict_layers`), layers
    with no shared coordinate left out. None = unknown (synthetic rows, a context built by hand,
    a plugin task that does not say); layer-wise rules then say what they do instead.

    Checked here (shapes and types only): ``assumed_byzantine``, and ``client_ids`` and
    ``num_samples`` being 1-D tensors when given; their length K is checked by the rules that
    read them, which know K.
    """

    round: int = 0
    global_model: Tensor | None = None
    assumed_byzantine: int = 0
    client_ids: Tensor | None = None
    num_samples: Tensor | None = None
    reference: Tensor | None = None
    coordinates: Tensor | None = None
    generator: Any = None  # torch.Generator
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        f = self.assumed_byzantine
        if isinstance(f, bool) or not isinstance(f, numbers.Integral) or f < 0:
            raise InputError(
                f"DefenseContext.assumed_byzantine must be an integer >= 0 (f-hat, a count), got {f!r}"
            )
        for name in ("client_ids", "num_samples"):  # one entry per row: K is the rules' to check
            value = getattr(self, name)
            if value is not None and (not isinstance(value, Tensor) or value.ndim != 1):
                raise InputError(f"DefenseContext.{name} must be a 1-D tensor (one entry per row), got "
                                 f"{_described(value)}")


def layer_ends(sizes: Iterable[int]) -> tuple[int, ...]:
    """End offsets of tensors of ``sizes`` entries laid out one after another (empty ones left out):
    ``layer_ends([100, 5]) == (100, 105)``."""
    ends, at = [], 0
    for n in sizes:
        if n > 0:
            at += int(n)
            ends.append(at)
    return tuple(ends)


def layers_error(layers: Any, width: int | None) -> str | None:
    """Why ``layers`` cannot be ``DefenseContext.layers`` for rows of ``width`` coordinates (None
    when it can; ``width`` None checks the form only): a tuple of strictly increasing integers
    > 0 whose last is ``width`` (the empty tuple for width 0)."""
    if not isinstance(layers, tuple) or not all(type(e) is int for e in layers):
        return f"layers must be a tuple of integers, got {layers!r}"
    if (layers and layers[0] <= 0) or any(a >= b for a, b in zip(layers, layers[1:], strict=False)):
        return f"layers must be strictly increasing end offsets > 0, got {layers!r}"
    if width is not None and (layers[-1] if layers else 0) != width:
        return f"layers must end at the rows' width {width}, got {layers!r}"
    return None


def restrict_layers(layers: tuple[int, ...] | None, coordinates: Tensor | None) -> tuple[int, ...] | None:
    """``layers`` (end offsets in the full vector) for rows that hold only ``coordinates`` (indices
    into the full vector, in the rows' order): each layer's end is where its last shared coordinate
    sits in the rows, plus one; layers with no shared coordinate are left out. ``coordinates`` None
    (all shared): ``layers`` unchanged. None when ``layers`` is None, or when the coordinates
    interleave layers (the rows then hold no layer as one block) or fall past ``layers[-1]``;
    PSFed's are sorted."""
    if layers is None or coordinates is None:
        return layers
    ends = torch.tensor(layers, dtype=torch.long)
    which = torch.searchsorted(ends, coordinates.to(device="cpu", dtype=torch.long), right=True)
    if which.numel() and (bool((which[1:] < which[:-1]).any()) or int(which.max()) >= len(layers)):
        return None
    change = torch.nonzero(which[1:] != which[:-1]).flatten() + 1
    return tuple(int(i) for i in change) + ((int(which.numel()),) if which.numel() else ())


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

    def __post_init__(self) -> None:
        """Shapes only (no pass over the entries): ``own`` a floating (f, P) tensor, ``honest`` an
        (H, P) tensor and ``reference`` a (P,) tensor, P the width of ``own``. ``global_model`` is
        left to the attacks that read it (they name themselves in the error)."""
        own = self.own
        if not isinstance(own, Tensor) or own.ndim != 2 or not own.is_floating_point():
            raise InputError(f"AttackContext.own must be a floating (f, P) tensor, got {_described(own)}")
        p = own.shape[1]
        for name, rows in (("honest", True), ("reference", False)):
            value = getattr(self, name)
            if value is None:
                continue
            ok = isinstance(value, Tensor) and value.ndim == 1 + rows and value.shape[-1] == p
            if not ok:
                want = f"an (H, {p}) tensor" if rows else f"a ({p},) tensor"
                raise InputError(f"AttackContext.{name} must be {want} (P = {p}, the width of own), got "
                                 f"{_described(value)}")


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
