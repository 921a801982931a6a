"""What one job of a matrix runs, wherever it runs (this process, a worker process, a Ray task).

:func:`run_job` runs one cell and never raises: a cell that raises is a ``failed`` cell with its
error (:func:`failed_cell`). :func:`run_reference` is the clean-run reference model of a task
without an exact optimum (:func:`reference_or_reason`: it, or why it could not be computed). A
fault outside the cell's own code (a timeout, a dead worker, a failed reference) is
:func:`fault_cell`, the one such cell of every executor. :func:`failure_summary`
says in one line how many cells failed and why.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..errors import RobustFLError
from ..scenario import Scenario
from ..simulation import components as C
from ..simulation.results import Cell
from ..simulation.runner import clean_reference, simulate
from .plan import Job

_LOADED_PLUGINS: set[str] = set()


def load_plugins(plugins: Sequence[str]) -> None:
    """Load each plugin file or module once per process."""
    from ..plugins import load_plugin

    for p in plugins:
        if p not in _LOADED_PLUGINS:
            load_plugin(p)
            _LOADED_PLUGINS.add(p)


def failed_cell(job: Job, exc: BaseException) -> Cell:
    """The ``failed`` cell of a job whose own code raised ``exc`` (where, for an unexpected error)."""
    msg = f"{type(exc).__name__}: {exc}".strip()
    if not isinstance(exc, RobustFLError):
        tb = traceback.extract_tb(exc.__traceback__)
        if tb:
            msg += f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})"
    return Cell(
        C.attack_label(job.attack), C.defense_label(job.defense), job.seed, status="failed", error=msg
    )


def run_job(
    job: Job,
    reference: np.ndarray | None,
    plugins: Sequence[str] = (),
    allow_outside: bool = False,
    device: str = "cpu",
) -> Cell:
    try:
        load_plugins(plugins)
        ref = torch.from_numpy(reference) if reference is not None else None
        out = simulate(
            job.scenario,
            job.attack,
            job.defense,
            job.seed,
            reference_model=ref,
            allow_outside_guarantee=allow_outside or job.outside,
            device=device,
        )
        cell = out.cell
    except Exception as exc:  # a failing cell is recorded, the matrix goes on
        cell = failed_cell(job, exc)
    cell.sweep, cell.key, cell.outside_guarantee = dict(job.sweep), job.key, job.outside
    return cell


def run_reference(
    scenario: Scenario, seed: int, plugins: Sequence[str] = (), device: str = "cpu"
) -> np.ndarray:
    load_plugins(plugins)
    return clean_reference(scenario, seed, device=device).detach().double().cpu().numpy()


def reference_or_reason(
    scenario: Scenario, seed: int, plugins: Sequence[str] = (), device: str = "cpu"
) -> np.ndarray | str:
    """The clean reference model, or why it could not be computed (its cells then fail with it)."""
    try:
        return run_reference(scenario, seed, plugins, device)
    except Exception as exc:  # the reason, as text
        return describe(exc)


def fault_cell(job: Job, message: str, elapsed: float = 0.0) -> Cell:
    """A ``failed`` cell for a fault outside the cell's own code (timeout, dead worker, no reference)."""
    cell = Cell(
        C.attack_label(job.attack), C.defense_label(job.defense), job.seed, status="failed", error=message
    )
    cell.elapsed_s = elapsed
    cell.sweep, cell.key, cell.outside_guarantee = dict(job.sweep), job.key, job.outside
    return cell


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def failure_summary(cells: Sequence[Cell]) -> str | None:
    """One line when cells failed: how many, and the first few errors; None when none did."""
    failed = [c for c in cells if c.status == "failed"]
    if not failed:
        return None
    errors: dict[str, int] = {}
    for c in failed:
        first = (c.error or "no error recorded").strip().splitlines()
        key = first[0] if first else "no error recorded"
        errors[key] = errors.get(key, 0) + 1
    shown = "; ".join(f"{n} x {e}" if n > 1 else e for e, n in list(errors.items())[:3])
    more = f"; and {len(errors) - 3} other errors" if len(errors) > 3 else ""
    return f"{len(failed)} of {len(cells)} cells failed: {shown}{more} (see result.failed)"
