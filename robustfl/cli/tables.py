"""Rich building blocks of the terminal tables: the band colours, a summary's coloured text, and
tables fitted to the console's width.

The colours are the one fixed scale of every view (``report.BANDS``: green < 0.1, yellow < 0.5,
dark orange < 1, red >= 1 or diverged); ``failed`` cells are magenta; a cell run outside its
rule's guarantee carries a ``†``. A table wider than the console comes in parts that fit it
(:func:`fit_tables`), each repeating the row names, every column at least as wide as its longest
word (no name is broken mid-word). Every label is plain text (``alie[z=1]`` is not rich markup).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from robustfl import reporting as report

STYLES = {
    "safe": "green",
    "weak": "yellow",
    "poor": "dark_orange",
    "broken": "red",
    "diverged": "bold red",
    "failed": "magenta",
}
STATUS_STYLES = {"ok": "green", "diverged": "bold red", "failed": "magenta"}


class StdoutConsole(Console):
    """rich's Console on stdout, except that a reader who left (``robustfl report | head``) ends
    the command quietly with exit 0 (:func:`robustfl.cli.main.entry`), not rich's exit 1, which
    the exit codes reserve for a failed cell."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def get_console(console: Console | None) -> Console:
    """``console``, else a new one on stdout."""
    return console if console is not None else StdoutConsole()


def cell_text(group: Mapping[str, Any] | None, seconds: float | None = None) -> Text:
    """A summary's "mean ± 95 % half-width" in its band's colour; with ``seconds``, a dim second line."""
    if group is None:
        return Text("—", style="dim")
    text = Text(group["text"], style=STYLES.get(report.severity(group) or "", ""))
    if group["outside_guarantee"]:
        text.append(" " + report.DAGGER, style="bold")
    if seconds is not None:
        text.append("\n" + report.format_seconds(seconds), style="dim")
    return text


def entry_text(entry: Mapping[str, Any] | None) -> Text:
    """A worst case or an axis view's entry, coloured by the band of its worst value; a worst
    case's κ̂ on a line of its own."""
    if entry is None:
        return Text("—", style="dim")
    kappa = report.kappa_text(entry.get("kappa"))
    head = entry["text"].removesuffix(" " + kappa) if kappa else entry["text"]
    text = Text(head, style=STYLES.get(entry["severity"] or "", ""))
    if entry.get("outside_guarantee"):
        text.append(" " + report.DAGGER, style="bold")
    if kappa and head != entry["text"]:
        text.append("\n" + kappa)
    return text


def versus_text(entry: Mapping[str, Any] | None) -> Text:
    """A worst case's "worst_case vs best fixed" comparison on two lines (``alie 0.43 κ̂ 2.1`` /
    ``Δ +0.11, κ̂×4.4``), or a dim "—" without one."""
    versus = entry.get("vs_fixed") if entry is not None else None
    return Text("\n".join(report.versus_lines(versus))) if versus else Text("—", style="dim")


@dataclass
class Column:
    """One column of a view: its header, footer and body cells (for :func:`fit_tables`); ``extra``:
    more footer rows under the first (the first column's name them; a shorter list reads "—")."""

    header: Text
    footer: Text | None
    cells: list[Text]
    justify: JustifyMethod = "right"
    style: str = ""
    extra: list[Text] = field(default_factory=list)

    def texts(self) -> list[Text]:
        return [self.header, *([self.footer] if self.footer is not None else []), *self.extra, *self.cells]

    def extra_row(self, i: int) -> Text:
        return self.extra[i] if i < len(self.extra) else Text("—", style="dim")


def _longest_word(texts: Iterable[Text | str]) -> int:
    plain = (t.plain if isinstance(t, Text) else t for t in texts)
    return max((cell_len(w) for p in plain for w in p.split()), default=1)


def _longest_line(texts: Iterable[Text]) -> int:
    return max((cell_len(line) for t in texts for line in t.plain.splitlines()), default=1)


def _column_width(col: Column, footer: bool = True) -> int:
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


def fit_tables(
    heading: str | None,
    note: str,
    first: Column,
    columns: Sequence[Column],
    width: int | None,
    what: str = "defense",
) -> list[Table]:
    """One table of ``first`` and ``columns``; with ``width`` (the terminal's), as many tables as
    it takes to fit it, each repeating ``first`` (the row names) over a run of ``columns``, each
    column as wide as its longest word at least (a name is never broken). Split in parts, the
    footer row (the worst cases) becomes a table of its own, one row per column, after the parts;
    the caption goes under the last table. With ``first.extra`` (more footer rows), the footer
    rows come as bold and plain rows under a rule instead of rich's one footer row."""

    def table(
        title: str | None, caption: str | None, cols: Sequence[Column], fixed: bool, footer: bool
    ) -> Table:
        words = _longest_word([x for x in (title, caption) if x])
        rows = footer and first.footer is not None and bool(first.extra)  # several footer rows
        t = Table(
            title=title,
            caption=caption,
            caption_justify="left",
            header_style="bold",
            show_footer=footer and first.footer is not None and not rows,
            min_width=min(width, words + 4) if fixed and width else None,
        )
        for c in (first, *cols):
            # unsplit, a narrow terminal wraps a cell onto two lines ("0.512 ±" / "0.045") rather than cut it
            t.add_column(
                c.header,
                (c.footer or "") if footer and not rows else "",
                justify=c.justify,
                style=c.style,
                overflow="fold",
                width=_column_width(c, footer) if fixed else None,
            )
        n = len(first.cells)
        for i in range(n):
            t.add_row(first.cells[i], *(c.cells[i] for c in cols), end_section=rows and i == n - 1)
        if rows and first.footer is not None:
            t.add_row(first.footer, *(c.footer or Text("—", style="dim") for c in cols), style="bold")
            for k, name in enumerate(first.extra):
                t.add_row(name, *(c.extra_row(k) for c in cols))
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
        for name in first.extra:
            t.add_column(Text(name.plain), overflow="fold")
        for c in columns:
            footer = c.footer if c.footer is not None else Text("—", style="dim")
            t.add_row(c.header, footer, *(c.extra_row(k) for k in range(len(first.extra))))
        out.append(t)
    if note:  # the caption under the last table, wrapped at the terminal's width, not the table's
        grid = Table.grid()
        grid.add_column(overflow="fold")
        grid.add_row(out[-1])
        grid.add_row(Text(note, style="table.caption"))
        out[-1] = grid
    return out
