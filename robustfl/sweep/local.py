"""The local executors (:class:`~robustfl.sweep.executor.Executor`): this process, or a pool of
worker processes.

:class:`InProcess` runs everything here, one after the other (``--workers 1`` without a
timeout: nothing to enforce, nothing to isolate). :class:`LocalPool` owns one
:class:`~robustfl.sweep.pool.Pool` that serves the references and then the cells; its workers
start in the background as soon as it is made (:meth:`~robustfl.sweep.pool.Pool.warm`), and
without a timeout this process runs work itself until the first worker is up. A single job (or
reference) without a timeout runs here too. A cell past ``timeout`` or whose worker died is a
``failed`` cell (:func:`~robustfl.sweep.jobs.fault_cell`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from contextlib import closing

import numpy as np

from ..simulation.results import Cell
from .executor import Progress, RefOf, RefTask, Skip
from .jobs import fault_cell, reference_or_reason, run_job
from .plan import Job
from .pool import Fault, Pool


class InProcess:
    """Every reference and cell in this process, in order."""

    def __init__(self, plugins: Sequence[str], allow_outside: bool, device: str) -> None:
        self.plugins, self.allow_outside, self.device = list(plugins), allow_outside, device

    def references(self, missing: Sequence[RefTask]) -> Iterator[tuple[RefTask, np.ndarray | str]]:
        for task in missing:
            yield task, reference_or_reason(task[1], task[2], self.plugins, self.device)

    def cells(
        self, todo: Sequence[Job], ref_of: RefOf, skip: Skip | None, progress: Progress | None
    ) -> Generator[Cell, None, None]:
        for j in todo:
            got = skip(j) if skip is not None else None
            if got is not None:
                yield got
                continue
            if progress is not None:
                progress.cell_started(j.label)
            yield run_job(j, ref_of(j), self.plugins, self.allow_outside, self.device)

    def close(self) -> None:
        pass


class LocalPool:
    """``workers`` worker processes (one pool for the references and the cells); with
    ``timeout``, a cell still running after that many seconds has its worker killed."""

    def __init__(
        self,
        workers: int,
        plugins: Sequence[str],
        allow_outside: bool,
        device: str,
        timeout: float | None,
    ) -> None:
        self.workers, self.timeout = workers, timeout
        self._here = InProcess(plugins, allow_outside, device)
        self._pool = Pool(workers, plugins, allow_outside, device, timeout)
        self._pool.warm()  # workers start while the cells are planned, the store opened and resumed

    def references(self, missing: Sequence[RefTask]) -> Iterator[tuple[RefTask, np.ndarray | str]]:
        if self.timeout is None and (self.workers <= 1 or len(missing) <= 1):
            yield from self._here.references(missing)
            return
        here = self._here

        def local(task: RefTask) -> np.ndarray | str:
            return reference_or_reason(task[1], task[2], here.plugins, here.device)

        answers = self._pool.imap(
            missing,
            lambda t: ("ref", (t[1], t[2])),
            keep=True,  # the same workers run the cells next
            local=local if self.timeout is None else None,
        )
        with closing(answers):
            for task, answer in answers:
                yield task, answer.message if isinstance(answer, Fault) else answer

    def cells(
        self, todo: Sequence[Job], ref_of: RefOf, skip: Skip | None, progress: Progress | None
    ) -> Generator[Cell, None, None]:
        if self.timeout is None and (self.workers <= 1 or len(todo) <= 1):
            yield from self._here.cells(todo, ref_of, skip, progress)
            return
        here = self._here

        def started(j: Job) -> None:
            if progress is not None:
                progress.cell_started(j.label)

        def local(j: Job) -> Cell:
            return run_job(j, ref_of(j), here.plugins, here.allow_outside, here.device)

        results = self._pool.imap(
            todo,
            lambda j: ("cell", (j, ref_of(j))),
            skip=skip,
            on_start=started,
            local=local if self.timeout is None else None,
        )
        with closing(results):
            for j, result in results:
                yield fault_cell(j, result.message, result.elapsed) if isinstance(result, Fault) else result

    def close(self) -> None:
        self._pool.close()
