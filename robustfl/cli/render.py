"""Terminal output of robustfl (rich): the one place the commands print from.

With the modules it gathers, the only part of robustfl that imports rich (``robustfl/cli``); a thin
layer: the numbers come from :func:`robustfl.reporting.summarize`, so the table, the
CSV/Markdown/HTML reports and the heatmap agree.

* :mod:`.tables` -- the colour bands, a summary's coloured text, tables fitted to the console;
* :mod:`.matrix_view` -- the attack x defense tables, the sweep views, one run's summary;
* :mod:`.report_view` -- ``robustfl report`` (with the published comparisons) and ``compare``;
* :mod:`.progress` -- the matrix's progress line and its time left (:class:`CellTimes`);
* here -- one-line notes, listings and errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .matrix_view import (
    matrix_table,
    matrix_tables,
    print_cell,
    print_convergence,
    print_matrix,
    print_sweep,
    sweep_tables,
)
from .progress import CellTimes, MatrixProgress
from .report_view import print_compare, print_published, print_report, published_tables
from .tables import STATUS_STYLES, STYLES, get_console

__all__ = [
    "STATUS_STYLES", "STYLES", "CellTimes", "MatrixProgress", "matrix_table", "matrix_tables", "print_cell",
    "print_compare", "print_convergence", "print_error", "print_listing", "print_matrix", "print_note",
    "print_published", "print_report", "print_sweep", "published_tables", "sweep_tables",
]


def print_note(msg: str, console: Console | None = None) -> None:
    """A dim informational line (where results went, what was validated)."""
    get_console(console).print(Text(str(msg), style="dim"), soft_wrap=True)


def print_listing(listing: Mapping[str, Sequence[Mapping[str, str]]], console: Console | None = None) -> None:
    """``robustfl list``: one table per kind (attacks, defenses, ...) of names and origins."""
    console = get_console(console)
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
