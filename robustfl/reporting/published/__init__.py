"""Published tables as data: the numbers a paper reports, beside what a store measured.

:mod:`.tables` reads and checks the TOML files (one table of one paper each) and picks the tables
for a store (:func:`match_tables`); :mod:`.comparison` sets a store's cells beside a table
(:func:`compare_published`: measured vs published per cell, Kendall's tau per column);
:mod:`.text` writes a comparison as table rows, Markdown and HTML. Every name is importable from
here: ``from robustfl.reporting import published; published.compare_published(...)``.
"""

from __future__ import annotations

from .comparison import (
    CellComparison,
    Comparison,
    Measured,
    RankAgreement,
    Section,
    compare_published,
    kendall,
    mean_text,
    measure,
    t_halfwidth,
)
from .tables import (
    BACKDOOR_METRICS,
    METRICS,
    Paper,
    PublishedTable,
    load_table,
    load_tables,
    match_tables,
    parse_table,
    scenario_name,
    table_dirs,
)
from .text import (
    FLAG,
    FLAGGED_COLOUR,
    HEADERS,
    attack_text,
    header_lines,
    row_cells,
    summary_line,
    to_html,
    to_markdown,
)

__all__ = [
    "BACKDOOR_METRICS",
    "FLAG",
    "FLAGGED_COLOUR",
    "HEADERS",
    "METRICS",
    "CellComparison",
    "Comparison",
    "Measured",
    "Paper",
    "PublishedTable",
    "RankAgreement",
    "Section",
    "attack_text",
    "compare_published",
    "header_lines",
    "kendall",
    "load_table",
    "load_tables",
    "match_tables",
    "mean_text",
    "measure",
    "parse_table",
    "row_cells",
    "scenario_name",
    "summary_line",
    "t_halfwidth",
    "table_dirs",
    "to_html",
    "to_markdown",
]
