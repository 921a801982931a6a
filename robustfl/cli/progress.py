"""Matrix progress in the terminal: one live line fitted to the console, or plain lines on stderr
when the output is not a terminal; its time left is learned per attack and defense
(:class:`CellTimes`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import IO, Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TaskID
from rich.text import Text

from robustfl.simulation.results import Cell

from .tables import get_console


def _clock(seconds: float, short: bool = False) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour with ``short``)."""
    m, s = divmod(int(max(0.0, seconds) + 0.5), 60)
    h, m = divmod(m, 60)
    return f"{m}:{s:02d}" if short and not h else f"{h}:{m:02d}:{s:02d}"


class CellTimes:
    """What the cells left will cost, learned from the compute times of the cells finished so far.

    A pending cell's time is predicted from the finished cells with its attack and defense: the
    mean of that pair when it has finished cells; else ``m_a * m_d / m`` when both its attack and
    its defense have (their mean times, over the overall mean: each factor says how much slower
    than the average that attack, or that defense, has been); else the mean of whichever of the
    two has; else the overall mean. So an attack whose cells cost 17x a plain one makes each of
    its pending cells count 17x, not the average. :meth:`eta` spreads the work over the workers.
    """

    def __init__(self) -> None:
        self._sum: dict[Any, float] = defaultdict(float)
        self._n: Counter[Any] = Counter()

    def add(self, attack: str, defense: str, seconds: float) -> None:
        for key in (("pair", attack, defense), ("attack", attack), ("defense", defense), "all"):
            self._sum[key] += float(seconds)
            self._n[key] += 1

    def _mean(self, key: Any) -> float | None:
        n = self._n.get(key, 0)
        return self._sum[key] / n if n else None

    def predict(self, attack: str, defense: str) -> float | None:
        """The expected compute time of one cell of ``attack`` x ``defense`` (None: nothing seen yet)."""
        pair, overall = self._mean(("pair", attack, defense)), self._mean("all")
        if pair is not None or overall is None:
            return pair
        a, d = self._mean(("attack", attack)), self._mean(("defense", defense))
        if a is not None and d is not None:
            return a * d / overall if overall > 0 else overall
        return a if a is not None else d if d is not None else overall

    def eta(
        self,
        pending: Iterable[tuple[str, str]],
        workers: int,
        running: Iterable[tuple[str, str, float]] = (),
    ) -> float | None:
        """Seconds until ``pending`` (attack, defense) cells and what is left of the ``running``
        ones (attack, defense, seconds so far) are done on ``workers`` processes: their predicted
        total over the workers that have cells to run, but never less than the longest cell left."""
        if not self._n.get("all"):
            return None
        left = [self.predict(a, d) or 0.0 for a, d in pending]
        left += [max(0.0, (self.predict(a, d) or 0.0) - so_far) for a, d, so_far in running]
        if not left:
            return 0.0
        return max(sum(left) / max(1, min(int(workers), len(left))), max(left))


class _LineColumn(ProgressColumn):
    """The whole progress line, fitted to the console's width (see :meth:`MatrixProgress.line`)."""

    def __init__(self, owner: MatrixProgress) -> None:
        super().__init__()
        self._owner = owner

    def render(self, task: Task) -> Text:
        # the spinner and the grid's one-column gap take 2 columns
        return self._owner.line(self._owner.console.width - 2)


class MatrixProgress:
    """Progress of a matrix: cells done/total, running, failed, time elapsed and left.

    Use as a context manager; ``start(total, done=0)`` (``done``: cells already in the store),
    optionally ``pending(cells, workers)`` (the (label, attack, defense) of the cells to run: the
    time left is then learned per attack and defense, :class:`CellTimes`), then
    ``cell_started(label)`` and ``cell_finished(cell)`` as cells go. Cells reported finished
    before the first ``cell_started`` count as resumed from the store: they advance the bar (and
    teach the time model their compute times) but not the throughput behind the estimate made
    without ``pending``.

    On a terminal it is one live line that fits the console's width (the bar and the last cell's
    name give way first). When the console is not a terminal (output piped or redirected;
    ``plain=True``) it prints plain lines on stderr instead (``stream``), e.g.
    ``[23/73 cells, 0:18:04 elapsed, eta 0:24:10]``: at the start, every tenth of the cells,
    every ``interval`` seconds while cells run, and at the end. With ``quiet=True`` it prints
    nothing but still counts (``done``, ``running``, ``failed``, ``diverged``).
    """

    def __init__(
        self,
        console: Console | None = None,
        quiet: bool = False,
        transient: bool = False,
        *,
        plain: bool | None = None,
        interval: float = 15.0,
        stream: IO[str] | None = None,
    ) -> None:
        self.quiet = quiet
        self.console = get_console(console)
        self.plain = (not self.console.is_terminal) if plain is None else bool(plain)
        self.interval = float(interval)
        self._stream = stream
        self.total = self.done = self.running = self.failed = self.diverged = 0
        self._done_here = 0
        self._started = False
        self._t0 = self._t_start = time.monotonic()
        self._last = ""
        self._times = CellTimes()
        self._workers = 1
        self._labels: dict[str, tuple[str, str]] | None = None
        self._queued: Counter[tuple[str, str]] = Counter()
        self._since: dict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._lock = threading.RLock()
        self._printed_at = float("-inf")
        self._printed = ""
        self._next_print = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._task: TaskID | None = None
        self._progress: Progress | None = None
        if not quiet and not self.plain:
            self._progress = Progress(
                SpinnerColumn(), _LineColumn(self), console=self.console, transient=transient
            )

    def __enter__(self) -> MatrixProgress:
        if self._progress is not None:
            self._progress.start()
        elif self.plain and not self.quiet:
            self._ticker = threading.Thread(target=self._tick, name="robustfl-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._progress is not None:
            self._refresh()
            self._progress.stop()
        elif self.plain and not self.quiet and self.total and exc_type is None:
            self._emit(final=True)  # (an error or Ctrl-C says its own one line instead)

    def start(self, total: int, done: int = 0) -> None:
        with self._lock:
            self.total, self.done = int(total), int(done)
            self._t0 = self._t_start = time.monotonic()
            self._next_print = self.done
        if self._progress is not None:
            self._task = self._progress.add_task("cells", total=self.total, completed=self.done)
        self._maybe_emit()

    def pending(self, cells: Sequence[tuple[str, str, str]], workers: int = 1) -> None:
        """The cells still to run, as (label, attack, defense), and the processes running them."""
        with self._lock:
            self._labels = {label: (a, d) for label, a, d in cells}
            self._queued = Counter((a, d) for _, a, d in cells)
            self._workers = max(1, int(workers))

    def cell_started(self, label: str) -> None:
        with self._lock:
            now = time.monotonic()
            if not self._started:  # cells finished before the first start were resumed from the store:
                self._started = True  # measure the throughput from here
                self._t0, self._done_here = now, 0
            self.running += 1
            self._last = str(label)
            pair = self._labels.get(label) if self._labels is not None else None
            if pair is not None:
                if self._queued[pair] > 0:
                    self._queued[pair] -= 1
                self._since[pair].append(now)
        self._refresh()

    def cell_finished(self, cell: Cell) -> None:
        with self._lock:
            pair = (cell.attack, cell.defense)
            if self._since.get(pair):
                self.running = max(0, self.running - 1)
                self._since[pair].popleft()
            else:
                if self._started:
                    self.running = max(0, self.running - 1)
                if self._queued.get(pair, 0) > 0:  # finished without starting (skipped, its reference failed)
                    self._queued[pair] -= 1
            if cell.elapsed_s and cell.elapsed_s > 0:
                self._times.add(cell.attack, cell.defense, cell.elapsed_s)
            self.done += 1
            self._done_here += 1
            self.failed += cell.status == "failed"
            self.diverged += cell.status == "diverged"
            self._last = f"{cell.attack} vs {cell.defense} seed {cell.seed}: {cell.status}"
        self._refresh()
        self._maybe_emit()

    def eta_s(self) -> float | None:
        """Seconds left: with ``pending``, the cells left at their predicted times over the workers
        (:class:`CellTimes`); without, the throughput since the first cell started. None: unknown."""
        with self._lock:
            now = time.monotonic()
            if self._labels is not None:
                running = [(a, d, now - t) for (a, d), ts in self._since.items() for t in ts]
                return self._times.eta(self._queued.elements(), self._workers, running)
            if not self._done_here or not self.total:
                return None
            return max(0.0, (now - self._t0) / self._done_here * (self.total - self.done))

    def _eta_text(self) -> str:
        if self.total and self.done >= self.total:
            return "eta 0:00"
        eta = self.eta_s()
        return "eta -:--" if eta is None else f"eta {_clock(eta, short=True)}"

    def line(self, width: int) -> Text:
        """The live line in at most ``width`` columns: ``cells 23/73 ━━━ running 2  failed 1
        0:18:04  eta 3:10  <last cell>``; the bar shrinks, then the last cell's name is cut, then
        both go, before any count or time does."""
        with self._lock:
            status = [(f"running {self.running}", "")]
            if self.diverged:
                status.append((f"diverged {self.diverged}", "red"))
            if self.failed:
                status.append((f"failed {self.failed}", "magenta"))
            total, done, last = self.total, self.done, self._last
        head = Text.assemble(("cells ", "bold"), (f"{done}/{total}", "green"))
        tail = Text()
        for i, (word, style) in enumerate(status):
            tail.append(("  " if i else "") + word, style=style)
        tail.append("  ")
        tail.append(_clock(time.monotonic() - self._t_start), style="yellow")
        tail.append("  ")
        tail.append(self._eta_text(), style="cyan")
        room = width - head.cell_len - tail.cell_len - 2  # the spaces either side of the bar
        bar = min(40, max(10, room - len(last) - 2)) if room >= 10 + 2 + 12 else min(40, room)
        bar = bar if bar >= 10 else 0
        label_room = room - bar - 2 if bar else room + 1 - 2
        text = head
        if bar:
            filled = int(bar * done / total + 0.5) if total else 0
            style = "bar.finished" if total and done >= total else "bar.complete"
            text.append(" ")
            text.append("━" * filled, style=style)
            text.append("━" * (bar - filled), style="bar.back")
        text.append(" ")
        text.append_text(tail)
        if last and label_room >= 12:
            name = Text(last, style="dim")
            name.truncate(label_room, overflow="ellipsis")
            text.append("  ")
            text.append_text(name)
        text.no_wrap, text.overflow = True, "ellipsis"
        text.truncate(max(1, width), overflow="ellipsis")
        return text

    def plain_line(self) -> str:
        """The line piped output gets: ``[23/73 cells, 1 failed, 0:18:04 elapsed, eta 0:24:10]``."""
        with self._lock:
            parts = [f"{self.done}/{self.total} cells"]
            parts += [f"{self.running} running"] if self.running and self.done < self.total else []
            parts += [f"{self.diverged} diverged"] if self.diverged else []
            parts += [f"{self.failed} failed"] if self.failed else []
            parts.append(f"{_clock(time.monotonic() - self._t_start)} elapsed")
            if self.done < self.total:
                eta = self.eta_s()
                parts.append("eta -:--" if eta is None else f"eta {_clock(eta)}")
        return "[" + ", ".join(parts) + "]"

    def _emit(self, final: bool = False) -> None:
        with self._lock:
            line = self.plain_line()
            if final and line == self._printed:
                return
            stream = self._stream if self._stream is not None else sys.stderr
            stream.write(line + "\n")
            stream.flush()
            self._printed, self._printed_at = line, time.monotonic()
            self._next_print = self.done + max(1, -(-self.total // 10))

    def _maybe_emit(self) -> None:
        """Piped: a line at the start, every tenth of the cells and every ``interval`` seconds."""
        if not self.plain or self.quiet or not self.total:
            return
        with self._lock:
            due = self.done >= self._next_print or time.monotonic() - self._printed_at >= self.interval
        if due:
            self._emit()

    def _tick(self) -> None:
        """Piped: a line every ``interval`` seconds even while no cell finishes."""
        while not self._stop.wait(min(1.0, self.interval / 2)):
            with self._lock:
                due = self.total and time.monotonic() - self._printed_at >= self.interval
            if due:
                self._emit()

    def _refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.done)
