"""The local worker pool: up to N worker processes, each running one task at a time.

Workers fork from a server that has imported robustfl, torch and every built-in module once
(:func:`mp_context`, :mod:`._preload`); the server is started with SIGINT ignored. Unlike a
``ProcessPoolExecutor`` a single worker can be killed (its task ran past the timeout) or lost (it
died) without breaking the others: its task is reported as a :class:`Fault` and a fresh worker
takes the next one. Workers ignore SIGINT: Ctrl-C is the driver's to handle.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_any
from typing import Any

from .jobs import reference_or_reason, run_job
from .main_guard import MAIN_REIMPORTED_EXIT, MainGuardError, guard_message, script_name


def mp_context() -> mp.context.BaseContext:
    """Workers fork from a server that has imported robustfl (and torch) once: no per-worker
    re-import, and no fork of a process whose torch thread pools are already running. The server
    also imports ``torch._dynamo``, which torch.func's first vmap/grad would otherwise import in
    every fresh worker (seconds each, counted against a cell's timeout)."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["robustfl.sweep.driver", "robustfl.sweep._preload", "torch._dynamo"])
        return ctx
    return mp.get_context("spawn")


def start_server(ctx: Any) -> None:
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


@dataclass
class Fault:
    """What a worker slot reports instead of a result: a timeout or a dead worker process."""

    message: str
    elapsed: float


def worker_main(conn: Connection, plugins: Sequence[str], allow_outside: bool, device: str) -> None:
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
            out = reference_or_reason(scenario, seed, plugins, device)  # or why not: its cells fail with it
        try:
            conn.send(out)
        except (BrokenPipeError, EOFError, OSError):
            return


@dataclass
class Slot:
    proc: Any  # a multiprocessing Process of the pool's context
    conn: Connection
    item: Any = None  # the item it runs
    started: float = 0.0
    deadline: float | None = None
    next: list[Any] = field(default_factory=list)  # an item sent ahead, waiting in its pipe


class Pool:
    """Up to ``size`` worker processes, each running one task at a time.

    Unlike a ``ProcessPoolExecutor`` a single worker can be killed (its task ran past
    ``timeout``) or lost (it died) without breaking the others: the task is reported as a
    :class:`Fault` and a fresh worker takes the next one.
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
        self._ctx: Any = mp_context()
        start_server(self._ctx)
        self._idle: list[Slot] = []
        self._busy: dict[Connection, Slot] = {}
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

    def _spawn(self) -> Slot:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=worker_main, args=(child, *self._args), daemon=True)
        proc.start()
        child.close()
        return Slot(proc, parent)

    @staticmethod
    def _kill(slot: Slot) -> None:
        if slot.proc.is_alive():
            slot.proc.kill()
        slot.proc.join(5)
        slot.conn.close()

    @staticmethod
    def _check_guard(slot: Slot) -> None:
        """A worker that stopped because the script has no main guard: one error for the matrix."""
        if slot.proc.exitcode == MAIN_REIMPORTED_EXIT:
            raise MainGuardError(guard_message(script_name()))

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

    def _ahead_slot(self) -> Slot | None:
        """A busy worker with nothing waiting, to be sent its next item ahead; None when every
        one has an item waiting, or with a timeout (a deadline needs the start)."""
        if self.timeout is not None:
            return None
        return next((s for s in self._busy.values() if not s.next), None)

    @staticmethod
    def _send_ahead(slot: Slot, item: Any, msg: Any) -> bool:
        """Send ``item`` to the busy ``slot``, to start the moment its current item is done (no
        round trip through this process, which may be storing results). False: it is dying."""
        try:
            slot.conn.send(msg)
        except (BrokenPipeError, EOFError, OSError):  # dying: its current item reports it
            return False
        slot.next.append(item)
        return True

    def _collect(self, slot: Slot, now: float) -> Any:
        """The slot's result, a :class:`Fault` (dead, or past its deadline), or None (running)."""
        if not slot.conn.poll() and slot.proc.is_alive():
            if slot.deadline is not None and now >= slot.deadline:
                return Fault(f"timeout after {self.timeout:g} s", now - slot.started)
            return None
        try:  # a result, or the end of the pipe of a worker that died
            if slot.conn.poll():
                return slot.conn.recv()
        except (EOFError, OSError):
            pass
        slot.proc.join(1)
        self._check_guard(slot)
        return Fault(f"worker process died (exit code {slot.proc.exitcode})", now - slot.started)

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
        or a :class:`Fault`. ``skip(item)``, asked just before dispatch, may return a result to
        yield without running the item. ``local(item)``, when given, runs an item in this process
        while the workers are still starting (:meth:`warm`), so the seconds a fork server takes
        to import torch are not idle; it takes the last item (with the driver's longest-first
        order, the shortest), so the workers do not wait long for this process once they are up.
        Without a timeout each busy worker also holds its next item in its pipe (sent ahead:
        it starts the moment the current one is done, and ``on_start`` is called then, not when it
        is sent; a worker that dies gives it back). ``on_start`` calls wait until the results that
        finished at the same moment have been yielded, so a caller counting the running items
        never counts a finished one and its successor at once. With
        ``keep`` the idle workers stay for the next imap when every item is done; otherwise (and
        always when stopped early) the pool is closed."""
        queue = deque(items)
        finished = False
        started: list[Any] = []  # taken up since the caller last heard: told after what finished

        def tell_started() -> None:
            while started:
                item = started.pop(0)
                if on_start is not None:
                    on_start(item)

        def take(last: bool = False) -> tuple[Any, Any]:
            item = queue.pop() if last else queue.popleft()
            return item, (skip(item) if skip is not None else None)

        def refill() -> list[tuple[Any, Any]]:
            """Give every free worker its next item, and every busy one an item to start when it
            is done; the items ``skip`` answers, to yield."""
            answered = []
            while queue and not (local and self._starting()):
                ahead = None if len(self._busy) < self.size else self._ahead_slot()
                if len(self._busy) >= self.size and ahead is None:
                    break
                item, got = take()
                if got is not None:
                    answered.append((item, got))
                    continue
                if ahead is None:
                    self._dispatch(item, message(item))
                    started.append(item)
                elif not self._send_ahead(ahead, item, message(item)):
                    queue.appendleft(item)
                    break  # (an item sent ahead starts when its worker takes it up: below)
            return answered

        try:
            while queue or self._busy:
                ran_here = False
                yield from refill()
                tell_started()
                if queue and local is not None and self._starting():
                    item, got = take(last=True)  # the shortest left: the workers soon need this process
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
                done = []
                for slot in list(self._busy.values()):
                    result = self._collect(slot, now)
                    if result is not None:
                        done.append((slot.item, result))
                        if isinstance(result, Fault):
                            del self._busy[slot.conn]
                            self._kill(slot)
                            queue.extendleft(reversed(slot.next))  # sent ahead, never run: again
                            slot.next = []
                        elif slot.next:  # the item sent ahead is running now
                            slot.item, slot.started = slot.next.pop(0), now
                            started.append(slot.item)
                        else:
                            del self._busy[slot.conn]
                            with self._lock:
                                self._idle.append(slot)
                # the freed workers get their next items before the caller handles the results
                # (stores them): a worker never waits for that
                done += refill()
                yield from done
                tell_started()  # after the finished ones: the running count never counts both
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
