"""The one protocol every matrix executor follows, and what the driver reports progress to.

An :class:`Executor` runs a matrix's work somewhere: the clean-run references the cells need
(:meth:`~Executor.references`) and then the cells (:meth:`~Executor.cells`), yielding each result
as it finishes, in any order. Every executor runs a cell through the same function
(:func:`robustfl.sweep.jobs.run_job`), so a cell gives the same result bit for bit wherever it
runs. The executors: :class:`robustfl.sweep.local.InProcess` (this process),
:class:`robustfl.sweep.local.LocalPool` (worker processes, with timeouts and dead-worker faults)
and :class:`robustfl.sweep.ray_executor.RayTasks` (one Ray task per cell); the driver picks one
(:func:`robustfl.sweep.driver.executor_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Protocol

import numpy as np

from ..scenario import Scenario
from ..simulation.results import Cell
from .plan import Job

RefOf = Callable[[Job], np.ndarray | None]
"""A job's clean-run reference model (None for tasks with an exact optimum)."""
Skip = Callable[[Job], Cell | None]
"""Asked just before a job is dispatched: a finished cell to yield instead of running it."""
RefTask = tuple[str, Scenario, int]
"""One clean reference run to compute: (its store key, the scenario, the seed)."""


class Progress(Protocol):
    """What ``run_matrix`` reports to: ``start(total)``, then ``cell_started(label)`` and
    ``cell_finished(cell)`` as cells go. A progress that also has ``pending(cells, workers)`` gets,
    after ``start``, the (label, attack label, defense label) of every cell still to run and the
    number of workers (robustfl.cli.render.MatrixProgress learns its time left from them)."""

    def start(self, total: int) -> None: ...
    def cell_started(self, label: str) -> None: ...
    def cell_finished(self, cell: Cell) -> None: ...


class Executor(Protocol):
    """Where a matrix's references and cells run."""

    def references(self, missing: Sequence[RefTask]) -> Iterator[tuple[RefTask, np.ndarray | str]]:
        """Each reference's model, or the one-line reason it could not be computed (its cells
        then fail with it), as they finish."""
        ...

    def cells(
        self, todo: Sequence[Job], ref_of: RefOf, skip: Skip | None, progress: Progress | None
    ) -> Generator[Cell, None, None]:
        """Each job's cell as it finishes; a fault outside the cell's own code (a timeout, a dead
        worker) is a ``failed`` cell. Closing the generator stops the work still under way."""
        ...

    def close(self) -> None:
        """Stop whatever still runs (idempotent)."""
        ...
