"""Ctrl-C during a matrix: :class:`SigintGuard` holds a SIGINT that arrives while a finished cell
is being committed until the commit is done, and the driver then raises :class:`Interrupted`,
whose one line (:func:`interrupted_message`) says how many cells the store holds."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ..simulation.results import Cell


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a matrix; every finished cell is committed. ``str()`` is one line saying how
    many cells are in the store and that re-running the command resumes."""


def interrupted_message(done: dict[str, Cell], total: int, store: str | Path | None) -> str:
    if store is None:
        return f"interrupted after {len(done)} of {total} cells (no store: nothing was kept)"
    ran = sum(c.status in ("ok", "diverged") for c in done.values())
    failed = len(done) - ran
    extra = f" ({failed} failed, retried on rerun)" if failed else ""
    return (
        f"interrupted: {ran} of {total} cells are finished in the store {store}{extra}; "
        "rerun the same command to resume"
    )


RESEND_S = 0.05  # a Ctrl-C that lands in numba's compiler comes back this much later


def in_compiler(frame: FrameType | None) -> bool:
    """The signal arrived while numba compiles a kernel (its first call in a process whose cache
    lacks it): a frame of numba or llvmlite is on the stack. llvmlite runs Python callbacks from C
    (``_raw_object_cache_notify``), which print an exception raised in them as "Exception
    ignored" and drop it, so a KeyboardInterrupt raised there would be lost."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(("numba.", "llvmlite.")):
            return True
        frame = frame.f_back
    return False


def resend_sigint(delay: float) -> None:
    """SIGINT to this process again after ``delay`` seconds (from a daemon thread)."""
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()


class SigintGuard:
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
        elif in_compiler(frame):  # llvmlite's callbacks swallow an exception: the Ctrl-C was lost
            resend_sigint(RESEND_S)
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> SigintGuard:
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
