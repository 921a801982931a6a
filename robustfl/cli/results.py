"""``robustfl report`` and ``robustfl compare``: a results store shown, two stores compared."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ConfigError
from ..outputs import check_outputs, write_text

SUFFIXES = {".csv": "csv", ".json": "json", ".md": "markdown", ".markdown": "markdown", ".html": "html",
            ".htm": "html"}


def report_format(given: str | None, output: str | None) -> str:
    """--format, else the one --output's suffix names, else the table; a format that contradicts
    the suffix (--format csv --output r.html) is refused."""
    implied = SUFFIXES.get(Path(output).suffix.lower()) if output else None
    if given is not None and implied is not None and given != implied:
        raise ConfigError(f"--format {given} does not match --output {output!r} (a {implied} file name)")
    return given or implied or "table"


def cmd_report(args: argparse.Namespace) -> int:
    """A results store as a table, CSV, JSON, Markdown or one HTML page, beside published tables."""
    from ..reporting.published import compare_published, match_tables, scenario_name
    from ..reporting.store_view import load_store
    from . import render

    if not Path(args.store).is_file():
        raise ConfigError(f"store {args.store!r} does not exist")
    check_outputs({"--output": args.output}, {"the store": args.store})
    args.format = report_format(args.format, args.output)
    # Every setting the store holds, kept apart: the cells' sweep points carry the keys that differ.
    view = load_store(args.store)
    cells = view.cells
    tables = match_tables(view.scenario, view.provenance, args.published)
    ran = scenario_name(view.scenario, view.provenance)
    published = [compare_published(cells, t, ran) for t in tables]
    for comp in published:
        if comp.other_scenario and not args.quiet and args.format != "csv":  # CSV holds no comparison
            print(
                f"robustfl: warning: published table '{comp.table.name}' is for scenario "
                f"'{comp.table.scenario}'; {args.store} ran '{ran}'",
                file=sys.stderr,
            )
    if args.format == "html":  # one self-contained page: heatmap, tables, curves, provenance
        from ..reporting.page import page

        text = page(
            cells,
            view.scenario,
            view.provenance,
            title=f"robustfl results: {Path(args.store).name}",
            published=published,
            runs=view.runs,
            setting_keys=view.keys,
            convergence=view.convergence,
        )
        if args.output:
            write_text("--output", args.output, text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    else:
        render.print_report(
            cells,
            args.format,
            output=args.output,
            scenario=view.scenario,
            provenance=view.provenance,
            published=published,
            runs=view.runs,
            setting_keys=view.keys,
            title=str(args.store),
            convergence=view.convergence,
        )
    if args.output and not args.quiet:
        render.print_note(f"wrote {args.output}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """What changed, cell by cell, between two stores."""
    from ..reporting.compare import compare_store_settings, counts, differences_note
    from . import render

    for path in (args.store_a, args.store_b):
        if not Path(path).is_file():
            raise ConfigError(f"store {path!r} does not exist")
    rows, keys, differ = compare_store_settings(args.store_a, args.store_b)
    if differ:
        render.print_note(differences_note(differ))
    render.print_compare(rows, counts(rows), args.store_a, args.store_b, keys)
    return 0
