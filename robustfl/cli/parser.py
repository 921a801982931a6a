"""The argument parser of ``robustfl``: every subcommand and its options (no command logic).

A usage error raises :class:`ArgError` with argparse's one-line message (``main`` prints it and
returns 2) instead of exiting.
"""

from __future__ import annotations

import argparse
from typing import Any


class ArgError(Exception):
    """Bad usage: argparse's message, printed as one line (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (raised so main() can return 2)
        option = message.partition("argument ")[2].partition(":")[0].split("/")[-1]
        if message.endswith("expected one argument") and option.startswith("--"):
            message += f" (for a value that starts with '-', write {option}=VALUE)"
        raise ArgError(f"{self.prog}: {message}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="PATH_OR_MODULE",
        help="load attacks/defenses/tasks from a file or module (repeatable)",
    )
    p.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where tensors live (default cpu)"
    )
    p.add_argument("--quiet", action="store_true", help="print only errors and the final table")


def _scenario_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    if optional:
        p.add_argument(
            "scenario", nargs="?", default=None, help="scenario name (under scenarios/) or a TOML path"
        )
    else:
        p.add_argument("scenario", help="scenario name (under scenarios/) or a TOML path")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        dest="overrides",
        help="override a scenario value (repeatable), e.g. --set federation.clients=50; attack.P / "
        "defense.P also set parameter P of the attack or defense chosen (run: --attack; matrix: every "
        "entry that has P, refused if none has)",
    )


LISTS = ["attacks", "defenses", "tasks", "algorithms", "sharing", "scenarios"]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="robustfl", description="Byzantine-robustness evaluation for federated learning.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", help="run one cell (the scenario's [attack] and [defense])")
    _scenario_args(p)
    p.add_argument(
        "--attack",
        metavar="NAME",
        help="attack to run (default: the scenario's [attack]); a label of a matrix.attacks entry "
        "picks that entry; see `robustfl list attacks`",
    )
    p.add_argument(
        "--defense",
        metavar="NAME",
        help="defense to run (default: the scenario's [defense]); a label of a matrix.defenses entry "
        "picks that entry; see `robustfl list defenses`",
    )
    p.add_argument("--seed", type=int, default=0, metavar="N", help="the cell's seed (default 0)")
    p.add_argument("--json", metavar="PATH", help="write the cell (rounds and final metrics) as JSON")
    p.add_argument(
        "--allow-outside-guarantee",
        action="store_true",
        help="run a rule below its min_clients (flagged) instead of refusing",
    )
    _common(p)

    p = sub.add_parser("matrix", help="run an attack x defense x seed matrix (resumable)")
    _scenario_args(p)
    p.add_argument(
        "--attacks",
        help="comma-separated labels of the scenario's matrix.attacks entries or attack names "
        "(default: the scenario's)",
    )
    p.add_argument(
        "--defenses",
        help="comma-separated labels of the scenario's matrix.defenses entries or defense names "
        "(default: the scenario's)",
    )
    p.add_argument("--seeds", help="comma-separated seeds (default: the scenario's)")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local processes (default) or Ray tasks (needs the ray extra)",
    )
    p.add_argument("--address", help="Ray cluster address (default: a local Ray instance)")
    p.add_argument("--store", help="SQLite results store (default: runs/<scenario>.db)")
    p.add_argument("--json", metavar="PATH", help="write the scenario, provenance and every cell as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a heatmap PNG")
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=None,
        metavar="S",
        help="record a cell still running after S seconds as failed and go on",
    )
    p.add_argument(
        "--allow-outside-guarantee",
        action="store_true",
        help="run rules below their min_clients (flagged in the table)",
    )
    _common(p)

    p = sub.add_parser("bound", help="check FLTrust's error bound (Theorem 1) empirically")
    _scenario_args(p, optional=True)
    p.add_argument("--json", metavar="PATH", help="write the bound check's results as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a PNG of the measured error against the bound")
    _common(p)

    p = sub.add_parser(
        "kappa", help="measure each rule's (f, kappa)-robustness with a worst-case attack search"
    )
    _scenario_args(p, optional=True)
    p.add_argument(
        "--rules", metavar="R1,R2", help="rules: names, or compositions as nnm+krum (default: 11 rules)"
    )
    p.add_argument("--n", type=int, help="clients per round for the input families (default 20)")
    p.add_argument("--f", metavar="F1,F2", help="Byzantine counts, f-hat = f (default 2,4,6,8)")
    p.add_argument("--misspecified", metavar="F:F_HAT", help="extra settings with f-hat != f, e.g. 4:2")
    p.add_argument("--families", metavar="NAMES",
                   help="input families: isotropic, anisotropic, clustered, lower_bound (default all)")
    p.add_argument("--budget", type=int, default=1000, help="rule evaluations per search (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the inputs and the search (default 0)")
    p.add_argument(
        "--dim", type=int, help="coordinates of the input families' rows (default 100)"
    )
    p.add_argument("--json", metavar="PATH", help='write {"rows": [...]} as JSON')
    p.add_argument("--save-dir", default="runs/kappa", help="where inputs above a proven bound are saved")
    p.add_argument("--allow-outside-guarantee", action="store_true",
                   help="run rules outside their precondition (flagged) instead of refusing them")
    _common(p)

    p = sub.add_parser("validate", help="check a scenario without running it")
    _scenario_args(p)
    p.add_argument(
        "--allow-outside-guarantee",
        action="store_true",
        help="accept rules below their min_clients (a matrix would run them, flagged)",
    )
    _common(p)

    p = sub.add_parser(
        "list", help="the catalogue: attacks, defenses (with pre-aggregators), tasks, algorithms, ..."
    )
    p.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=["all", *LISTS],
        help="which part of the catalogue (default: all)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print [{"name", "origin", "kind", "description", "paper"}] ({part: [...]} for all)',
    )
    _common(p)

    p = sub.add_parser("show", help="one attack, defense, task, algorithm or sharing scheme in full")
    p.add_argument(
        "name",
        help="its name, as `robustfl list` shows it; KIND:NAME picks one kind (attack, defense, pre, "
        "task, algorithm, sharing), e.g. algorithm:fedavg",
    )
    p.add_argument("--json", action="store_true", help="print it as one JSON object")
    _common(p)

    p = sub.add_parser("report", help="show a results store")
    p.add_argument("store", help="the SQLite results store a matrix wrote")
    p.add_argument(
        "--format",
        default=None,
        choices=["table", "csv", "json", "markdown", "html"],
        help="output format (default: from --output's suffix, .csv .json .md .html; else table)",
    )
    p.add_argument("--output", metavar="PATH", help="write to PATH instead of standard output")
    p.add_argument(
        "--published",
        default="auto",
        metavar="NAME|auto|none",
        help="published tables to set beside the store (scenarios/published/NAME.toml, comma-separated); "
        "auto (default): those matching the store's scenario; none: no comparison",
    )
    _common(p)

    p = sub.add_parser("compare", help="what changed, cell by cell, between two stores")
    p.add_argument("store_a", help="the first results store (A)")
    p.add_argument("store_b", help="the second results store (B)")
    _common(p)

    p = sub.add_parser("plugin", help="plugin tools")
    psub = p.add_subparsers(dest="plugin_command", required=True, parser_class=_Parser)
    pn = psub.add_parser("new", help="write an installable plugin package")
    pn.add_argument("name", help="the plugin's name (a Python identifier)")
    pn.add_argument("--kind", required=True, choices=["attack", "defense"], help="what the plugin provides")
    pn.add_argument("--dir", default=".", help="where to write the package (default: .)")
    _common(pn)
    return parser
