"""Attack x defense x seed (x sweep point) matrices, resumable through the SQLite store.

Every cell is validated before anything runs (unknown names, missing knowledge, a rule below
its ``min_clients``: exit 2). Finished cells (``ok`` or ``diverged``) already in the store are
skipped; ``failed`` ones are retried. Tasks without an exact optimum first get their clean-run
reference (attack none, defense fedavg) per seed and sweep point, cached in the store too.
Each finished cell is written in one transaction as soon as it arrives, so an interrupted sweep
loses nothing. After the cells, every (sweep point, seed) gets the verdict of its clean run's
convergence (:mod:`.convergence`, :func:`clean_verdicts`), in ``provenance["convergence"]``.

Faults. A cell that raises is recorded as ``failed`` with its error; one whose model stops being
finite is ``diverged`` (a result, not a fault); with ``cell_timeout`` a cell still running after
that many seconds has its worker process killed and is recorded as ``failed`` with
"timeout after S s". A worker process that dies (killed, out of memory) fails its cell the same
way, and a fresh worker takes the next cell. Cells run in worker processes whenever
``workers > 1`` or a timeout is set (in this process only for ``workers=1`` without one).
One pool serves the references and the cells; its workers start in the background as soon as
``run_matrix`` is called (a fork server imports torch and every built-in module once, seconds),
and without a timeout this process runs cells itself until the first worker is up.
Ctrl-C (SIGINT) stops the matrix once the finished cells are committed: a commit under way when
the signal arrives completes first; workers ignore SIGINT and are stopped by the driver, and
:class:`Interrupted` says how many cells are in the store. Every cell is one SQLite transaction,
so SIGKILL at any moment leaves a store that opens and resumes. Several drivers may share one
store: just before a cell is dispatched the store is asked whether another driver finished it.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import logging
import math
import multiprocessing as mp
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import numpy as np
import torch

from ..errors import ConfigError, RobustFLError, StoreError
from ..scenario import Scenario, config_hash
from . import components as C
from .results import Cell, MatrixResult
from .runner import Simulation, build_problem, cell_config, cell_key, clean_reference, reference_key, simulate


class Progress(Protocol):
    """What ``run_matrix`` reports to: ``start(total)``, then ``cell_started(label)`` and
    ``cell_finished(cell)`` as cells go. A progress that also has ``pending(cells, workers)`` gets,
    after ``start``, the (label, attack label, defense label) of every cell still to run and the
    number of workers (robustfl.cli.render.MatrixProgress learns its time left from them)."""

    def start(self, total: int) -> None: ...
    def cell_started(self, label: str) -> None: ...
    def cell_finished(self, cell: Cell) -> None: ...


@dataclass
class Job:
    key: str
    scenario: Scenario
    attack: C.Spec
    defense: C.Spec
    seed: int
    sweep: dict[str, Any] = field(default_factory=dict)
    outside: bool = False

    @property
    def label(self) -> str:
        point = ",".join(f"{k}={v}" for k, v in self.sweep.items())
        return f"{C.attack_label(self.attack)} × {C.defense_label(self.defense)} seed {self.seed}" + (
            f" [{point}]" if point else ""
        )


def sweep_points(scenario: Scenario) -> list[dict[str, Any]]:
    sweep = scenario.section("matrix")["sweep"]
    if not sweep:
        return [{}]
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(sweep[k] for k in keys))]


def plan(
    scenario: Scenario,
    attacks: Sequence[C.Spec] | None = None,
    defenses: Sequence[C.Spec] | None = None,
    seeds: Sequence[int] | None = None,
    *,
    allow_outside_guarantee: bool = False,
) -> list[Job]:
    """Every cell of the matrix, validated (raises RobustFLError before anything runs)."""
    mx = scenario.section("matrix")
    # names given (--attacks/--defenses) are first the labels of the scenario's entries
    attacks = C.pick_entries(attacks, mx["attacks"], "attack") if attacks is not None else list(mx["attacks"])
    defenses = (
        C.pick_entries(defenses, mx["defenses"], "defense") if defenses is not None else list(mx["defenses"])
    )
    seeds = list(seeds if seeds is not None else mx["seeds"])
    points = sweep_points(scenario)
    for a in C.apply_settings(attacks, "attack", scenario.settings):  # every name and parameter
        C.build_attack(a)  # first: cheap, and before any data is built
    for d in C.apply_settings(defenses, "defense", scenario.settings):
        C.build_defense(d)
    jobs: list[Job] = []
    for point in points:
        sc = scenario.with_values(point) if point else scenario
        # --set attack.p / defense.p (and sweep keys like attack.z) apply to the entries taking p
        settings = {**scenario.settings, **point}
        checked: dict[tuple[str, str], bool] = {}
        for a in C.apply_settings(attacks, "attack", settings):
            for d in C.apply_settings(defenses, "defense", settings):
                sig = (repr(a), repr(d))
                if sig not in checked:
                    checked[sig] = set_up(sc, a, d, seeds[0], allow_outside_guarantee).outside
                for s in seeds:
                    jobs.append(Job(cell_key(sc, a, d, s), sc, a, d, s, dict(point), checked[sig]))
    labels = [(j.label) for j in jobs]
    if len(set(labels)) != len(labels):
        dup = next(lbl for lbl in labels if labels.count(lbl) > 1)
        raise RobustFLError(f'two cells share the label {dup!r}; give one a distinct label = "..."')
    return jobs


_TOO_LARGE = (
    "can't allocate memory",
    "not enough memory",
    "out of memory",
    "Overflow when unpacking",
    "size calculation overflowed",  # torch: a tensor of more than 2**63 - 1 bytes
    "cannot be represented as a SymInt",  # torch: a size past 2**63 - 1 (e.g. arange(dim))
)


def set_up(
    sc: Scenario, attack: C.Spec, defense: C.Spec, seed: int, allow_outside: bool, device: str = "cpu"
) -> Simulation:
    """One cell's validated setup. A scenario whose data cannot be built at all (a size past what
    this machine can allocate, or past a 64-bit count) is bad input: a one-line ConfigError."""
    try:
        return Simulation(sc, attack, defense, seed, allow_outside_guarantee=allow_outside, device=device)
    except (MemoryError, OverflowError, RuntimeError, TypeError) as exc:
        text = str(exc).strip()
        if isinstance(exc, RuntimeError | TypeError) and not any(m in text for m in _TOO_LARGE):
            raise
        what = f"{C.attack_label(attack)} x {C.defense_label(defense)}"
        detail = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
        if "allocate" in detail:
            detail = detail[detail.find("you tried") :] if "you tried" in detail else detail
        raise ConfigError(
            f"cannot set up the cell {what}: the scenario is too large for this machine ({detail}); "
            "check federation.clients, server.root_size and the task's sizes"
        ) from None


def provenance(scenario: Scenario, jobs: Sequence[Job]) -> dict[str, Any]:
    from .. import __version__, attacks, defenses

    origins: dict[str, str] = {}
    for j in jobs:
        for reg, spec in ((attacks, j.attack), (defenses, j.defense)):
            name = C.spec_name(spec)
            origins.setdefault(name, reg.origin(name))
    return {
        "robustfl": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "scenario_hash": scenario.hash(),
        "scenario_path": str(scenario.path) if scenario.path else None,
        "overrides": list(scenario.overrides),
        "origins": origins,
        "created": time.time(),
    }


# --- scripts without a main guard -------------------------------------------------------------
MAIN_REIMPORTED_EXIT = 87
"""A worker's exit status when it re-imported the user's script and found robustfl called at the
script's top level (no ``if __name__ == "__main__":``); the driver then raises one error."""

GUARD = 'if __name__ == "__main__":'


class MainGuardError(RobustFLError):
    """The script that called robustfl does so at its top level, which the matrix's worker
    processes (forkserver/spawn) import again: its code belongs under the main guard."""


def _guard_message(where: str) -> str:
    return (
        f"{where} calls robustfl at its top level, and a matrix's worker processes import it again: "
        f"put the script's code under `{GUARD}` (as in the README's example)"
    )


def _script_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return f"the script {path}" if path else "the main module"


def importing_main() -> bool:
    """True in a child process while it imports the parent's main module again (the bootstrap
    of a spawn or forkserver process: ``multiprocessing`` marks the process as inheriting, and the
    module runs as ``__mp_main__``). robustfl called then comes from a script's top level."""
    if getattr(mp.current_process(), "_inheriting", False):
        return True
    if getattr(sys.modules.get("__main__"), "__name__", None) != "__mp_main__":
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:  # module-level code of the re-imported script is on the stack
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def leave_if_importing_main() -> None:
    """Called first by ``robustfl.run`` and ``run_matrix``: in a worker re-importing an unguarded
    script, stop the worker at once (before it runs a cell or starts processes of its own) with
    :data:`MAIN_REIMPORTED_EXIT`; the driver reports it once. A process that is not one of our
    workers (no preloaded fork server) says why on one line first."""
    if not importing_main():
        return
    if "robustfl.simulation._preload" not in sys.modules:
        print(f"robustfl: error: {_guard_message(_script_name())}", file=sys.stderr, flush=True)
    os._exit(MAIN_REIMPORTED_EXIT)


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


def _is_main_guard(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, *test.comparators]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def unguarded_main_call() -> str | None:
    """Where the main script calls us from its top level outside ``if __name__ == "__main__":``
    ("the script PATH (line N)"), else None. Worker processes started by forkserver or spawn
    import the main script again, so such a call would run again in every worker. Interactive
    sessions and ``python -c`` have no script file: nothing is imported again."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or getattr(main, "__name__", None) != "__main__":
        return None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test) and node.body:
            end = node.body[-1].end_lineno or node.body[-1].lineno
            if node.body[0].lineno <= line <= end:
                return None
    return f"the script {path} (line {line})"


def _uses_processes(executor: str, workers: int, timeout: float | None) -> bool:
    """Whether this matrix starts worker processes that import the main script again."""
    if executor != "local" or (workers <= 1 and timeout is None):
        return False
    return _mp_context().get_start_method() != "fork"


# --- worker side ----------------------------------------------------------------------------
_LOADED_PLUGINS: set[str] = set()


def _load_plugins(plugins: Sequence[str]) -> None:
    from ..registry import load_plugin

    for p in plugins:
        if p not in _LOADED_PLUGINS:
            load_plugin(p)
            _LOADED_PLUGINS.add(p)


def _failed(job: Job, exc: BaseException) -> Cell:
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
        _load_plugins(plugins)
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
        cell = _failed(job, exc)
    cell.sweep, cell.key, cell.outside_guarantee = dict(job.sweep), job.key, job.outside
    return cell


def run_reference(
    scenario: Scenario, seed: int, plugins: Sequence[str] = (), device: str = "cpu"
) -> np.ndarray:
    _load_plugins(plugins)
    return clean_reference(scenario, seed, device=device).detach().double().cpu().numpy()


def _fault_cell(job: Job, message: str, elapsed: float = 0.0) -> Cell:
    """A ``failed`` cell for a fault outside the cell's own code (timeout, dead worker, no reference)."""
    cell = Cell(
        C.attack_label(job.attack), C.defense_label(job.defense), job.seed, status="failed", error=message
    )
    cell.elapsed_s = elapsed
    cell.sweep, cell.key, cell.outside_guarantee = dict(job.sweep), job.key, job.outside
    return cell


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _mp_context() -> mp.context.BaseContext:
    """Workers fork from a server that has imported robustfl (and torch) once: no per-worker
    re-import, and no fork of a process whose torch thread pools are already running. The server
    also imports ``torch._dynamo``, which torch.func's first vmap/grad would otherwise import in
    every fresh worker (seconds each, counted against a cell's timeout)."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(
            ["robustfl.simulation.matrix", "robustfl.simulation._preload", "torch._dynamo"]
        )
        return ctx
    return mp.get_context("spawn")


def _start_server(ctx: Any) -> None:
    """Start the fork server now, from the main thread, with SIGINT ignored: it inherits that, so
    a Ctrl-C to the terminal's process group while it is still importing torch does not print its
    traceback (the driver handles Ctrl-C; the server ignores SIGINT once it is up anyway)."""
    if ctx.get_start_method() != "forkserver" or threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import forkserver

    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.SIG_DFL)


# --- worker processes -----------------------------------------------------------------------
class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a matrix; every finished cell is committed. ``str()`` is one line saying how
    many cells are in the store and that re-running the command resumes."""


@dataclass
class _Fault:
    """What a worker slot reports instead of a result: a timeout or a dead worker process."""

    message: str
    elapsed: float


def _worker_main(conn: Connection, plugins: Sequence[str], allow_outside: bool, device: str) -> None:
    """A worker process: run the tasks the driver sends until it sends None or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            return
        if msg is None:
            return
        kind, payload = msg
        out: Any
        if kind == "cell":
            job, ref = payload
            out = run_job(job, ref, plugins, allow_outside, device)
        else:  # "ref": a clean reference run
            scenario, seed = payload
            try:
                out = run_reference(scenario, seed, plugins, device)
            except Exception as exc:  # the reason, as text: its cells fail with it
                out = _describe(exc)
        try:
            conn.send(out)
        except (BrokenPipeError, EOFError, OSError):
            return


@dataclass
class _Slot:
    proc: Any  # a multiprocessing Process of the pool's context
    conn: Connection
    item: Any = None
    started: float = 0.0
    deadline: float | None = None


class _Pool:
    """Up to ``size`` worker processes, each running one task at a time.

    Unlike a ``ProcessPoolExecutor`` a single worker can be killed (its task ran past
    ``timeout``) or lost (it died) without breaking the others: the task is reported as a
    :class:`_Fault` and a fresh worker takes the next one.
    """

    def __init__(
        self,
        size: int,
        plugins: Sequence[str],
        allow_outside: bool,
        device: str,
        timeout: float | None = None,
    ) -> None:
        self.size, self.timeout = max(1, size), timeout
        self._args = (list(plugins), allow_outside, device)
        self._ctx: Any = _mp_context()
        _start_server(self._ctx)
        self._idle: list[_Slot] = []
        self._busy: dict[Connection, _Slot] = {}
        self._warming: threading.Thread | None = None
        self._cancel = threading.Event()
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Start the workers in a background thread (the fork server imports torch and robustfl
        once, seconds), so the driver plans, opens the store and resumes meanwhile. The first
        dispatch waits for it rather than starting workers of its own."""

        cancelled = self._cancel = threading.Event()

        def start() -> None:
            for _ in range(self.size):
                try:
                    slot = self._spawn()
                except Exception:  # the first dispatch starts (and reports) workers itself
                    return
                with self._lock:
                    if cancelled.is_set():  # closed meanwhile (Ctrl-C, nothing to run)
                        self._kill(slot)
                        return
                    self._idle.append(slot)

        self._warming = threading.Thread(target=start, name="robustfl-pool-warm", daemon=True)
        self._warming.start()

    def _warmed(self) -> None:
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    def _spawn(self) -> _Slot:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, *self._args), daemon=True)
        proc.start()
        child.close()
        return _Slot(proc, parent)

    @staticmethod
    def _kill(slot: _Slot) -> None:
        if slot.proc.is_alive():
            slot.proc.kill()
        slot.proc.join(5)
        slot.conn.close()

    @staticmethod
    def _check_guard(slot: _Slot) -> None:
        """A worker that stopped because the script has no main guard: one error for the matrix."""
        if slot.proc.exitcode == MAIN_REIMPORTED_EXIT:
            raise MainGuardError(_guard_message(_script_name()))

    def _dispatch(self, item: Any, msg: Any) -> None:
        for _ in range(2):  # an idle worker may have died: one retry on a fresh one
            with self._lock:
                slot = self._idle.pop() if self._idle else None
            if slot is None:
                self._warmed()  # wait for the workers being started rather than start more
                with self._lock:
                    slot = self._idle.pop() if self._idle else None
            slot = slot if slot is not None else self._spawn()
            try:
                slot.conn.send(msg)
            except (BrokenPipeError, EOFError, OSError):
                self._kill(slot)
                self._check_guard(slot)
                continue
            slot.item, slot.started = item, time.monotonic()
            slot.deadline = slot.started + self.timeout if self.timeout is not None else None
            self._busy[slot.conn] = slot
            return
        raise RuntimeError("cannot start a worker process")

    def _collect(self, slot: _Slot, now: float) -> Any:
        """The slot's result, a :class:`_Fault` (dead, or past its deadline), or None (running)."""
        if not slot.conn.poll() and slot.proc.is_alive():
            if slot.deadline is not None and now >= slot.deadline:
                return _Fault(f"timeout after {self.timeout:g} s", now - slot.started)
            return None
        try:  # a result, or the end of the pipe of a worker that died
            if slot.conn.poll():
                return slot.conn.recv()
        except (EOFError, OSError):
            pass
        slot.proc.join(1)
        self._check_guard(slot)
        return _Fault(f"worker process died (exit code {slot.proc.exitcode})", now - slot.started)

    def _starting(self) -> bool:
        """Workers are still being started in the background and none is idle yet."""
        return self._warming is not None and self._warming.is_alive() and not self._idle

    def imap(
        self,
        items: Iterable[Any],
        message: Callable[[Any], Any],
        skip: Callable[[Any], Any] | None = None,
        on_start: Callable[[Any], None] | None = None,
        keep: bool = False,
        local: Callable[[Any], Any] | None = None,
    ) -> Generator[tuple[Any, Any], None, None]:
        """Yield ``(item, result)`` as tasks finish (any order); ``result`` is the worker's answer
        or a :class:`_Fault`. ``skip(item)``, asked just before dispatch, may return a result to
        yield without running the item. ``local(item)``, when given, runs an item in this process
        while the workers are still starting (:meth:`warm`), so the seconds a fork server takes
        to import torch are not idle. With ``keep`` the idle workers stay for the next imap
        when every item is done; otherwise (and always when stopped early) the pool is closed."""
        queue = deque(items)
        finished = False

        def take() -> tuple[Any, Any]:
            item = queue.popleft()
            return item, (skip(item) if skip is not None else None)

        try:
            while queue or self._busy:
                ran_here = False
                while queue and len(self._busy) < self.size and not (local and self._starting()):
                    item, got = take()
                    if got is not None:
                        yield item, got
                        continue
                    self._dispatch(item, message(item))
                    if on_start is not None:
                        on_start(item)
                if queue and local is not None and self._starting():
                    item, got = take()
                    if got is None:
                        if on_start is not None:
                            on_start(item)
                        got = local(item)
                    ran_here = True
                    yield item, got
                if not self._busy:
                    continue
                deadlines = [s.deadline for s in self._busy.values() if s.deadline is not None]
                wait_s = max(0.0, min(deadlines) - time.monotonic()) + 0.01 if deadlines else None
                if ran_here or (queue and local is not None and self._starting()):
                    wait_s = 0.0  # collect what finished, then run the next item here
                wait_any([*self._busy, *(s.proc.sentinel for s in self._busy.values())], timeout=wait_s)
                now = time.monotonic()
                for slot in list(self._busy.values()):
                    result = self._collect(slot, now)
                    if result is not None:
                        del self._busy[slot.conn]
                        if isinstance(result, _Fault):
                            self._kill(slot)
                        else:
                            with self._lock:
                                self._idle.append(slot)
                        yield slot.item, result
            finished = True
        finally:
            if not (keep and finished):
                self.close()

    def close(self) -> None:
        """Stop every worker: busy ones are killed, idle ones asked to exit (then killed). Workers
        still being started in the background are stopped as they come up."""
        with self._lock:
            self._cancel.set()
            self._warming = None
            busy, idle = list(self._busy.values()), list(self._idle)
            self._busy.clear()
            self._idle.clear()
        for slot in busy:
            self._kill(slot)
        for slot in idle:
            with suppress(BrokenPipeError, EOFError, OSError):
                slot.conn.send(None)
        for slot in idle:
            slot.proc.join(2)
            self._kill(slot)


class _SigintGuard:
    """Ctrl-C raises KeyboardInterrupt as usual, except while a finished cell is being committed:
    then it is held until the commit is done. Installed only in the main thread, and only when
    SIGINT has Python's default handler (an embedding program's own handler is left alone)."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._old: Any = None
        self._installed = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            self._pending = True
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> _SigintGuard:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.getsignal(signal.SIGINT)
            if self._old is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._handler)
                self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._old)
            self._installed = False

    @contextmanager
    def critical(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                raise KeyboardInterrupt


# --- driver ---------------------------------------------------------------------------------
def _check_timeout(cell_timeout: float | None) -> float | None:
    if cell_timeout is None:
        return None
    ok = isinstance(cell_timeout, int | float) and not isinstance(cell_timeout, bool)
    if not ok or not math.isfinite(cell_timeout) or cell_timeout <= 0:
        raise ConfigError(f"--cell-timeout must be a positive number of seconds, got {cell_timeout!r}")
    return float(cell_timeout)


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
    from .store import Store

    leave_if_importing_main()
    timeout = _check_timeout(cell_timeout)
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    if _uses_processes(executor, workers, timeout):
        where = unguarded_main_call()
        if where is not None:  # its workers would run the script again: say so before starting them
            raise MainGuardError(_guard_message(where))
    _load_plugins(plugins)  # here too: the plan below builds every attack and defense
    pool: _Pool | None = None
    if executor == "local" and (workers > 1 or timeout is not None):
        pool = _Pool(workers, plugins, allow_outside_guarantee, device, timeout)
        pool.warm()  # workers start while the cells are planned, the store opened and resumed
    db: Store | None = None
    done: dict[str, Cell] = {}
    jobs: list[Job] = []
    try:
        jobs = plan(scenario, attacks, defenses, seeds, allow_outside_guarantee=allow_outside_guarantee)
        prov = provenance(scenario, jobs)
        with _SigintGuard() as guard:
            db = Store(store) if store is not None else None
            if db is not None:
                db.add_run(scenario.to_dict(), prov)
                done.update(_resumed(db, jobs))
            todo = [j for j in jobs if j.key not in done]
            if progress is not None:
                progress.start(len(jobs))
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

            refs, ref_errors = _references(
                todo, db, workers, plugins, device, executor, address, timeout, pool
            )
            runnable = []
            for j in todo:
                err = ref_errors.get(reference_key(j.scenario, j.seed))
                if err is None:
                    runnable.append(j)
                else:
                    record(_fault_cell(j, f"clean reference run (attack none, defense fedavg) failed: {err}"))
            cells = _execute(
                runnable,
                refs,
                workers,
                plugins,
                allow_outside_guarantee,
                device,
                executor,
                address,
                progress,
                cell_timeout=timeout,
                skip=finished_elsewhere,
                pool=pool,
            )
            with closing(cells):  # on Ctrl-C the generator's workers are stopped right here
                for cell in cells:
                    record(cell)
            # has each clean run converged? (convergence.py) -- per sweep point and seed
            prov["convergence"] = clean_verdicts(jobs, done, db, ref_errors, device)
    except KeyboardInterrupt:
        if not jobs:  # still planning: nothing ran, nothing to say about a store
            raise
        raise Interrupted(_interrupted_message(done, len(jobs), store)) from None
    finally:
        if pool is not None:
            pool.close()
        if db is not None:
            db.close()
    return MatrixResult(scenario.to_dict(), prov, [done[j.key] for j in jobs if j.key in done])


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
    from . import convergence
    from .runner import clean_convergence

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
        every = int(j.scenario.section("metrics")["every"])
        config = cell_config(j.scenario, "none", "fedavg", j.seed)
        untouched = {k: x for k, x in config["scenario"].items() if k != "threat"}
        run_key = config_hash({**config, "scenario": untouched})
        v: dict[str, Any] | None = None
        if clean in done:
            v = convergence.from_cell(done[clean], rounds, j.sweep, every)
        if v is None and run_key in same_run:
            v = {**same_run[run_key], "sweep": dict(j.sweep)}
        if v is None and db is not None:
            meta = db.get_ref_meta(convergence.store_key(clean))
            v = dict(meta["verdict"]) if meta and isinstance(meta.get("verdict"), dict) else None
            if v is not None:
                v["sweep"] = dict(j.sweep)
        err = (ref_errors or {}).get(reference_key(j.scenario, j.seed))
        if v is None and err is not None:  # the clean run already failed as the cells' reference
            ref_kind = "exact" if not _needs_reference(j) else "clean_run"
            v = convergence.verdict(
                None, rounds=rounds, reference=ref_kind, seed=j.seed, sweep=j.sweep, error=err, every=every
            )
        if v is None:
            try:
                _, v = clean_convergence(j.scenario, j.seed, device=device, sweep=j.sweep)
            except Exception as exc:  # said in the verdict, never fatal to the matrix
                ref_kind = "exact" if not _needs_reference(j) else "clean_run"
                v = convergence.verdict(
                    None, rounds=rounds, reference=ref_kind, seed=j.seed, sweep=j.sweep, error=_describe(exc),
                    every=every,
                )
        if db is not None and v.get("error") is None:
            db.put_ref(convergence.store_key(clean), np.zeros(0), {"verdict": v})
        if v.get("error") is None:
            same_run[run_key] = v
        out.append(v)
    return out


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


def _interrupted_message(done: dict[str, Cell], total: int, store: str | Path | None) -> str:
    if store is None:
        return f"interrupted after {len(done)} of {total} cells (no store: nothing was kept)"
    ran = sum(c.status in ("ok", "diverged") for c in done.values())
    failed = len(done) - ran
    extra = f" ({failed} failed, retried on rerun)" if failed else ""
    return (
        f"interrupted: {ran} of {total} cells are finished in the store {store}{extra}; "
        "rerun the same command to resume"
    )


def _needs_reference(job: Job) -> bool:
    return build_problem(job.scenario, job.seed).optimum is None


def _references(
    todo: Sequence[Job],
    db: Any,
    workers: int,
    plugins: Sequence[str],
    device: str,
    executor: str,
    address: str | None,
    timeout: float | None = None,
    pool: _Pool | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The clean-run reference models the cells need (from the store, else computed and stored),
    and the reason for each one that could not be computed (its cells then fail)."""
    need: dict[str, tuple[Scenario, int]] = {}
    for j in todo:
        if _needs_reference(j):
            need.setdefault(reference_key(j.scenario, j.seed), (j.scenario, j.seed))
    refs: dict[str, np.ndarray] = {}
    errors: dict[str, str] = {}
    missing = []
    for key, (sc, seed) in need.items():
        got = db.get_ref(key) if db is not None else None
        if got is not None:
            refs[key] = got
        else:
            missing.append((key, sc, seed))
    if not missing:
        return refs, errors

    def keep(key: str, seed: int, result: Any) -> None:
        if isinstance(result, _Fault | str):
            errors[key] = result.message if isinstance(result, _Fault) else result
            return
        refs[key] = result
        if db is not None:
            db.put_ref(key, result, {"seed": seed})

    if executor == "local" and (timeout is not None or (workers > 1 and len(missing) > 1)):
        own = pool is None
        use = _Pool(min(workers, len(missing)), plugins, False, device, timeout) if own else pool
        assert use is not None
        here = (lambda m: _reference_or_reason(m[1], m[2], plugins, device)) if timeout is None else None
        answers = use.imap(missing, lambda m: ("ref", (m[1], m[2])), keep=not own, local=here)
        for (key, _, seed), answer in answers:
            keep(key, seed, answer)
        return refs, errors
    for key, sc, seed in missing:
        keep(key, seed, _reference_or_reason(sc, seed, plugins, device))
    return refs, errors


def _reference_or_reason(sc: Scenario, seed: int, plugins: Sequence[str], device: str) -> np.ndarray | str:
    """The clean reference model, or why it could not be computed (its cells then fail with it)."""
    try:
        return run_reference(sc, seed, plugins, device)
    except Exception as exc:
        return _describe(exc)


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _execute(
    todo: Sequence[Job],
    refs: dict[str, np.ndarray],
    workers: int,
    plugins: Sequence[str],
    allow_outside: bool,
    device: str,
    executor: str,
    address: str | None,
    progress: Progress | None,
    *,
    cell_timeout: float | None = None,
    skip: Callable[[Job], Cell | None] | None = None,
    pool: _Pool | None = None,
) -> Generator[Cell, None, None]:
    def ref_of(j: Job) -> np.ndarray | None:
        return refs.get(reference_key(j.scenario, j.seed))

    def started(j: Job) -> None:
        if progress is not None:
            progress.cell_started(j.label)

    if executor == "ray":
        from .executors import ray_execute

        extra: dict[str, Any] = {}
        if _accepts(ray_execute, "workers"):
            extra["workers"] = workers
        if cell_timeout is not None:
            if _accepts(ray_execute, "cell_timeout"):
                extra["cell_timeout"] = cell_timeout
            else:
                logging.getLogger("robustfl").warning(
                    "--cell-timeout is not supported by --executor ray in this version; cells run without it"
                )
        yield from ray_execute(todo, ref_of, plugins, allow_outside, device, address, progress, **extra)
        return
    if cell_timeout is None and (workers == 1 or len(todo) <= 1):
        for j in todo:  # in this process: no timeout to enforce, nothing to isolate
            got = skip(j) if skip is not None else None
            if got is not None:
                yield got
                continue
            started(j)
            yield run_job(j, ref_of(j), plugins, allow_outside, device)
        return
    if pool is None:
        pool = _Pool(min(workers, len(todo)), plugins, allow_outside, device, cell_timeout)
    here = (lambda j: run_job(j, ref_of(j), plugins, allow_outside, device)) if cell_timeout is None else None
    results = pool.imap(todo, lambda j: ("cell", (j, ref_of(j))), skip=skip, on_start=started, local=here)
    with closing(results):
        for j, result in results:
            yield _fault_cell(j, result.message, result.elapsed) if isinstance(result, _Fault) else result
