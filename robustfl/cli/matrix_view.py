"""The attack x defense tables in the terminal: ``robustfl matrix`` / ``report``, one run's summary.

The numbers come from :func:`robustfl.reporting.summarize`, so the table, the
CSV/Markdown/HTML reports and the heatmap agree: ± is the half-width of the 95 % Student-t
interval over seeds everywhere, stated in each table's caption with the colour bands. A store
holding several settings shows one table per setting, titled with the keys that differ; a sweep
adds one view per sweep key (:func:`sweep_tables`). A table wider than the console comes in parts
(:func:`robustfl.cli.tables.fit_tables`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from robustfl import reporting as report
from robustfl.simulation import convergence as convergence_mod
from robustfl.simulation.results import METRIC_KEYS, Cell

from .tables import STATUS_STYLES, Column, cell_text, entry_text, fit_tables, get_console, versus_text


def time_note(cells: Sequence[Cell]) -> str:
    """The caption's line on the cells' total and mean compute time ("" when none ran)."""
    ran = [c.elapsed_s for c in cells if c.elapsed_s]
    if not ran:
        return ""
    return f"\ncompute time {sum(ran):.1f} s over {len(ran)} cells ({sum(ran) / len(ran):.2f} s per cell)"


def matrix_tables(
    cells: Iterable[Cell],
    metric: str = "relative_drift",
    title: str | None = None,
    show_time: bool = False,
    width: int | None = None,
    convergence: Sequence[Mapping[str, Any]] = (),
) -> list[Table]:
    """One table per sweep point (a single one when the cells carry no sweep values), with a
    "worst case" footer row (the worst attack per defense, with its κ̂) when there are several
    attacks, and a "worst_case vs best fixed" row under it where the ``worst_case`` attack ran
    (:mod:`robustfl.reporting.kappa_hat`); with
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
            note += time_note([c for c in cells if report.sweep_label(c.sweep) == point])
        heading = " | ".join(t for t in (title, point) if t) or None
        footer = len(attacks) > 1
        entries = [worst[(point, d)] for d in defenses if (point, d) in worst] if footer else []
        kappa_note = report.worst_notes(entries)  # what κ̂ and the worst_case gap are, said once
        if kappa_note:
            note += "\n" + kappa_note
        unsettled = report.convergence_note(convergence, point, with_criterion=False)
        if unsettled:  # the criterion itself: one full-width line under the tables (print_matrix)
            note += "\n" + unsettled
        versus = any(e["vs_fixed"] for e in entries)  # a "worst_case vs best fixed" row
        first = Column(
            Text("attack \\ defense"),
            Text(report.WORST_ROW) if footer else None,
            [Text(a) for a in attacks],
            justify="left",
            style="bold",
            extra=[Text(report.VERSUS_ROW)] if versus else [],
        )
        columns = [
            Column(
                Text(d),
                entry_text(worst.get((point, d))) if footer else None,
                [cell_text(summary.get((point, a, d)), times.get((point, a, d))) for a in attacks],
                extra=[versus_text(worst.get((point, d)))] if versus else [],
            )
            for d in defenses
        ]
        tables += fit_tables(heading, note, first, columns, width)
    return tables


def sweep_tables(
    cells: Iterable[Cell], metric: str = "relative_drift", title: str | None = None, width: int | None = None
) -> list[Table]:
    """One table per sweep key (none without a sweep): rows the key's values, columns the
    defenses, each entry the worst case over attacks summarised over the other sweep axes
    (:func:`robustfl.reporting.axis_views`), and a "worst case" footer over all points;
    split to fit ``width`` as :func:`matrix_tables` does."""
    tables = []
    for key, view in report.axis_views(cells, metric).items():
        heading = " | ".join(t for t in (title, f"by {key}") if t)
        note = report.axis_caption(view, metric)
        first = Column(
            Text(f"{key} \\ defense"),
            Text(report.WORST_ROW),
            [Text(v) for v in view["values"]],
            justify="left",
            style="bold",
        )
        columns = [
            Column(
                Text(d),
                entry_text(view["worst"][d]),
                [entry_text(view["rows"].get((v, d))) for v in view["values"]],
            )
            for d in view["defenses"]
        ]
        tables += fit_tables(heading, note, first, columns, width)
    return tables


def print_sweep(
    cells: Iterable[Cell],
    console: Console | None = None,
    metric: str = "relative_drift",
    title: str | None = None,
) -> None:
    """The per-axis views of a sweep (:func:`sweep_tables`); nothing when the cells carry no sweep."""
    console = get_console(console)
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
    console = get_console(console)
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
        get_console(console).print(Text(text, style="yellow"), soft_wrap=True)


def print_cell(cell: Cell, console: Console | None = None) -> None:
    """A short summary of one run: who against whom, status, the final metrics."""
    console = get_console(console)
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
