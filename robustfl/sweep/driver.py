"""The matrix driver: attack x defense x seed (x sweep point) matrices, resumable through the
SQLite store.

Every cell is validated before anything runs (:mod:`.plan`: unknown names, missing knowledge, a
rule below its ``min_clients``: exit 2). Finished cells (``ok`` or ``diverged``) already in the
store are skipped; ``failed`` ones are retried. Tasks without an exact optimum first get their
clean-run reference (attack none, defense fedavg) per seed and sweep point, cached in the store
too (:mod:`.references`). Each finished cell is written in one transaction as soon as it arrives,
so an interrupted sweep loses nothing. After the cells, every (sweep point, seed) gets the verdict
of its clean run's convergence (:mod:`.verdicts`), in ``provenance["convergence"]``.

Where the work runs is one :class:`~robustfl.sweep.executor.Executor` (:func:`executor_for`):
worker processes whenever ``workers > 1`` or a timeout is set (:class:`~.local.LocalPool`), this
process only for ``workers=1`` without one (:class:`~.local.InProcess`), or Ray tasks
(:class:`~.ray_executor.RayTasks`). Faults. A cell that raises is recorded as ``failed`` with its
error; one whose model stops being finite is ``diverged`` (a result, not a fault); with
``cell_timeout`` a cell still running after that many seconds has its worker process killed and is
recorded as ``failed`` with "timeout after S s". A worker process that dies (killed, out of
memory) fails its cell the same way, and a fresh worker takes the next cell. One pool serves the
references and the cells; its workers start in the background as soon as ``run_matrix`` is called
(a fork server imports torch and every built-in module once, seconds), and without a timeout this
process runs cells itself until the first worker is up.

Ctrl-C (SIGINT) stops the matrix once the finished cells are committed (:mod:`.interrupt`): a
commit under way when the signal arrives completes first; workers ignore SIGINT and are stopped by
the driver, and :class:`~.interrupt.Interrupted` says how many cells are in the store. Every cell
is one SQLite transaction, so SIGKILL at any moment leaves a store that opens and resumes. Several
drivers may share one store: just before a cell is dispatched the store is asked whether another
driver finished it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, StoreError
from ..scenario import Scenario
from ..simulation import components as C
from ..simulation.results import Cell, MatrixResult
from ..simulation.runner import cell_config, check_device, reference_key
from ..types import Knowledge
from .executor import Executor, Progress
from .interrupt import Interrupted, SigintGuard, interrupted_message
from .jobs import fault_cell, load_plugins
from .local import InProcess, LocalPool
from .main_guard import (
    MainGuardError,
    guard_message,
    leave_if_importing_main,
    unguarded_main_call,
    unimportable_main,
)
from .plan import Job, plan
from .pool import mp_context
from .provenance import provenance
from .references import references
from .verdicts import clean_verdicts

EXECUTORS = ("local", "ray")


def check_timeout(cell_timeout: float | None) -> float | None:
    if cell_timeout is None:
        return None
    ok = isinstance(cell_timeout, int | float) and not isinstance(cell_timeout, bool)
    if not ok or not math.isfinite(cell_timeout) or cell_timeout <= 0:
        raise ConfigError(f"--cell-timeout must be a positive number of seconds, got {cell_timeout!r}")
    return float(cell_timeout)


def longest_first(jobs: Sequence[Job]) -> list[Job]:
    """The cells in dispatch order: those whose attack searches with the defense as its oracle
    (ORACLE knowledge: tens of defense calls a round, the matrix's longest cells) first, then the
    rest, each group in plan order. Workers that start the long cells first do not end the
    matrix with one of them running alone; results and their order in the output do not change."""
    heavy: dict[str, bool] = {}

    def rank(j: Job) -> int:
        spec = repr(j.attack)
        if spec not in heavy:
            heavy[spec] = Knowledge.ORACLE in C.build_attack(j.attack).knowledge
        return 0 if heavy[spec] else 1

    return sorted(jobs, key=rank)


def uses_processes(executor: str, workers: int, timeout: float | None) -> bool:
    """Whether this matrix starts worker processes that import the main script again."""
    if executor != "local" or (workers <= 1 and timeout is None):
        return False
    return mp_context().get_start_method() != "fork"


def executor_for(
    executor: str,
    workers: int,
    plugins: Sequence[str],
    allow_outside: bool,
    device: str,
    address: str | None,
    timeout: float | None,
) -> Executor:
    """The executor named ``executor`` (``local`` or ``ray``): locally, a pool of ``workers``
    processes when there is more than one or a timeout to enforce, else this process."""
    if executor == "ray":
        from .ray_executor import RayTasks

        return RayTasks(workers, plugins, allow_outside, device, address, timeout)
    if executor != "local":
        raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if workers > 1 or timeout is not None:
        return LocalPool(workers, plugins, allow_outside, device, timeout)
    return InProcess(plugins, allow_outside, device)


def run_matrix(
    scenario: Scenario,
    *,
    attacks: Sequence[C.Spec] | None = None,
    defenses: Sequence[C.Spec] | None = None,
    seeds: Sequence[int] | None = None,
    workers: int | None = None,
    store: str | Path | None = None,
    executor: str = "local",
    address: str | None = None,
    plugins: Sequence[str] = (),
    allow_outside_guarantee: bool = False,
    device: str = "cpu",
    progress: Progress | None = None,
    cell_timeout: float | None = None,
) -> MatrixResult:
    """Run (or resume) a matrix; returns every cell, old and new, in plan order.

    ``cell_timeout`` (seconds): a cell still running after it is killed and recorded as failed.
    Ctrl-C raises :class:`Interrupted` once the finished cells are committed.
    """
    from ..simulation.store import Store

    leave_if_importing_main()
    timeout = check_timeout(cell_timeout)
    if not isinstance(allow_outside_guarantee, bool):
        raise ConfigError(f"allow_outside_guarantee must be True or False, got {allow_outside_guarantee!r}")
    if address is not None and executor != "ray":
        raise ConfigError(f"address {address!r} is a Ray cluster's address: it needs executor='ray'")
    if isinstance(workers, numbers.Integral) and not isinstance(workers, bool):
        workers = int(workers)  # a numpy integer too
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be an integer >= 1 (or None: one per core), got {workers!r}")
    if executor == "local":  # a Ray cluster's workers may have the GPUs this process lacks
        check_device(device)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if uses_processes(executor, workers, timeout):
        if (stdin := unimportable_main()) is not None:  # each worker would die importing it
            raise MainGuardError(
                f"this script is read from {stdin!r}, which worker processes cannot import again: save it "
                "to a file and run that, or use workers=1 (without cell_timeout)"
            )
        where = unguarded_main_call()
        if where is not None:  # its workers would run the script again: say so before starting them
            raise MainGuardError(guard_message(where))
    load_plugins(plugins)  # here too: the plan below builds every attack and defense
    # a pool's workers start now, while the cells are planned, the store opened and resumed
    runner = executor_for(executor, workers, plugins, allow_outside_guarantee, device, address, timeout)
    db: Store | None = None
    done: dict[str, Cell] = {}
    jobs: list[Job] = []
    try:
        jobs = plan(scenario, attacks, defenses, seeds, allow_outside_guarantee=allow_outside_guarantee)
        prov = provenance(scenario, jobs)
        with SigintGuard() as guard:
            db = Store(store) if store is not None else None
            if db is not None:
                db.add_run(scenario.to_dict(), prov)
                done.update(_resumed(db, jobs))
            firsts: dict[str, Job] = {}  # one run per cell key (a sweep key the entry does not take)
            for j in jobs:
                firsts.setdefault(j.key, j)
            todo = [j for j in firsts.values() if j.key not in done]
            if progress is not None:
                progress.start(len(firsts))  # cells to run: one per key
                for c in done.values():
                    progress.cell_finished(c)
                expect = getattr(progress, "pending", None)
                if callable(expect):  # optional: what is left, for a time estimate per attack and defense
                    left = [(j.label, C.attack_label(j.attack), C.defense_label(j.defense)) for j in todo]
                    expect(left, workers)
            by_key = {j.key: j for j in todo}
            from_store: set[str] = set()

            def record(cell: Cell) -> None:
                with guard.critical():  # a Ctrl-C now waits until this cell is committed
                    done[cell.key] = cell
                    if db is not None and cell.key not in from_store:
                        j = by_key[cell.key]
                        db.put_cell(cell.key, cell, cell_config(j.scenario, j.attack, j.defense, j.seed))
                if progress is not None:
                    progress.cell_finished(cell)

            def finished_elsewhere(job: Job) -> Cell | None:
                """A cell another driver sharing the store finished meanwhile."""
                if db is None:
                    return None
                c = _finished_cell(db, job.key)
                if c is not None:
                    from_store.add(job.key)
                return c

            refs, ref_errors = references(todo, db, runner)
            runnable = []
            for j in todo:
                err = ref_errors.get(reference_key(j.scenario, j.seed))
                if err is None:
                    runnable.append(j)
                else:
                    record(fault_cell(j, f"clean reference run (attack none, defense fedavg) failed: {err}"))

            def ref_of(j: Job) -> np.ndarray | None:
                return refs.get(reference_key(j.scenario, j.seed))

            cells = runner.cells(longest_first(runnable), ref_of, finished_elsewhere, progress)
            with closing(cells):  # on Ctrl-C the executor's workers are stopped right here
                for cell in cells:
                    record(cell)
            # has each clean run converged? (verdicts.py) -- per sweep point and seed
            prov["convergence"] = clean_verdicts(jobs, done, db, ref_errors, device)
    except KeyboardInterrupt:
        if not jobs:  # still planning: nothing ran, nothing to say about a store
            raise
        raise Interrupted(interrupted_message(done, len({j.key for j in jobs}), store)) from None
    finally:
        runner.close()
        if db is not None:
            db.close()
    # A sweep key an entry does not take (attack.z for sign_flip) gives that entry one cell key at
    # every sweep point: one run, shown at each point under that point's values.
    result_cells = [
        done[j.key] if done[j.key].sweep == j.sweep else dataclasses.replace(done[j.key], sweep=dict(j.sweep))
        for j in jobs
        if j.key in done
    ]
    return MatrixResult(scenario.to_dict(), prov, result_cells)


def _finished_cell(db: Any, key: str) -> Cell | None:
    """The cell ``key`` if the store holds it finished (``ok``/``diverged``), else None."""
    try:
        c = db.get_cell(key)
    except (TypeError, AttributeError) as exc:  # JSON of the wrong shape: a damaged row
        raise StoreError(f"store {db.path} is corrupt: cannot read a cell: {exc}") from None
    return c if c is not None and c.status in ("ok", "diverged") else None


def _resumed(db: Any, jobs: Sequence[Job]) -> dict[str, Cell]:
    """The finished cells of ``jobs`` already in the store."""
    finished = db.finished_keys()
    found = {j.key: _finished_cell(db, j.key) for j in jobs if j.key in finished}
    return {k: c for k, c in found.items() if c is not None}
