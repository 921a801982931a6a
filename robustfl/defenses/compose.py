"""Composition of pre-aggregators with a final rule, and building a defense from a scenario spec.

``compose(*pre, then=rule)`` runs each pre-aggregator in turn (each maps (updates, ctx) to new
rows and a new context), then the rule, and pulls the rule's weights back through the linear
stages to the original rows (None as soon as one stage is not linear). Its ``label`` is
``"+".join(pre names + [rule name])`` (e.g. ``nnm+krum``). ``admits(K, f)`` and
``min_clients(f)`` are the final rule's on the transformed counts (K', f') -- e.g. bucketing of
size s gives K' = ceil(K/s), f' = min(f, K'); ``min_clients(f)`` is the smallest K admitted
(searched assuming admission is monotone in K, as for every built-in). ``properties`` are the
rule's that every pre-aggregator preserves; ``reset()`` resets every part. A stage with an
in-place ``apply_`` runs it on rows that came fresh from the stage before (see
``robustfl.defenses.pre``), saving a (K, P) allocation; the caller's updates are never modified.

``build_defense(spec)`` takes a scenario's defense entry -- a name, or a table
``{"name": ..., "pre": [name or {"name": ..., params}], "label": ..., other params}`` -- and
returns ``(label, defense)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ..capabilities import DefenseBase, PreAggregatorBase
from ..errors import ConfigError
from ..kernels import check_updates
from ..registry.adapters import as_defense, as_pre
from ..types import Aggregate, Defense, DefenseContext
from . import create, pre_registry

_MAX_CLIENTS = 1 << 40


@dataclass
class Composed(DefenseBase):
    """Pre-aggregators ``pre`` (applied in order), then ``rule``; a Defense labelled ``label``."""

    pre: tuple[PreAggregatorBase, ...]
    rule: DefenseBase
    label: str

    @property
    def name(self) -> str:
        return self.label

    @property
    def properties(self) -> frozenset[str]:
        props = self.rule.properties
        for p in self.pre:
            props &= p.preserves
        return props

    @property
    def needs_reference(self) -> bool:
        return self.rule.needs_reference

    def transform_counts(self, k: int, f_hat: int) -> tuple[int, int]:
        for p in self.pre:
            k, f_hat = p.transform_counts(k, f_hat)
        return k, f_hat

    def admits(self, k: int, f_hat: int) -> bool:
        return self.rule.admits(*self.transform_counts(k, f_hat))

    def refusal(self, k: int, f_hat: int) -> str | None:
        return self.rule.refusal(*self.transform_counts(k, f_hat))

    def min_clients(self, f_hat: int) -> int:
        """Smallest K admitted (exponential then binary search; admission monotone in K)."""
        hi = 1
        while not self.admits(hi, f_hat):
            hi *= 2
            if hi > _MAX_CLIENTS:
                raise ConfigError(f"{self.label}: no number of clients admits f_hat = {f_hat}")
        lo = hi // 2  # not admitted (or 0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.admits(mid, f_hat) else (mid, hi)
        return hi

    def reset(self) -> None:
        for p in self.pre:
            p.reset()
        self.rule.reset()

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.label)
        caller = _storage(updates)
        pullbacks = []
        prev: PreAggregatorBase | None = None
        for p in self.pre:
            private = prev is not None and prev.fresh_output and _storage(updates) != caller
            step = p.apply_ if private else p
            updates, ctx, pull = step(updates, ctx)
            pullbacks.append(pull)
            prev = p
        agg = self.rule(updates, ctx)
        weights = agg.weights
        for pull in reversed(pullbacks):
            weights = None if weights is None or pull is None else pull(weights)
        return Aggregate(agg.vector, weights, dict(agg.stats))


def _storage(t: Tensor) -> int:
    return int(t.untyped_storage().data_ptr())


def compose(*pre: Any, then: Defense | str, label: str | None = None) -> Composed:
    """``pre`` pre-aggregators (applied left to right), then the rule ``then``. Each may be an
    object, or a registered name (a pre-aggregator's also a ``{"name": ..., **params}`` table)."""
    for p in pre:
        if isinstance(p, DefenseBase) or not (isinstance(p, str | Mapping) or callable(p)):
            raise ConfigError(f"compose: each pre stage must be a pre-aggregator (or its name), got {p!r}")
    if isinstance(then, PreAggregatorBase) or not (isinstance(then, str) or callable(then)):
        raise ConfigError(f"compose: then= must be a defense (or its name), got {then!r}")
    stages = tuple(_pre_from(p) if isinstance(p, str | Mapping) else as_pre(p) for p in pre)
    rule = create(then) if isinstance(then, str) else as_defense(then)
    return Composed(stages, rule, label or "+".join([*(p.name for p in stages), rule.name]))


def _pre_from(item: Any) -> Any:
    if isinstance(item, str):
        return pre_registry.create(item)
    if isinstance(item, Mapping):
        params = dict(item)
        name = params.pop("name", None)
        if not isinstance(name, str):
            raise ConfigError(f"defense.pre: each entry needs a string 'name', got {item!r}")
        return pre_registry.create(name, **params)
    raise ConfigError(f"defense.pre: entries must be a name or a table with 'name', got {item!r}")


def build_defense(spec: str | Mapping[str, Any]) -> tuple[str, Any]:
    """A scenario's defense entry -> (label, defense). See the module docstring for the format."""
    if isinstance(spec, str):
        return spec, create(spec)
    if not isinstance(spec, Mapping):
        raise ConfigError(f"defense: expected a name or a table with 'name', got {spec!r}")
    params = dict(spec)
    name = params.pop("name", None)
    if not isinstance(name, str):
        raise ConfigError(f"defense: a table needs a string 'name', got {spec!r}")
    label = params.pop("label", None)
    if label is not None and not isinstance(label, str):
        raise ConfigError(f"defense.label: expected a string, got {label!r}")
    pre = params.pop("pre", [])
    if isinstance(pre, str | Mapping) or not isinstance(pre, Sequence):
        raise ConfigError(f"defense.pre: expected a list, got {pre!r}")
    rule = create(name, **params)
    if not pre:
        return label or name, rule
    parts = [_pre_from(p) for p in pre]
    names = [p if isinstance(p, str) else str(p["name"]) for p in pre]
    composed = compose(*parts, then=rule, label=label or "+".join([*names, name]))
    return composed.label, composed
