"""A results store read for the views: its cells annotated with their settings
(:func:`robustfl.reporting.settings.annotate`), its runs, and the clean runs' convergence
verdicts (:func:`stored_verdicts`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from robustfl.simulation import convergence as _convergence
from robustfl.simulation.results import Cell

from .settings import annotate


@dataclasses.dataclass
class StoreView:
    """What a store holds, ready for the views: ``cells`` annotated with their settings
    (:func:`annotate`), the setting ``keys`` that differ, every run (oldest first) and the last
    run's ``scenario`` and ``provenance`` (the contract's JSON keys)."""

    path: str
    cells: list[Cell]
    keys: list[str]
    runs: list[dict[str, Any]]
    pairs: list[tuple[Cell, dict[str, Any]]]
    # the clean runs' convergence verdicts (convergence.py), their sweep points as the cells'
    convergence: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def scenario(self) -> dict[str, Any] | None:
        return self.runs[-1]["scenario"] if self.runs else None

    @property
    def provenance(self) -> dict[str, Any] | None:
        return self.runs[-1]["provenance"] if self.runs else None


def load_store(path: str | Path) -> StoreView:
    """Read a store for the views (see :class:`StoreView`)."""
    from robustfl.errors import StoreError
    from robustfl.simulation.store import Store

    with Store(path, read_only=True) as st:  # a view never writes to the file
        try:
            pairs = st.cells_with_configs()
        except (TypeError, AttributeError) as exc:  # a row whose JSON has the wrong shape
            raise StoreError(f"store {path} is corrupt: cannot read the cells: {exc}") from None
        runs = st.runs()
        cells, keys = annotate(pairs)
        verdicts = stored_verdicts(st, pairs, cells)
    return StoreView(str(path), cells, keys, runs, pairs, verdicts)


def stored_verdicts(
    store: Any, pairs: Sequence[tuple[Cell, Mapping[str, Any]]], annotated: Sequence[Cell]
) -> list[dict[str, Any]]:
    """The convergence verdict of each (setting, seed) of a store's cells: the one the matrix kept
    (refs row ``conv-<clean cell key>``), else read off the stored clean cell (attack none, defense
    fedavg) when it measured round floor(0.9 T); none for a setting that has neither. Each
    verdict's ``sweep`` is its cells' annotated sweep point, so the views match it to their tables."""
    by_key = {c.key: c for c, _ in pairs if c.key}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for (_, cfg), cell in zip(pairs, annotated, strict=True):
        if not cfg or "scenario" not in cfg:
            continue
        clean = _convergence.clean_key_of(cfg)
        if clean in seen:
            continue
        seen.add(clean)
        meta = store.get_ref_meta(_convergence.store_key(clean))
        v: dict[str, Any] | None = None
        if meta and isinstance(meta.get("verdict"), Mapping):
            v = dict(meta["verdict"])
        elif clean in by_key:
            rounds = ((cfg["scenario"] or {}).get("federation") or {}).get("rounds")
            if isinstance(rounds, int):
                v = _convergence.from_cell(by_key[clean], rounds)
        if v is not None:
            v["sweep"] = dict(cell.sweep)
            out.append(v)
    return out
