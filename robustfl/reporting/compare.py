"""What changed between two sets of cells (two stores), cell by cell: ``robustfl compare A B``.

Cells are matched by their identity ``(sweep point, attack, defense, seed)``; the configuration
hash is not part of the match, so a store re-run after a code or scenario change lines up with
the old one. A store may hold several settings (runs with different ``--set`` values):
:func:`compare_stores` first adds to every cell's sweep point the setting keys that differ
within either store (:func:`robustfl.reporting.settings.annotate`, the same keys on both sides),
so a cell is matched only with the cell of the same setting, never with another setting's.
Where a set holds two cells with one identity, the one written last counts.

:func:`compare` returns one plain dict per identity, A's cells first in A's order, then the
cells only in B in B's order::

    {"sweep": {...}, "attack": str, "defense": str, "seed": int,
     "change": "same" | "changed" | "status" | "only_a" | "only_b",
     "status_a": str | None, "status_b": str | None, "error_a": ..., "error_b": ...,
     "relative_drift_a", "relative_drift_b", "relative_drift_delta",   # final values; delta = B - A
     "accuracy_a", "accuracy_b", "accuracy_delta"}

``change`` is ``status`` when the status differs, ``changed`` when the status is the same but a
final metric (any of METRICS, and the number of rounds run) differs, ``same`` otherwise. Values
that do not apply are None; a delta is None unless both sides have a finite value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..simulation.results import METRIC_KEYS, Cell, clean_number

DELTA_METRICS = ("relative_drift", "accuracy")
CHANGES = ("status", "changed", "only_a", "only_b", "same")

Identity = tuple[str, str, str, int]


def identity(cell: Cell) -> Identity:
    """``(sweep point as canonical JSON, attack, defense, seed)``."""
    sweep = json.dumps(cell.sweep, sort_keys=True, separators=(",", ":"), default=str)
    return sweep, cell.attack, cell.defense, int(cell.seed)


def _index(cells: Iterable[Cell]) -> dict[Identity, Cell]:
    out: dict[Identity, Cell] = {}
    for c in cells:
        key = identity(c)
        out.pop(key, None)  # the last one written counts, in its first place
        out[key] = c
    return out


def _final(cell: Cell | None, metric: str) -> float | None:
    if cell is None:
        return None
    v = clean_number(cell.final.get(metric))
    return None if v is None else float(v)


def _fingerprint(cell: Cell) -> tuple[Any, ...]:
    return (len(cell.rounds), *(clean_number(cell.final.get(k)) for k in METRIC_KEYS))


def _row(ident: Identity, a: Cell | None, b: Cell | None) -> dict[str, Any]:
    ref = a if a is not None else b
    assert ref is not None
    if a is None:
        change = "only_b"
    elif b is None:
        change = "only_a"
    elif a.status != b.status:
        change = "status"
    elif _fingerprint(a) != _fingerprint(b):
        change = "changed"
    else:
        change = "same"
    row: dict[str, Any] = {
        "sweep": dict(ref.sweep),
        "attack": ident[1],
        "defense": ident[2],
        "seed": ident[3],
        "change": change,
        "status_a": a.status if a is not None else None,
        "status_b": b.status if b is not None else None,
        "error_a": a.error if a is not None else None,
        "error_b": b.error if b is not None else None,
    }
    for m in DELTA_METRICS:
        va, vb = _final(a, m), _final(b, m)
        row[f"{m}_a"], row[f"{m}_b"] = va, vb
        row[f"{m}_delta"] = vb - va if va is not None and vb is not None else None
    return row


def compare(cells_a: Iterable[Cell], cells_b: Iterable[Cell]) -> list[dict[str, Any]]:
    """One dict per cell identity in either set (see the module docstring)."""
    a, b = _index(cells_a), _index(cells_b)
    rows = [_row(k, c, b.get(k)) for k, c in a.items()]
    rows += [_row(k, None, c) for k, c in b.items() if k not in a]
    return rows


def counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows of each kind of change, every kind present (zero when none)."""
    out = dict.fromkeys(CHANGES, 0)
    for r in rows:
        out[r["change"]] += 1
    return out


def setting_differences(
    configs_a: Iterable[Mapping[str, Any]], configs_b: Iterable[Mapping[str, Any]]
) -> list[tuple[str, list[Any], list[Any]]]:
    """``(key, values in A, values in B)`` for every setting key (the scenario's dotted keys,
    :func:`robustfl.reporting.settings.setting_of`) whose values differ between two sets of cell
    configurations: two stores of different tasks, federations or threat models. Their cells are
    still matched by identity, so every cell reads "changed"; this says why. A key absent from
    one side shows no value there. Values are listed once each, in first-seen order."""
    from .settings import setting_of

    def values(configs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for cfg in configs:
            for k, v in setting_of(cfg).items():
                out.setdefault(k, {}).setdefault(json.dumps(v, sort_keys=True, default=str), v)
        return out

    va, vb = values(configs_a), values(configs_b)
    keys = [*va, *(k for k in vb if k not in va)]
    return [
        (k, list(va.get(k, {}).values()), list(vb.get(k, {}).values()))
        for k in keys
        if set(va.get(k, {})) != set(vb.get(k, {}))
    ]


def differences_note(differ: Iterable[tuple[str, list[Any], list[Any]]]) -> str:
    """One line naming the :func:`setting_differences` (empty when there are none)."""
    from .summaries import plain

    def side(vals: list[Any]) -> str:
        return ", ".join(plain(v) for v in vals) if vals else "(not recorded)"

    parts = [f"{k} = {side(a)} in A, {side(b)} in B" for k, a, b in differ]
    if not parts:
        return ""
    return "the stores were run with different settings (" + "; ".join(parts) + "): cells are matched " \
        "by attack, defense and seed, so their differences include these"


def compare_stores(path_a: str | Path, path_b: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """``(rows, keys)``: :func:`compare` of two stores' cells, each cell's sweep point extended
    by ``keys``, the setting keys that differ within either store (see the module docstring)."""
    rows, keys, _ = compare_store_settings(path_a, path_b)
    return rows, keys


def compare_store_settings(
    path_a: str | Path, path_b: str | Path
) -> tuple[list[dict[str, Any]], list[str], list[tuple[str, list[Any], list[Any]]]]:
    """:func:`compare_stores`, and the :func:`setting_differences` between the two stores."""
    from .settings import annotate
    from .store_view import load_store

    a, b = load_store(path_a), load_store(path_b)
    keys = list(dict.fromkeys([*a.keys, *b.keys]))
    cells_a, _ = annotate(a.pairs, keys)
    cells_b, _ = annotate(b.pairs, keys)
    differ = setting_differences((cfg for _, cfg in a.pairs), (cfg for _, cfg in b.pairs))
    return compare(cells_a, cells_b), keys, differ
