"""``robustfl report`` and ``robustfl compare`` in the terminal: the store's tables with the
published comparisons beside them (or the CSV/JSON/Markdown/HTML text), and what changed between
two stores.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from robustfl import reporting as report
from robustfl.reporting import published as _published
from robustfl.simulation.results import Cell

from .matrix_view import print_matrix
from .tables import get_console


def published_tables(comparisons: Sequence[_published.Comparison]) -> list[RenderableType]:
    """Per published table: its header lines, the measured-vs-published cells (flagged ones in
    orange) and Kendall's tau per attack (:mod:`robustfl.reporting.published`)."""
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
    console = get_console(console)
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
            tables(get_console(console))
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
        from ..outputs import write_text

        write_text("--output", output, text)


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
    console = get_console(console)

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
        heads = ["setting" if setting_keys else "sweep"] if show_sweep else []
        # a narrow terminal (or a pipe: 80 columns) gets one table per metric, and the names wrap
        # while each number stays whole (rich would cut values to "0.4…" or crop columns)
        groups = [metrics] if console.width >= 120 or len(metrics) == 1 else [[m] for m in metrics]
        for group in groups:
            table = Table(title=f"A = {name_a}   B = {name_b}", title_justify="left")
            for col in [*heads, "attack", "defense", "seed", "change", "status"]:
                table.add_column(Text(col), justify="right" if col == "seed" else "left", overflow="fold")
            for m, short in group:
                for col, key, delta in ((f"{short} A", f"{m}_a", False), (f"{short} B", f"{m}_b", False),
                                        (f"Δ {short}", f"{m}_delta", True)):
                    width = max(len(num(r[key], delta)) for r in changed)
                    table.add_column(Text(col), justify="right", overflow="fold", min_width=width)
            for r in changed:
                a, b = r["status_a"], r["status_b"]
                status = f"{a} -> {b}" if a is not None and b is not None and a != b else str(a or b)
                values = []
                for m, _ in group:
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
        f"{len(rows)} cell{'' if len(rows) == 1 else 's'}: {counts['same']} unchanged, "
        f"{counts['changed']} changed values, "
        f"{counts['status']} changed status, {counts['only_a']} only in A, {counts['only_b']} only in B"
    )
    line += "" if changed else " (no differences)"
    console.print(line, highlight=False, markup=False, soft_wrap=True)
