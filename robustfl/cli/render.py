"""Terminal output: the attack x defense table, matrix progress, one run's summary, errors.

With bound_render.py, the only modules of robustfl that import rich; a thin layer: the numbers come from
:func:`robustfl.simulation.report.summarize`, so the table, the CSV/Markdown/HTML reports and
the heatmap agree: ± is the half-width of the 95 % Student-t interval over seeds everywhere, and
the colours are the one fixed scale of every view (``report.BANDS``: green < 0.1, yellow < 0.5,
dark orange < 1, red >= 1 or diverged; the HTML page and the heatmap use
``report.BAND_COLOURS`` for the same bands), stated in each table's caption; ``failed`` cells
are magenta; a cell run outside its rule's guarantee carries a ``†`` explained in the caption.
A store holding several settings shows one table per setting, titled with the keys that differ.
Every label is shown as plain text (an attack labelled ``alie[z=1]`` is not rich markup).
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from robustfl.simulation import published as _published
from robustfl.simulation import report
from robustfl.simulation.results import METRIC_KEYS, Cell

STYLES = {
    "safe": "green",
    "weak": "yellow",
    "poor": "dark_orange",
    "broken": "red",
    "diverged": "bold red",
    "failed": "magenta",
}
STATUS_STYLES = {"ok": "green", "diverged": "bold red", "failed": "magenta"}


def _console(console: Console | None) -> Console:
    return console if console is not None else Console()


def _cell_text(group: Mapping[str, Any] | None, seconds: float | None = None) -> Text:
    """A summary's "mean ± 95 % half-width" in its band's colour; with ``seconds``, a dim second line."""
    if group is None:
        return Text("—", style="dim")
    text = Text(group["text"], style=STYLES.get(report.severity(group) or "", ""))
    if group["outside_guarantee"]:
        text.append(" " + report.DAGGER, style="bold")
    if seconds is not None:
        text.append("\n" + report.format_seconds(seconds), style="dim")
    return text


def _entry_text(entry: Mapping[str, Any] | None) -> Text:
    """A worst case or an axis view's entry, coloured by the band of its worst value."""
    if entry is None:
        return Text("—", style="dim")
    text = Text(entry["text"], style=STYLES.get(entry["severity"] or "", ""))
    if entry.get("outside_guarantee"):
        text.append(" " + report.DAGGER, style="bold")
    return text


def _time_note(cells: Sequence[Cell]) -> str:
    ran = [c.elapsed_s for c in cells if c.elapsed_s]
    if not ran:
        return ""
    return f"\ncompute time {sum(ran):.1f} s over {len(ran)} cells ({sum(ran) / len(ran):.2f} s per cell)"


def matrix_tables(
    cells: Iterable[Cell], metric: str = "relative_drift", title: str | None = None, show_time: bool = False
) -> list[Table]:
    """One table per sweep point (a single one when the cells carry no sweep values), with a
    "worst case" footer row (the worst attack per defense) when there are several attacks; with
    ``show_time`` each cell adds a dim second line, its mean compute time over seeds, and the
    caption the cells' total and mean compute time."""
    cells = list(cells)
    summary = report.summarize(cells, metric)
    worst = report.worst_case(cells, metric)
    times = report.mean_elapsed(cells) if show_time else {}
    tables = []
    for point, attacks, defenses in report.layout(summary):
        note = report.caption({k: g for k, g in summary.items() if k[0] == point}, metric)
        if show_time:
            note += _time_note([c for c in cells if report.sweep_label(c.sweep) == point])
        heading = " | ".join(t for t in (title, point) if t) or None
        footer = len(attacks) > 1
        table = Table(
            title=heading, caption=note, caption_justify="left", header_style="bold", show_footer=footer
        )
        # Narrow terminals wrap a cell onto two lines ("0.512 ±" / "0.045") rather than cut it.
        table.add_column(
            Text("attack \\ defense"), Text(report.WORST_ROW), style="bold", overflow="fold"
        )
        for d in defenses:
            table.add_column(Text(d), _entry_text(worst.get((point, d))), justify="right", overflow="fold")
        for a in attacks:
            table.add_row(
                Text(a), *(_cell_text(summary.get((point, a, d)), times.get((point, a, d))) for d in defenses)
            )
        tables.append(table)
    return tables


def sweep_tables(
    cells: Iterable[Cell], metric: str = "relative_drift", title: str | None = None
) -> list[Table]:
    """One table per sweep key (none without a sweep): rows the key's values, columns the
    defenses, each entry the worst case over attacks summarised over the other sweep axes
    (:func:`robustfl.simulation.report.axis_views`), and a "worst case" footer over all points."""
    tables = []
    for key, view in report.axis_views(cells, metric).items():
        heading = " | ".join(t for t in (title, f"by {key}") if t)
        note = report.axis_caption(view, metric)
        table = Table(
            title=heading, caption=note, caption_justify="left", header_style="bold", show_footer=True
        )
        table.add_column(Text(f"{key} \\ defense"), Text(report.WORST_ROW), style="bold", overflow="fold")
        for d in view["defenses"]:
            table.add_column(Text(d), _entry_text(view["worst"][d]), justify="right", overflow="fold")
        for v in view["values"]:
            table.add_row(Text(v), *(_entry_text(view["rows"].get((v, d))) for d in view["defenses"]))
        tables.append(table)
    return tables


def print_sweep(
    cells: Iterable[Cell],
    console: Console | None = None,
    metric: str = "relative_drift",
    title: str | None = None,
) -> None:
    """The per-axis views of a sweep (:func:`sweep_tables`); nothing when the cells carry no sweep."""
    console = _console(console)
    for t in sweep_tables(cells, metric, title):
        console.print(t)


def matrix_table(
    cells: Iterable[Cell], metric: str = "relative_drift", title: str | None = None, show_time: bool = False
) -> Table:
    """Rows attacks, columns defenses (first-seen order), "mean ± 95 % half-width" of the final
    metric over seeds; several sweep points come stacked in one grid, one table per point."""
    tables = matrix_tables(cells, metric, title, show_time)
    if len(tables) == 1:
        return tables[0]
    grid = Table.grid(padding=(0, 0, 1, 0))
    grid.add_column()
    for t in tables:
        grid.add_row(t)
    if not tables:
        grid.add_row(Text("no cells", style="dim"))
    return grid


def print_matrix(
    cells: Iterable[Cell],
    console: Console | None = None,
    metric: str = "relative_drift",
    title: str | None = None,
    show_time: bool = False,
    sweep: bool = True,
) -> None:
    """The attack x defense tables (:func:`matrix_tables`), then, when the cells carry sweep
    values and ``sweep`` is set, the per-axis views (:func:`print_sweep`)."""
    console = _console(console)
    cells = list(cells)
    tables = matrix_tables(cells, metric, title, show_time)
    if not tables:
        console.print(Text("no cells", style="dim"))
    for t in tables:
        console.print(t)
    if sweep:
        print_sweep(cells, console, metric, title)


def print_note(msg: str, console: Console | None = None) -> None:
    """A dim informational line (where results went, what was validated)."""
    _console(console).print(Text(str(msg), style="dim"), soft_wrap=True)


def print_listing(listing: Mapping[str, Sequence[Mapping[str, str]]], console: Console | None = None) -> None:
    """``robustfl list``: one table per kind (attacks, defenses, ...) of names and origins."""
    console = _console(console)
    for kind, rows in listing.items():
        table = Table(title=kind, title_justify="left", header_style="bold")
        table.add_column("name", style="cyan", no_wrap=True)
        table.add_column("origin")
        for r in rows:
            origin = str(r.get("origin", ""))
            style = "dim" if origin == "built-in" else ""
            table.add_row(Text(str(r.get("name", ""))), Text(origin, style=style))
        console.print(table)


def print_error(msg: str, console: Console | None = None) -> None:
    """``error: msg`` in red on stderr (or on ``console``)."""
    console = console if console is not None else Console(stderr=True)
    console.print(Text.assemble(("error: ", "bold red"), str(msg)), soft_wrap=True)


def print_cell(cell: Cell, console: Console | None = None) -> None:
    """A short summary of one run: who against whom, status, the final metrics."""
    console = _console(console)
    head = Text.assemble(
        (cell.attack, "bold"), " vs ", (cell.defense, "bold"), f", seed {cell.seed}: ",
        (cell.status, STATUS_STYLES.get(cell.status, "")),
    )
    if cell.outside_guarantee:
        head.append(f" {report.DAGGER} outside the rule's guarantee", style="yellow")
    if cell.sweep:
        head.append(f"  [{report.sweep_label(cell.sweep)}]", style="dim")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="cyan")
    grid.add_column(justify="right")
    for k in METRIC_KEYS:
        v = cell.final.get(k)
        if v is not None:
            grid.add_row(k, str(v) if isinstance(v, int) else report.format_value(float(v)))
    grid.add_row("reference", cell.reference)
    grid.add_row("elapsed", f"{cell.elapsed_s:.2f} s")
    parts: list[RenderableType] = [head, grid]
    if cell.error:
        parts.append(Text.assemble(("error: ", "bold red"), cell.error))
    console.print(Group(*parts))


def published_tables(comparisons: Sequence[_published.Comparison]) -> list[RenderableType]:
    """Per published table: its header lines, the measured-vs-published cells (flagged ones in
    orange) and Kendall's tau per attack (:mod:`robustfl.simulation.published`)."""
    out: list[RenderableType] = []
    for comp in comparisons:
        out.append(Text(f"Measured vs published: {comp.table.title}", style="bold"))
        out.append(Text("\n".join(_published.header_lines(comp)), style="dim"))
        for s in comp.sections:
            cells = Table(title=s.point or None, title_justify="left")
            for i, h in enumerate(_published.HEADERS):
                cells.add_column(h, justify="left" if i < 2 else "right")
            for c in s.cells:
                flagged = c.outside or c.asr_outside
                style = "dark_orange" if flagged else ("dim" if c.status != "compared" else "")
                cells.add_row(*(Text(x) for x in _published.row_cells(c)), style=style)
            out.append(cells)
            ranks = Table()
            ranks.add_column("attack (paper)")
            ranks.add_column("Kendall τ, published vs measured order of the rules")
            for r in s.ranks:
                ranks.add_row(Text(r.attack), Text(r.text(), style="dim" if r.tau is None else ""))
            out.append(ranks)
        out.append(Text(_published.summary_line(comp)))
    return out


def print_published(comparisons: Sequence[_published.Comparison], console: Console | None = None) -> None:
    """:func:`published_tables`, printed (nothing when there are no comparisons)."""
    console = _console(console)
    for part in published_tables(comparisons):
        console.print(part)


def print_report(
    cells: Sequence[Cell],
    format: str = "table",
    *,
    metric: str = "relative_drift",
    output: str | None = None,
    console: Console | None = None,
    scenario: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    published: Sequence[_published.Comparison] = (),
    runs: Sequence[Mapping[str, Any]] = (),
    setting_keys: Sequence[str] = (),
    title: str | None = None,
) -> None:
    """``robustfl report``: the table (rich) or csv/json/markdown/html text, to ``output`` or
    stdout; ``published`` comparisons follow the table (and go into json/markdown/html);
    ``setting_keys`` (the keys that tell a store's settings apart) are named above the tables,
    ``runs`` go into json."""

    def tables(con: Console) -> None:
        note = report.settings_note(setting_keys, cells)
        if note:
            con.print(Text(note, style="bold"), soft_wrap=True)
        print_matrix(cells, con, metric, title=title, show_time=True)
        print_published(published, con)

    if format == "table":
        if output is None:
            tables(_console(console))
            return
        rec = Console(record=True, width=200, file=io.StringIO())
        tables(rec)
        text = rec.export_text()
    else:
        text = report.render(
            cells, format, metric, scenario, provenance, published, runs=runs, setting_keys=setting_keys
        )
    if output is None:
        out = console.file if console is not None else sys.stdout
        out.write(text)
        out.flush()
    else:
        with open(output, "w", encoding="utf-8", newline="") as f:
            f.write(text)


def print_compare(
    rows: Sequence[Mapping[str, Any]],
    counts: Mapping[str, int],
    name_a: str,
    name_b: str,
    setting_keys: Sequence[str] = (),
    console: Console | None = None,
) -> None:
    """``robustfl compare A B``: the cells that differ (their setting, when the stores hold
    several, or sweep point), then one line of counts."""
    console = _console(console)

    def num(x: float | None, delta: bool = False) -> str:
        if x is None:
            return "—"
        return (f"{x:+.3g}" if delta else report.format_value(x)) if x == x else "nan"

    styles = {"status": "bold magenta", "changed": "yellow", "only_a": "red", "only_b": "green"}
    words = {"status": "status", "changed": "values", "only_a": "only in A", "only_b": "only in B"}
    changed = [r for r in rows if r["change"] != "same"]
    if setting_keys:
        note = f"cells are matched within their setting: {', '.join(setting_keys)} told apart"
        console.print(Text(note, style="dim"), soft_wrap=True)
    if changed:
        show_sweep = any(r["sweep"] for r in changed)
        metrics = [("relative_drift", "drift")]
        if any(r["accuracy_a"] is not None or r["accuracy_b"] is not None for r in changed):
            metrics.append(("accuracy", "acc"))
        table = Table(title=f"A = {name_a}   B = {name_b}", title_justify="left")
        heads = ["setting" if setting_keys else "sweep"] if show_sweep else []
        for col in [*heads, "attack", "defense", "seed", "change", "status"]:
            table.add_column(Text(col), justify="right" if col == "seed" else "left")
        for _, short in metrics:
            for col in (f"{short} A", f"{short} B", f"Δ {short}"):
                table.add_column(Text(col), justify="right")
        for r in changed:
            a, b = r["status_a"], r["status_b"]
            status = f"{a} -> {b}" if a is not None and b is not None and a != b else str(a or b)
            values = []
            for m, _ in metrics:
                values += [num(r[f"{m}_a"]), num(r[f"{m}_b"]), num(r[f"{m}_delta"], delta=True)]
            table.add_row(
                *([Text(report.sweep_label(r["sweep"]))] if show_sweep else []),
                Text(str(r["attack"])),
                Text(str(r["defense"])),
                str(r["seed"]),
                Text(words[r["change"]], style=styles[r["change"]]),
                Text(status),
                *values,
            )
        console.print(table)
    line = (
        f"{len(rows)} cells: {counts['same']} unchanged, {counts['changed']} changed values, "
        f"{counts['status']} changed status, {counts['only_a']} only in A, {counts['only_b']} only in B"
    )
    line += "" if changed else " (no differences)"
    console.print(line, highlight=False, markup=False, soft_wrap=True)


class _EtaColumn(ProgressColumn):
    """Time left from the throughput so far: elapsed / cells finished here x cells left."""

    def render(self, task: Task) -> Text:
        done, t0 = task.fields.get("done_here", 0), task.fields.get("t0")
        if not done or t0 is None or task.total is None:
            return Text("eta -:--", style="dim")
        left = max(0.0, (time.monotonic() - t0) / done * (task.total - task.completed))
        m, s = divmod(int(left + 0.5), 60)
        h, m = divmod(m, 60)
        return Text(f"eta {h}:{m:02d}:{s:02d}" if h else f"eta {m}:{s:02d}", style="cyan")


class MatrixProgress:
    """Progress of a matrix: cells done/total, running, failed, time left.

    Use as a context manager; ``start(total, done=0)`` (``done``: cells already in the store),
    then ``cell_started(label)`` and ``cell_finished(cell)`` as cells go. Cells reported finished
    before the first ``cell_started`` count as resumed from the store: they advance the bar but
    not the throughput behind the time-left estimate. With ``quiet=True`` it prints nothing but
    still counts (``done``, ``running``, ``failed``, ``diverged``).
    """

    def __init__(self, console: Console | None = None, quiet: bool = False, transient: bool = False) -> None:
        self.quiet = quiet
        self.total = self.done = self.running = self.failed = self.diverged = 0
        self._done_here = 0
        self._started = False
        self._t0 = time.monotonic()
        self._last = ""
        self._task: TaskID | None = None
        self._progress: Progress | None = None
        if not quiet:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("[bold]cells"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                _EtaColumn(),
                TextColumn("{task.fields[last]}", style="dim", markup=False),
                console=_console(console),
                transient=transient,
            )

    def __enter__(self) -> MatrixProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._refresh()
            self._progress.stop()

    def start(self, total: int, done: int = 0) -> None:
        self.total, self.done = int(total), int(done)
        self._t0 = time.monotonic()
        if self._progress is not None:
            self._task = self._progress.add_task(
                "cells", total=self.total, completed=self.done, **self._fields()
            )

    def cell_started(self, label: str) -> None:
        if not self._started:  # cells finished before the first start were resumed from the store:
            self._started = True  # measure the throughput from here
            self._t0, self._done_here = time.monotonic(), 0
        self.running += 1
        self._last = str(label)
        self._refresh()

    def cell_finished(self, cell: Cell) -> None:
        self.running = max(0, self.running - 1)
        self.done += 1
        self._done_here += 1
        self.failed += cell.status == "failed"
        self.diverged += cell.status == "diverged"
        self._last = f"{cell.attack} vs {cell.defense} seed {cell.seed}: {cell.status}"
        self._refresh()

    def _fields(self) -> dict[str, Any]:
        status = f"running {self.running}"
        if self.diverged:
            status += f"  [red]diverged {self.diverged}[/]"
        if self.failed:
            status += f"  [magenta]failed {self.failed}[/]"
        return {"status": status, "last": self._last, "done_here": self._done_here, "t0": self._t0}

    def _refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.done, **self._fields())
