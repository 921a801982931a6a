"""``robustfl bound``: runs :func:`robustfl.theory.bound.run_bound` with a progress bar, writes the
JSON and the plot, and prints the report (``bound_render``); the theory package returns data only.
"""

from __future__ import annotations

import argparse

from ..outputs import check_outputs
from .common import write_json


def cmd_bound(args: argparse.Namespace) -> int:
    """``robustfl bound [SCENARIO] [--json PATH] [--plot PATH]``: 0 when the checks ran."""
    from ..scenario import load_scenario
    from ..theory.bound import DEFAULT_SCENARIO, run_bound
    from . import bound_render

    sc = load_scenario(args.scenario or DEFAULT_SCENARIO, args.overrides)
    check_outputs({"--json": args.json, "--plot": args.plot}, {"the scenario": sc.path})
    quiet = bool(args.quiet)
    with bound_render.BoundProgress(quiet=quiet) as progress:
        report = run_bound(
            sc, device=args.device or "cpu", plugins=tuple(args.plugin or []), progress=progress
        )
    if args.json:
        write_json(args.json, report)
    if args.plot:
        from ..theory.plot import plot_report

        plot_report(report, args.plot)
    bound_render.print_bound(report, quiet=quiet)
    return 0
