"""Has each clean run converged? After a matrix's cells, every (sweep point, seed) gets the
verdict of its clean run (attack none, defense fedavg) by the one criterion of
:mod:`robustfl.simulation.convergence`; the driver puts the list in ``provenance["convergence"]``
and keeps each verdict in the store for the reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..scenario import config_hash
from ..simulation import convergence
from ..simulation.results import Cell
from ..simulation.runner import cell_config, cell_key, clean_convergence, reference_key
from .jobs import describe
from .plan import Job
from .references import needs_reference


def clean_verdicts(
    jobs: Sequence[Job],
    done: dict[str, Cell],
    db: Any = None,
    ref_errors: dict[str, str] | None = None,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    """The convergence verdict of the clean run of every (sweep point, seed) of ``jobs``
    (:mod:`robustfl.simulation.convergence`), in plan order: read off the matrix's own
    ``none x fedavg`` cell where it ran and measured round floor(0.9 T), else from the store, else
    from one clean run here. Each verdict is kept in the store's refs table
    (``conv-<the clean cell's key>``, an empty vector, the verdict as its meta) for the reports."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    # the threat model does not touch the clean run (no attack, FedAvg ignores f-hat): sweep
    # points that differ only there share one clean run
    same_run: dict[str, dict[str, Any]] = {}
    for j in jobs:
        clean = cell_key(j.scenario, "none", "fedavg", j.seed)
        if clean in seen:
            continue
        seen.add(clean)
        rounds = int(j.scenario.section("federation")["rounds"])
        config = cell_config(j.scenario, "none", "fedavg", j.seed)
        untouched = {k: x for k, x in config["scenario"].items() if k != "threat"}
        run_key = config_hash({**config, "scenario": untouched})
        v: dict[str, Any] | None = None
        if clean in done:
            v = convergence.from_cell(done[clean], rounds, j.sweep)
        if v is None and run_key in same_run:
            v = {**same_run[run_key], "sweep": dict(j.sweep)}
        if v is None and db is not None:
            meta = db.get_ref_meta(convergence.store_key(clean))
            v = dict(meta["verdict"]) if meta and isinstance(meta.get("verdict"), dict) else None
            if v is not None and v.get("round") != convergence.checkpoint_round(rounds):
                v = None  # judged at another round (before t' stopped depending on metrics.every)
            if v is not None:
                v["sweep"] = dict(j.sweep)
        err = (ref_errors or {}).get(reference_key(j.scenario, j.seed))
        if v is None and err is not None:  # the clean run already failed as the cells' reference
            ref_kind = "exact" if not needs_reference(j) else "clean_run"
            v = convergence.verdict(
                None, rounds=rounds, reference=ref_kind, seed=j.seed, sweep=j.sweep, error=err
            )
        if v is None:
            try:
                _, v = clean_convergence(j.scenario, j.seed, device=device, sweep=j.sweep)
            except Exception as exc:  # said in the verdict, never fatal to the matrix
                ref_kind = "exact" if not needs_reference(j) else "clean_run"
                v = convergence.verdict(
                    None, rounds=rounds, reference=ref_kind, seed=j.seed, sweep=j.sweep, error=describe(exc),
                )
        if db is not None and v.get("error") is None:
            db.put_ref(convergence.store_key(clean), np.zeros(0), {"verdict": v})
        if v.get("error") is None:
            same_run[run_key] = v
        out.append(v)
    return out
