"""Terminal output: the attack x defense table, matrix progress, one run's summary, errors.

With bound_render.py, the only modules of robustfl that import rich; a thin layer: the numbers come from
:func:`robustfl.simulation.report.summarize`, so the table, the CSV/Markdown/HTML reports and
the heatmap agree: ± is the half-width of the 95 % Student-t interval over seeds everywhere, and
the colours are the one fixed scale of every view (``report.BANDS``: green < 0.1, yellow < 0.5,
dark orange < 1, red >= 1 or diverged; the HTML page and the heatmap use
``report.BAND_COLOURS`` for the same bands), stated in each table's caption; ``failed`` cells
are magenta; a cell run outside its rule's guarantee carries a ``†`` explained in the caption.
A store holding several settings shows one table per setting, titled with the keys that differ.
A table wider than the console comes in parts that fit it, each repeating the row names, every
column at least as wide as its longest word (no name is broken mid-word). Matrix progress is one
live line fitted to the console, or plain lines on stderr when the output is not a terminal; its
time left is learned per attack and defense (:class:`CellTimes`).
Every label is shown as plain text (an attack labelled ``alie[z=1]`` is not rich markup).
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from rich.cells import cell_len
from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TaskID
from rich.table import Table
from rich.text import Text

from robustfl.simulation import convergence as convergence_mod
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


@dataclass
class _Column:
    """One column of a view: its header, footer and body cells (for :func:`_fit_tables`)."""

    header: Text
    footer: Text | None
    cells: list[Text]
    justify: JustifyMethod = "right"
    style: str = ""

    def texts(self) -> list[Text]:
        return [self.header, *([self.footer] if self.footer is not None else []), *self.cells]


def _longest_word(texts: Iterable[Text | str]) -> int:
    plain = (t.plain if isinstance(t, Text) else t for t in texts)
    return max((cell_len(w) for p in plain for w in p.split()), default=1)


def _longest_line(texts: Iterable[Text]) -> int:
    return max((cell_len(line) for t in texts for line in t.plain.splitlines()), default=1)


def _column_width(col: _Column, footer: bool = True) -> int:
    """The width a column gets when a table is split to fit: its longest line (the footer may wrap
    at a space) but never less than its longest word, so no name is broken."""
    texts = col.texts() if footer else [col.header, *col.cells]
    return max(_longest_word(texts), _longest_line([col.header, *col.cells]))


def _table_width(widths: Iterable[int]) -> int:
    """A boxed table's width: each column's content plus its padding (2) and a rule (1), one more rule."""
    return sum(w + 3 for w in widths) + 1


def _chunks(widths: Sequence[int], budget: int) -> list[range]:
    """Consecutive columns packed into as few parts as fit ``budget`` (at least one column each),
    spread as evenly as that number of parts allows."""
    parts: list[list[int]] = [[]]
    used = 0
    for j, w in enumerate(widths):
        if parts[-1] and used + w + 3 > budget:
            parts.append([])
            used = 0
        parts[-1].append(j)
        used += w + 3
    n, k = len(parts), len(widths)
    if n > 1:  # even sizes when they fit: 5 + 4 + 4 rather than 6 + 6 + 1
        size, extra = divmod(k, n)
        even, start = [], 0
        for i in range(n):
            stop = start + size + (i < extra)
            even.append(range(start, stop))
            start = stop
        if all(sum(widths[j] + 3 for j in r) <= budget for r in even):
            return even
    return [range(p[0], p[-1] + 1) for p in parts]


def _fit_tables(
    heading: str | None,
    note: str,
    first: _Column,
    columns: Sequence[_Column],
    width: int | None,
    what: str = "defense",
) -> list[Table]:
    """One table of ``first`` and ``columns``; with ``width`` (the terminal's), as many tables as
    it takes to fit it, each repeating ``first`` (the row names) over a run of ``columns``, each
    column as wide as its longest word at least (a name is never broken). Split in parts, the
    footer row (the worst cases) becomes a table of its own, one row per column, after the parts;
    the caption goes under the last table."""

    def table(
        title: str | None, caption: str | None, cols: Sequence[_Column], fixed: bool, footer: bool
    ) -> Table:
        words = _longest_word([x for x in (title, caption) if x])
        t = Table(
            title=title,
            caption=caption,
            caption_justify="left",
            header_style="bold",
            show_footer=footer and first.footer is not None,
            min_width=min(width, words + 4) if fixed and width else None,
        )
        for c in (first, *cols):
            # unsplit, a narrow terminal wraps a cell onto two lines ("0.512 ±" / "0.045") rather than cut it
            t.add_column(
                c.header,
                (c.footer or "") if footer else "",
                justify=c.justify,
                style=c.style,
                overflow="fold",
                width=_column_width(c, footer) if fixed else None,
            )
        for i in range(len(first.cells)):
            t.add_row(first.cells[i], *(c.cells[i] for c in cols))
        return t

    natural = _table_width(_longest_line(c.texts()) for c in (first, *columns))
    if width is None or natural <= width or not columns:
        return [table(heading, note, columns, fixed=False, footer=True)]
    budget = width - _table_width([_column_width(first)])
    with_footer = _chunks([_column_width(c) for c in columns], budget)
    if len(with_footer) == 1:
        return [table(heading, note, columns, fixed=True, footer=True)]
    widths = [_column_width(c, footer=False) for c in columns]
    parts = _chunks(widths, budget)
    # the footer stays under each part unless it alone would take more parts
    worst = first.footer is not None and len(with_footer) > len(parts)
    if not worst:
        parts, widths = with_footer, [_column_width(c) for c in columns]
    out = []
    for r in parts:
        where = f"{what}s {r.start + 1}-{r.stop} of {len(columns)}"
        title = f"{heading} ({where})" if heading else where
        out.append(table(title, None, [columns[j] for j in r], fixed=True, footer=not worst))
    if worst and first.footer is not None:
        label = f"{first.footer.plain} per {what}"
        t = Table(
            title=f"{heading}: {label}" if heading else label,
            header_style="bold",
            min_width=min(width, _longest_word([heading or ""]) + 4),
        )
        t.add_column(Text(what), style="bold", overflow="fold")
        t.add_column(Text(first.footer.plain), overflow="fold")
        for c in columns:
            t.add_row(c.header, c.footer if c.footer is not None else Text("—", style="dim"))
        out.append(t)
    if note:  # the caption under the last table, wrapped at the terminal's width, not the table's
        grid = Table.grid()
        grid.add_column(overflow="fold")
        grid.add_row(out[-1])
        grid.add_row(Text(note, style="table.caption"))
        out[-1] = grid
    return out


def matrix_tables(
    cells: Iterable[Cell],
    metric: str = "relative_drift",
    title: str | None = None,
    show_time: bool = False,
    width: int | None = None,
    convergence: Sequence[Mapping[str, Any]] = (),
) -> list[Table]:
    """One table per sweep point (a single one when the cells carry no sweep values), with a
    "worst case" footer row (the worst attack per defense) when there are several attacks; with
    ``show_time`` each cell adds a dim second line, its mean compute time over seeds, and the
    caption the cells' total and mean compute time. With ``width`` (columns), a point's table
    wider than that is split into several, each repeating the attack names over a run of the
    defenses, so that no line is longer and no name is broken mid-word. Given the clean runs'
    ``convergence`` verdicts, a point whose clean run has not converged says so in its caption
    ("clean FedAvg run not converged: ...", :mod:`robustfl.simulation.convergence`)."""
    cells = list(cells)
    summary = report.summarize(cells, metric)
    worst = report.worst_case(cells, metric)
    times = report.mean_elapsed(cells) if show_time else {}
    tables = []
    for point, attacks, defenses in report.layout(summary):
        note = report.caption({k: g for k, g in summary.items() if k[0] == point}, metric)
        if show_time:
            note += _time_note([c for c in cells if report.sweep_label(c.sweep) == point])
        unsettled = report.convergence_note(convergence, point, with_criterion=False)
        if unsettled:  # the criterion itself: one full-width line under the tables (print_matrix)
            note += "\n" + unsettled
        heading = " | ".join(t for t in (title, point) if t) or None
        footer = len(attacks) > 1
        first = _Column(
            Text("attack \\ defense"),
            Text(report.WORST_ROW) if footer else None,
            [Text(a) for a in attacks],
            justify="left",
            style="bold",
        )
        columns = [
            _Column(
                Text(d),
                _entry_text(worst.get((point, d))) if footer else None,
                [_cell_text(summary.get((point, a, d)), times.get((point, a, d))) for a in attacks],
            )
            for d in defenses
        ]
        tables += _fit_tables(heading, note, first, columns, width)
    return tables


def sweep_tables(
    cells: Iterable[Cell], metric: str = "relative_drift", title: str | None = None, width: int | None = None
) -> list[Table]:
    """One table per sweep key (none without a sweep): rows the key's values, columns the
    defenses, each entry the worst case over attacks summarised over the other sweep axes
    (:func:`robustfl.simulation.report.axis_views`), and a "worst case" footer over all points;
    split to fit ``width`` as :func:`matrix_tables` does."""
    tables = []
    for key, view in report.axis_views(cells, metric).items():
        heading = " | ".join(t for t in (title, f"by {key}") if t)
        note = report.axis_caption(view, metric)
        first = _Column(
            Text(f"{key} \\ defense"),
            Text(report.WORST_ROW),
            [Text(v) for v in view["values"]],
            justify="left",
            style="bold",
        )
        columns = [
            _Column(
                Text(d),
                _entry_text(view["worst"][d]),
                [_entry_text(view["rows"].get((v, d))) for v in view["values"]],
            )
            for d in view["defenses"]
        ]
        tables += _fit_tables(heading, note, first, columns, width)
    return tables


def print_sweep(
    cells: Iterable[Cell],
    console: Console | None = None,
    metric: str = "relative_drift",
    title: str | None = None,
) -> None:
    """The per-axis views of a sweep (:func:`sweep_tables`); nothing when the cells carry no sweep."""
    console = _console(console)
    for t in sweep_tables(cells, metric, title, width=console.width):
        console.print(t)


def matrix_table(
    cells: Iterable[Cell],
    metric: str = "relative_drift",
    title: str | None = None,
    show_time: bool = False,
    width: int | None = None,
) -> Table:
    """Rows attacks, columns defenses (first-seen order), "mean ± 95 % half-width" of the final
    metric over seeds; several sweep points (or parts of a table split to fit ``width``) come
    stacked in one grid."""
    tables = matrix_tables(cells, metric, title, show_time, width)
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
    convergence: Sequence[Mapping[str, Any]] = (),
) -> None:
    """The attack x defense tables (:func:`matrix_tables`, split to fit the console's width),
    then, when the cells carry sweep values and ``sweep`` is set, the per-axis views
    (:func:`print_sweep`); ``convergence``: the clean runs' verdicts, named under the tables
    whose clean run has not converged."""
    console = _console(console)
    cells = list(cells)
    tables = matrix_tables(
        cells, metric, title, show_time, width=console.width, convergence=convergence
    )
    if not tables:
        console.print(Text("no cells", style="dim"))
    for t in tables:
        console.print(t)
    if report.convergence_note(convergence):
        line = f"criterion: {convergence_mod.CRITERION}; {convergence_mod.ADVICE}"
        console.print(Text(line, style="yellow"))  # wrapped at words to the console's width
    if sweep:
        print_sweep(cells, console, metric, title)


def print_convergence(verdicts: Sequence[Mapping[str, Any]], console: Console | None = None) -> None:
    """``robustfl run``: "clean FedAvg run not converged: ..." in yellow when the clean run of
    the cell's setting has not converged (:mod:`robustfl.simulation.convergence`); else nothing."""
    text = report.convergence_note(verdicts)
    if text:
        _console(console).print(Text(text, style="yellow"), soft_wrap=True)


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
    convergence: Sequence[Mapping[str, Any]] = (),
) -> None:
    """``robustfl report``: the table (rich) or csv/json/markdown/html text, to ``output`` or
    stdout; ``published`` comparisons follow the table (and go into json/markdown/html);
    ``setting_keys`` (the keys that tell a store's settings apart) are named above the tables,
    ``runs`` go into json; ``convergence`` (the clean runs' verdicts) goes into every format."""

    def tables(con: Console) -> None:
        note = report.settings_note(setting_keys, cells)
        if note:
            con.print(Text(note, style="bold"), soft_wrap=True)
        print_matrix(cells, con, metric, title=title, show_time=True, convergence=convergence)
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
            cells,
            format,
            metric,
            scenario,
            provenance,
            published,
            runs=runs,
            setting_keys=setting_keys,
            convergence=convergence,
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
        self.console = _console(console)
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
