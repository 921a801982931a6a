"""Results: one :class:`Cell` per (attack, defense, seed[, sweep point]); a :class:`MatrixResult`.

The JSON of a cell is the contract's CELL object::

    {"attack", "defense", "seed", "status": "ok"|"diverged"|"failed", "error", "reference":
     "exact"|"clean_run", "elapsed_s", "final": METRICS, "rounds": [METRICS, ...]}

Extra keys a cell may carry beside those: ``sweep`` (the sweep point, {key: value}), ``key``
(the configuration hash), ``outside_guarantee`` (run with --allow-outside-guarantee below the
rule's min_clients).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

METRIC_KEYS = (
    "round",
    "drift",
    "relative_drift",
    "loss_gap",
    "accuracy",
    "byzantine_weight",
    "detection_precision",
    "detection_recall",
    "aggregation_error",
    "attack_success_rate",
    "sybil_weight",
)
NESTED_KEYS = ("defense", "algorithm", "sharing", "attack")
STATUSES = ("ok", "diverged", "failed")


def clean_number(x: Any) -> float | int | None:
    """A JSON-safe number: non-finite values and None become None."""
    if x is None:
        return None
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def clean_metrics(m: Mapping[str, Any]) -> dict[str, Any]:
    """Every METRICS key present (None where missing), nested stat dicts cleaned too."""
    out: dict[str, Any] = {k: clean_number(m.get(k)) for k in METRIC_KEYS}
    for k in NESTED_KEYS:
        out[k] = {str(a): clean_number(b) for a, b in dict(m.get(k) or {}).items()}
    return out


@dataclass
class Cell:
    attack: str
    defense: str
    seed: int
    status: str = "ok"
    error: str | None = None
    reference: str = "exact"
    elapsed_s: float = 0.0
    final: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    sweep: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    outside_guarantee: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "attack": self.attack,
            "defense": self.defense,
            "seed": self.seed,
            "status": self.status,
            "error": self.error,
            "reference": self.reference,
            "elapsed_s": self.elapsed_s,
            "final": self.final,
            "rounds": self.rounds,
        }
        if self.sweep:
            d["sweep"] = self.sweep
        if self.key:
            d["key"] = self.key
        if self.outside_guarantee:
            d["outside_guarantee"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Cell:
        return cls(
            attack=d["attack"],
            defense=d["defense"],
            seed=int(d["seed"]),
            status=d.get("status", "ok"),
            error=d.get("error"),
            reference=d.get("reference", "exact"),
            elapsed_s=float(d.get("elapsed_s") or 0.0),
            final=dict(d.get("final") or {}),
            rounds=list(d.get("rounds") or []),
            sweep=dict(d.get("sweep") or {}),
            key=d.get("key", ""),
            outside_guarantee=bool(d.get("outside_guarantee", False)),
        )

    def record(self) -> dict[str, Any]:
        """One flat dict: identity, status, sweep values and the final metrics (no nesting)."""
        r: dict[str, Any] = {
            "attack": self.attack,
            "defense": self.defense,
            "seed": self.seed,
            "status": self.status,
            "error": self.error,
            "reference": self.reference,
            "elapsed_s": self.elapsed_s,
            "outside_guarantee": self.outside_guarantee,
        }
        r.update(self.sweep)
        for k in METRIC_KEYS:
            r[k] = self.final.get(k)
        return r


@dataclass
class MatrixResult:
    scenario: dict[str, Any]
    provenance: dict[str, Any]
    cells: list[Cell]

    def to_records(self) -> list[dict[str, Any]]:
        """A list of flat dicts, ready for ``pandas.DataFrame``."""
        return [c.record() for c in self.cells]

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "provenance": self.provenance,
            "cells": [c.to_json() for c in self.cells],
        }

    @property
    def failed(self) -> Sequence[Cell]:
        return [c for c in self.cells if c.status == "failed"]
