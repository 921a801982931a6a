"""Settings: a store holds whatever was run into it, and the views never pool different ones.

Two `robustfl matrix` runs with different `--set`
values write two settings into one file. A cell's setting is its stored configuration (what
`runner.cell_config` hashes into its key): the scenario's values as dotted keys. The views
never pool different settings: :func:`annotate` adds every key whose value differs between the
cells of a store to each cell's sweep point, so the grouping by sweep point that every view
already does (tables, CSV columns, axis views, heatmap panels, published comparisons, compare)
keeps the settings apart and names them (``threat.byzantine=0.4``). Keys swept by a
``matrix.sweep`` come first, in their order, then the other differing keys in the
configuration's order. An attack (or defense) label that stands for different specifications in
one store (``alie`` with z = 1 and with z = 1.5) is told apart the same way: the parameters that
differ are appended to the label, ``alie (z=1.5)`` and ``alie (z=default)``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from robustfl.simulation.results import Cell

from .summaries import plain

_NO_SETTING = ("matrix", "bound", "attack", "defense")


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"threat": {"byzantine": 0.2}}`` -> ``{"threat.byzantine": 0.2}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def setting_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's setting: its stored configuration's scenario as dotted keys."""
    scenario = config.get("scenario") or {}
    return flatten({k: v for k, v in scenario.items() if k not in _NO_SETTING})


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def differing_keys(settings: Sequence[Mapping[str, Any]], first: Iterable[str] = ()) -> list[str]:
    """The dotted keys whose values are not the same in every setting (a key absent from some
    counts as differing); ``first`` (sweep keys) lead, in their order, then first-seen order."""
    seen: dict[str, set[str]] = {}
    for s in settings:
        for k in s:
            seen.setdefault(k, set())
    for s in settings:
        for k in seen:
            seen[k].add(_canon(s[k]) if k in s else "\0missing")
    differ = [k for k, values in seen.items() if len(values) > 1]
    lead = [k for k in dict.fromkeys(first) if k in differ]
    return lead + [k for k in differ if k not in lead]


def _spec_params(spec: Any) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return flatten({k: v for k, v in spec.items() if k != "label"})
    return {"name": spec}


def _relabel(pairs: Sequence[tuple[Cell, Mapping[str, Any]]], field: str) -> list[str]:
    """Each cell's ``field`` label, with the differing parameters appended where one label stands
    for several specifications in the store."""
    specs: dict[str, dict[str, dict[str, Any]]] = {}
    for cell, cfg in pairs:
        if field in cfg:
            p = _spec_params(cfg[field])
            specs.setdefault(getattr(cell, field), {})[_canon(p)] = p
    out = []
    for cell, cfg in pairs:
        label = str(getattr(cell, field))
        variants = specs.get(label, {})
        if len(variants) > 1 and field in cfg:
            p = _spec_params(cfg[field])
            keys = differing_keys(list(variants.values()))
            label += " (" + ", ".join(f"{k}={plain(p[k]) if k in p else 'default'}" for k in keys) + ")"
        out.append(label)
    return out


def annotate(
    pairs: Sequence[tuple[Cell, Mapping[str, Any]]], keys: Sequence[str] | None = None
) -> tuple[list[Cell], list[str]]:
    """``(cells, keys)``: copies of the cells whose sweep points also carry the setting ``keys``
    (default: those that differ between the cells' configurations), and the keys. A cell whose
    configuration lacks a key gets None for it."""
    settings = [setting_of(cfg) for _, cfg in pairs]
    if keys is None:
        keys = differing_keys(settings, (k for c, _ in pairs for k in c.sweep))
    keys = list(keys)
    attacks, defenses = _relabel(pairs, "attack"), _relabel(pairs, "defense")
    cells = []
    for (cell, _), setting, attack, defense in zip(pairs, settings, attacks, defenses, strict=True):
        sweep = {k: v for k, v in cell.sweep.items() if k not in keys}
        sweep.update({k: cell.sweep[k] if k in cell.sweep else setting.get(k) for k in keys})
        cells.append(dataclasses.replace(cell, sweep=sweep, attack=attack, defense=defense))
    return cells, keys


def settings_note(keys: Sequence[str], cells: Iterable[Cell] = ()) -> str:
    """One line saying which keys tell the store's settings apart (empty for one setting)."""
    if not keys:
        return ""
    points = {_canon({k: c.sweep.get(k) for k in keys}) for c in cells}
    n = f"{len(points)} settings" if points else "several settings"
    return (
        f"this store holds {n}, differing in {', '.join(keys)}: each table is one setting; "
        "numbers are never pooled across settings"
    )


def run_setting(run: Mapping[str, Any], keys: Sequence[str]) -> str:
    """``threat.byzantine=0.4`` for a run's values of the setting keys (``key=swept`` where the
    run's matrix swept it)."""
    scenario = run.get("scenario") or {}
    swept = dict((scenario.get("matrix") or {}).get("sweep") or {})
    flat = setting_of({"scenario": scenario})
    parts = []
    for k in keys:
        if k in swept:
            parts.append(f"{k}={plain(swept[k])}")
        elif k in flat:
            parts.append(f"{k}={plain(flat[k])}")
    return ", ".join(parts)
