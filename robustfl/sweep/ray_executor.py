"""The Ray executor of a matrix (:class:`RayTasks`): each cell a Ray task, finished cells streamed
back to the driver (:func:`ray_execute`); the references are computed by the driver itself.

``robustfl matrix ... --executor ray [--address HOST:6379]`` runs every cell as one Ray task
(:func:`robustfl.sweep.jobs.run_job`, the function the local executor runs in its
processes), so a cell gives the same result bit for bit on either executor: its configuration,
seed and torch thread count (``federation.threads``, which the cell sets itself) fix it. The
driver keeps the results store: it yields each cell as its task finishes and ``run_matrix`` writes
it in one transaction, so an interrupted sweep resumes the same way as a local one. Workers never
touch the store.

Resources: a cell asks Ray for ``federation.threads`` CPUs (capped at the largest node's CPUs so
that it can always be placed) and, with ``--device cuda``, one GPU. At most as many cells are in
flight as the cluster has room for; the rest wait on the driver, so the progress bar's "running"
is the number of cells actually running. Faults are handled as locally: a task whose worker dies
is a ``failed`` cell (not retried by Ray; a rerun of the matrix retries it), and with
``cell_timeout`` a cell still running that many seconds after it was submitted is cancelled and
``failed`` ("timeout after S s").

Without ``--address`` a local Ray instance is started (and shut down at the end) with ``workers``
CPUs; when Ray is already initialised in this process, that instance is used and left running.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from contextlib import suppress
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..simulation.results import Cell
from .executor import Progress, RefOf, Skip
from .jobs import fault_cell, run_job
from .local import InProcess
from .plan import Job

RAY_MISSING = "--executor ray needs the ray extra: pip install 'robustfl[ray]'"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def _run_cell(
    job: Job, reference: np.ndarray | None, plugins: Sequence[str], allow_outside: bool, device: str
) -> Cell:
    """The body of one Ray task: exactly what a local worker process runs. The reference comes
    out of Ray's object store read-only: the cell gets its own copy, as it does locally."""
    return run_job(job, None if reference is None else np.array(reference), plugins, allow_outside, device)


def _connect(ray: Any, address: str | None, workers: int | None) -> bool:
    """Initialise Ray; True when this call started it (and so must shut it down)."""
    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address:
        try:
            ray.init(address=address, **quiet)
        except Exception as exc:  # ConnectionError, or Ray's own errors for a bad address
            raise ConfigError(f"--address {address}: cannot connect to the Ray cluster: {exc}") from None
        return True
    ray.init(
        num_cpus=workers if workers is not None else os.cpu_count() or 1,
        include_dashboard=False,
        ignore_reinit_error=True,
        **quiet,
    )
    return True


def _largest_node(ray: Any, resource: str) -> float:
    sizes = [float(n.get("Resources", {}).get(resource, 0.0)) for n in ray.nodes() if n.get("Alive")]
    return max(sizes, default=0.0)


def _slots(ray: Any, cpus: float, gpus: float) -> int:
    """How many cells the cluster can run at once (at least one)."""
    total = ray.cluster_resources()
    n = int(float(total.get("CPU", 0.0)) // cpus) if cpus else 1
    if gpus:
        n = min(n, int(float(total.get("GPU", 0.0)) // gpus))
    return max(1, n)


def _task_error(exc: BaseException) -> str:
    """One line for a task that raised: the original exception behind a Ray task error (an import
    error on the worker, say), else Ray's own (the worker died)."""
    cause = getattr(exc, "cause", None)
    err = cause if isinstance(cause, BaseException) else exc
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".strip()


def ray_execute(
    todo: Sequence[Job],
    ref_of: RefOf,
    plugins: Sequence[str],
    allow_outside: bool,
    device: str,
    address: str | None,
    progress: Progress | None,
    workers: int | None = None,
    cell_timeout: float | None = None,
) -> Iterator[Cell]:
    """Run ``todo`` as Ray tasks; yield each finished :class:`Cell` as soon as its task ends.

    ``ref_of(job)`` is the cell's clean-run reference model (None for tasks with an exact
    optimum), computed by the driver; each distinct one is put in Ray's object store once.
    ``workers`` sets the CPUs of a local instance (ignored with ``address``). A task that raises
    (its worker died, or it could not import robustfl or a plugin) becomes a ``failed`` cell, as
    does one still running ``cell_timeout`` seconds after it was submitted (it is cancelled).
    """
    ray = _import_ray()
    if not todo:
        return
    started = _connect(ray, address, workers)
    pending: dict[Any, tuple[Job, float]] = {}
    try:
        remote = ray.remote(_run_cell)
        cpu_cap = max(1.0, _largest_node(ray, "CPU"))
        gpus = 1.0 if str(device).startswith("cuda") else 0.0
        if gpus and _largest_node(ray, "GPU") < gpus:
            raise ConfigError("--device cuda: the Ray cluster has no node with a GPU")
        puts: dict[int, tuple[np.ndarray, Any]] = {}  # id -> (the array, kept alive; its handle)

        def cpus(job: Job) -> float:
            return min(float(job.scenario.section("federation")["threads"]), cpu_cap)

        def submit(job: Job) -> Any:
            ref = ref_of(job)
            handle = None
            if ref is not None:
                if id(ref) not in puts:
                    puts[id(ref)] = (ref, ray.put(ref))
                handle = puts[id(ref)][1]
            # no retries: a cell whose worker died is failed, as locally, and runs again on a rerun
            options = {"num_cpus": cpus(job), "num_gpus": gpus, "max_retries": 0}
            return remote.options(**options).remote(job, handle, list(plugins), allow_outside, device)

        queue = deque(todo)
        while queue or pending:
            window = _slots(ray, cpus(queue[0]) if queue else 1.0, gpus)
            while queue and len(pending) < window:
                job = queue.popleft()
                pending[submit(job)] = (job, time.monotonic())
                if progress is not None:
                    progress.cell_started(job.label)
            wait_s = None
            if cell_timeout is not None:
                first = min(t for _, t in pending.values())
                wait_s = max(0.0, first + cell_timeout - time.monotonic()) + 0.01
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            for obj in ready:
                job, t0 = pending.pop(obj)
                try:
                    cell = ray.get(obj)
                except Exception as exc:  # the task itself failed: a dead worker, an import error
                    cell = fault_cell(job, _task_error(exc), time.monotonic() - t0)
                yield cell
            if cell_timeout is not None:
                now = time.monotonic()
                for obj, (job, t0) in list(pending.items()):
                    if now - t0 >= cell_timeout:
                        del pending[obj]
                        with suppress(Exception):
                            ray.cancel(obj, force=True)
                        yield fault_cell(job, f"timeout after {cell_timeout:g} s", now - t0)
    finally:
        for obj in pending:  # interrupted (Ctrl-C, or the driver stopped reading): stop the rest
            with suppress(Exception):  # already finished or gone
                ray.cancel(obj, force=True)
        if started:
            ray.shutdown()


class RayTasks(InProcess):
    """The Ray executor (:class:`~robustfl.sweep.executor.Executor`): the references are computed
    by the driver, in this process (inherited from :class:`~robustfl.sweep.local.InProcess`); each
    cell is one Ray task (:func:`ray_execute`)."""

    def __init__(
        self,
        workers: int,
        plugins: Sequence[str],
        allow_outside: bool,
        device: str,
        address: str | None,
        timeout: float | None,
    ) -> None:
        self.workers, self.address, self.timeout = workers, address, timeout
        self.plugins, self.allow_outside, self.device = list(plugins), allow_outside, device

    def cells(
        self, todo: Sequence[Job], ref_of: RefOf, skip: Skip | None, progress: Progress | None
    ) -> Generator[Cell, None, None]:
        yield from ray_execute(
            todo,
            ref_of,
            self.plugins,
            self.allow_outside,
            self.device,
            self.address,
            progress,
            workers=self.workers,
            cell_timeout=self.timeout,
        )

    def close(self) -> None:
        pass
