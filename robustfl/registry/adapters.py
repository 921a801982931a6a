"""Plugins as the engine speaks to them: the one place that reads a component's undeclared attributes.

A plugin is any callable of the contract's shape (DESIGN.md). One that derives from the bases
of :mod:`robustfl.capabilities` is used as is; any other is wrapped here, once, when the engine
builds it, in an adapter that declares what the object shows: an attack's ``knowledge``,
``poisons_data``/``poison``, ``trigger``/``target_label`` (a backdoor), ``sybil_rows``,
``setup`` and ``last_stats``; a defense's ``name``/``label``, ``properties``, ``admits``,
``min_clients`` and ``reset``; a pre-aggregator's ``name``, ``preserves``, ``fresh_output``,
``apply_``, ``transform_counts`` and ``reset``. Built-ins never pass through an adapter, so the
object the engine runs is the one ``create`` returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ..capabilities import AttackBase, DefenseBase, PreAggregatorBase, Pullback
from ..errors import ConfigError
from ..types import Aggregate, AttackContext, DefenseContext, Knowledge, TaskInfo


def declares_knowledge(obj: Any) -> bool:
    """Whether ``obj`` carries a :class:`~robustfl.types.Knowledge` (what marks an attack object)."""
    return isinstance(getattr(obj, "knowledge", None), Knowledge)


class PluginAttack(AttackBase):
    """An attack plugin that does not derive from :class:`~robustfl.capabilities.AttackBase`."""

    def __init__(self, obj: Any, label: str) -> None:
        self.obj, self.label = obj, label
        self.knowledge = getattr(obj, "knowledge", Knowledge.OWN)
        self._poisons = bool(getattr(obj, "poisons_data", False))
        self._backdoor = hasattr(obj, "trigger")
        self._sybil = hasattr(obj, "sybil_rows")
        self._per_client = bool(getattr(obj, "per_client", False))

    @property
    def poisons_data(self) -> bool:
        return self._poisons

    @property
    def backdoor(self) -> bool:
        return self._backdoor

    @property
    def sybil(self) -> bool:
        return self._sybil

    @property
    def target_label(self) -> int:
        return int(self.obj.target_label)

    @property
    def per_client(self) -> bool:
        return self._per_client

    @property
    def last_stats(self) -> Mapping[str, float]:  # type: ignore[override]
        return dict(getattr(self.obj, "last_stats", {}) or {})

    def __call__(self, ctx: AttackContext) -> Tensor:
        out: Tensor = self.obj(ctx)
        return out

    def setup(self, info: TaskInfo) -> None:
        if hasattr(self.obj, "setup"):
            self.obj.setup(info)
        elif self._poisons and info.num_classes is None:
            raise ConfigError(
                f"attack {self.label!r} poisons labels and does not apply to task {info.name!r}"
            )

    def poison(self, x: Tensor, y: Tensor, generator: Any) -> tuple[Tensor, Tensor]:
        px, py = self.obj.poison(x, y, generator)
        return px, py

    def trigger(self, x: Tensor) -> Tensor:
        out: Tensor = self.obj.trigger(x)
        return out

    def sybil_rows(self, f: int) -> Tensor:
        out: Tensor = self.obj.sybil_rows(f)
        return out


class PluginDefense(DefenseBase):
    """A defense plugin that does not derive from :class:`~robustfl.capabilities.DefenseBase`."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    @property
    def name(self) -> str:
        obj = self.obj
        return str(getattr(obj, "label", None) or getattr(obj, "name", None) or type(obj).__name__.lower())

    @property
    def properties(self) -> frozenset[str]:
        return frozenset(getattr(self.obj, "properties", frozenset()))

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        out: Aggregate = self.obj(updates, ctx)
        return out

    def min_clients(self, f_hat: int) -> int:
        return int(self.obj.min_clients(f_hat)) if hasattr(self.obj, "min_clients") else 1

    def admits(self, k: int, f_hat: int) -> bool:
        if hasattr(self.obj, "admits"):
            return bool(self.obj.admits(k, f_hat))
        if hasattr(self.obj, "min_clients"):
            return k >= int(self.obj.min_clients(f_hat))
        return True

    def reset(self) -> None:
        if hasattr(self.obj, "reset"):
            self.obj.reset()


class PluginPre(PreAggregatorBase):
    """A pre-aggregator plugin that does not derive from
    :class:`~robustfl.capabilities.PreAggregatorBase`."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    @property
    def name(self) -> str:
        return str(getattr(self.obj, "name", type(self.obj).__name__.lower()))

    @property
    def preserves(self) -> frozenset[str]:
        return frozenset(getattr(self.obj, "preserves", frozenset()))

    @property
    def fresh_output(self) -> bool:
        return getattr(self.obj, "fresh_output", False) is True

    def __call__(
        self, updates: Tensor, ctx: DefenseContext
    ) -> tuple[Tensor, DefenseContext, Pullback | None]:
        rows, new_ctx, pull = self.obj(updates, ctx)
        return rows, new_ctx, pull

    def apply_(
        self, updates: Tensor, ctx: DefenseContext
    ) -> tuple[Tensor, DefenseContext, Pullback | None]:
        step = self.obj.apply_ if hasattr(self.obj, "apply_") else self.obj
        rows, new_ctx, pull = step(updates, ctx)
        return rows, new_ctx, pull

    def transform_counts(self, k: int, f_hat: int) -> tuple[int, int]:
        k2, f2 = self.obj.transform_counts(k, f_hat)
        return int(k2), int(f2)

    def reset(self) -> None:
        if hasattr(self.obj, "reset"):
            self.obj.reset()


def as_attack(obj: Any, label: str) -> AttackBase:
    """``obj`` with its optional behaviour declared (itself when it derives from AttackBase)."""
    return obj if isinstance(obj, AttackBase) else PluginAttack(obj, label)


def as_defense(obj: Any) -> DefenseBase:
    """``obj`` with its optional behaviour declared (itself when it derives from DefenseBase)."""
    return obj if isinstance(obj, DefenseBase) else PluginDefense(obj)


def as_pre(obj: Any) -> PreAggregatorBase:
    """``obj`` with its optional behaviour declared (itself when it derives from PreAggregatorBase)."""
    return obj if isinstance(obj, PreAggregatorBase) else PluginPre(obj)
