"""robustfl's command line (argparse). Exit codes: 0 done, 1 a run or cell failed, 2 bad input.

Every command works in-process as ``robustfl.cli.main(argv) -> int``. Bad usage or bad input
gets one line on stderr naming the bad value and what was expected, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RobustFLError


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (raised so main() can return 2)
        raise _ArgError(f"{self.prog}: {message}")


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
        p.add_argument("scenario", nargs="?", default=None, help="scenario name or TOML path")
    else:
        p.add_argument("scenario", help="scenario name (under scenarios/) or a TOML path")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        dest="overrides",
        help="override a scenario value (repeatable), e.g. --set federation.clients=50",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="robustfl", description="Byzantine-robustness evaluation for federated learning.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", help="run one cell (the scenario's [attack] and [defense])")
    _scenario_args(p)
    p.add_argument("--attack")
    p.add_argument("--defense")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--allow-outside-guarantee", action="store_true")
    _common(p)

    p = sub.add_parser("matrix", help="run an attack x defense x seed matrix (resumable)")
    _scenario_args(p)
    p.add_argument("--attacks", help="comma-separated attack names (default: the scenario's)")
    p.add_argument("--defenses", help="comma-separated defense names (default: the scenario's)")
    p.add_argument("--seeds", help="comma-separated seeds (default: the scenario's)")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--address", help="Ray cluster address (default: a local Ray instance)")
    p.add_argument("--store", help="SQLite results store (default: runs/<scenario>.db)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--plot", metavar="PATH", help="write a heatmap PNG")
    p.add_argument("--cell-timeout", type=float, default=None, metavar="S")
    p.add_argument(
        "--allow-outside-guarantee",
        action="store_true",
        help="run rules below their min_clients (flagged in the table)",
    )
    _common(p)

    p = sub.add_parser("bound", help="check FLTrust's error bound (Theorem 1) empirically")
    _scenario_args(p, optional=True)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--plot", metavar="PATH")
    _common(p)

    p = sub.add_parser("validate", help="check a scenario without running it")
    _scenario_args(p)
    p.add_argument("--allow-outside-guarantee", action="store_true")
    _common(p)

    p = sub.add_parser("list", help="list attacks, defenses, tasks or scenarios")
    p.add_argument(
        "what", nargs="?", default="all", choices=["all", "attacks", "defenses", "tasks", "scenarios"]
    )
    p.add_argument("--json", action="store_true", help='print [{"name", "origin"}]')
    _common(p)

    p = sub.add_parser("report", help="show a results store")
    p.add_argument("store")
    p.add_argument("--format", default="table", choices=["table", "csv", "json", "markdown", "html"])
    p.add_argument("--output", metavar="PATH")
    p.add_argument(
        "--published",
        default="auto",
        metavar="NAME|auto|none",
        help="published tables to set beside the store (scenarios/published/NAME.toml, comma-separated); "
        "auto (default): those matching the store's scenario; none: no comparison",
    )
    _common(p)

    p = sub.add_parser("compare", help="what changed, cell by cell, between two stores")
    p.add_argument("store_a")
    p.add_argument("store_b")
    _common(p)

    p = sub.add_parser("plugin", help="plugin tools")
    psub = p.add_subparsers(dest="plugin_command", required=True, parser_class=_Parser)
    pn = psub.add_parser("new", help="write an installable plugin package")
    pn.add_argument("name")
    pn.add_argument("--kind", required=True, choices=["attack", "defense"])
    pn.add_argument("--dir", default=".")
    _common(pn)
    return parser


def _csv(text: str | None, kind: str) -> list[Any] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{kind} must list at least one value, got {text!r}")
    if kind == "seeds":
        try:
            return [int(t) for t in items]
        except ValueError:
            raise ConfigError(f"--seeds must be comma-separated integers, got {text!r}") from None
    return items


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except _ArgError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if getattr(args, "quiet", False):
        logging.getLogger("robustfl").setLevel(logging.ERROR)
    try:
        from ..registry import load_plugin

        for spec in getattr(args, "plugin", []) or []:
            load_plugin(spec)
        handler = _COMMANDS[args.command]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)
            return handler(args)
    except RobustFLError as exc:
        _err(str(exc))
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (a matrix says what its store holds), exit 130
        matrix = sys.modules.get("robustfl.simulation.matrix")  # loaded if a matrix was running
        interrupted = getattr(matrix, "Interrupted", ())
        msg = str(exc) if interrupted and isinstance(exc, interrupted) and str(exc) else "interrupted"
        print(f"robustfl: {msg}", file=sys.stderr)
        return 130


def _err(msg: str) -> None:
    first = msg.strip().splitlines()[0] if msg.strip() else "error"
    print(f"robustfl: error: {first}", file=sys.stderr)


def _load(args: argparse.Namespace) -> Any:
    from ..scenario import load_scenario

    return load_scenario(args.scenario, args.overrides)


def _write_json(path: str, obj: Any) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, indent=1, allow_nan=False))


def cmd_run(args: argparse.Namespace) -> int:
    from ..simulation.matrix import Job, _failed, set_up
    from ..simulation.runner import clean_reference
    from . import render

    sc = _load(args)
    attack: Any = args.attack if args.attack else _section(sc, "attack")
    defense: Any = args.defense if args.defense else _section(sc, "defense")
    sim = set_up(sc, attack, defense, args.seed, args.allow_outside_guarantee, device=args.device)
    try:
        ref = None
        if sim.problem.optimum is None:
            ref = clean_reference(sc, args.seed, device=args.device)
        cell = sim.run(ref).cell
    except RobustFLError:
        raise
    except Exception as exc:
        cell = _failed(Job("", sc, attack, defense, args.seed), exc)
    if args.json:
        _write_json(args.json, cell.to_json())
    if not args.quiet:
        render.print_cell(cell)
    return 1 if cell.status == "failed" else 0


def _section(sc: Any, name: str) -> Any:
    sec = dict(sc.section(name))
    return sec["name"] if len(sec) == 1 else sec


def cmd_matrix(args: argparse.Namespace) -> int:
    from ..simulation.matrix import Interrupted, _interrupted_message, run_matrix
    from . import render

    sc = _load(args)
    store = args.store or str(Path("runs") / f"{sc.name}.db")
    Path(store).parent.mkdir(parents=True, exist_ok=True)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    result = None
    try:
        with render.MatrixProgress(quiet=args.quiet) as progress:
            result = run_matrix(
                sc,
                attacks=_csv(args.attacks, "attacks"),
                defenses=_csv(args.defenses, "defenses"),
                seeds=_csv(args.seeds, "seeds"),
                workers=args.workers,
                store=store,
                executor=args.executor,
                address=args.address,
                plugins=args.plugin,
                allow_outside_guarantee=args.allow_outside_guarantee,
                device=args.device,
                progress=progress,
                cell_timeout=args.cell_timeout,
            )
        if args.json:
            _write_json(args.json, result.to_json())
        if args.plot:
            from .plots import heatmap

            heatmap(result.cells, args.plot)
        render.print_matrix(result.cells, title=sc.name)
    except KeyboardInterrupt as exc:
        if result is None or isinstance(exc, Interrupted):
            raise
        # Ctrl-C after the last cell was committed (writing the JSON, plot or table): the store
        # holds every cell; a rerun resumes them all and writes the rest
        done = {c.key: c for c in result.cells}
        raise Interrupted(_interrupted_message(done, len(done), store)) from None
    if not args.quiet:
        render.print_note(
            f"store: {store}"
            + (f"  json: {args.json}" if args.json else "")
            + (f"  plot: {args.plot}" if args.plot else "")
        )
    return 1 if result.failed else 0


def cmd_validate(args: argparse.Namespace) -> int:
    from ..simulation.matrix import plan
    from . import render

    sc = _load(args)
    jobs = plan(sc, allow_outside_guarantee=args.allow_outside_guarantee)
    if not args.quiet:
        render.print_note(f"{sc.name}: valid ({len(jobs)} cells)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from .. import attacks, defenses, tasks
    from ..errors import PluginError
    from ..scenario import scenario_names
    from . import render

    regs = {"attacks": attacks.registry, "defenses": defenses.registry, "tasks": tasks.registry}
    kinds = ["attacks", "defenses", "tasks", "scenarios"] if args.what == "all" else [args.what]
    out: dict[str, list[dict[str, str]]] = {}
    for kind in kinds:
        if kind == "scenarios":
            out[kind] = [{"name": n, "origin": "built-in"} for n in scenario_names()]
            continue
        reg = regs[kind]
        rows = []
        for name, origin in reg.items():
            if origin != "built-in":
                try:
                    reg.get(name)
                except PluginError as exc:
                    print(f"robustfl: warning: {exc}", file=sys.stderr)
                    origin = f"{origin} (broken)"
            rows.append({"name": name, "origin": origin})
        out[kind] = rows
    if args.json:
        print(json.dumps(out[kinds[0]] if len(kinds) == 1 else out, indent=1))
    else:
        render.print_listing(out)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..simulation.store import Store
    from . import render

    if not Path(args.store).is_file():
        raise ConfigError(f"store {args.store!r} does not exist")
    from ..simulation.published import compare_published, match_tables

    with Store(args.store) as st:
        cells = st.cells()
        run = st.latest_run()
    tables = match_tables(run[0] if run else None, run[1] if run else None, args.published)
    published = [compare_published(cells, t) for t in tables]
    if args.format == "table" and not args.output:
        render.print_matrix(cells, title=f"{args.store}", show_time=True)
        render.print_published(published)
        return 0
    if args.format == "html":  # one self-contained page: heatmap, tables, curves, provenance
        from ..simulation.html import page

        text = page(
            cells,
            run[0] if run else None,
            run[1] if run else None,
            title=f"robustfl results: {Path(args.store).name}",
            published=published,
        )
        if args.output:
            out = Path(args.output)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
        return 0
    render.print_report(
        cells,
        args.format,
        output=args.output,
        scenario=run[0] if run else None,
        provenance=run[1] if run else None,
        published=published,
    )
    return 0


def _open_cells(path: str) -> list[Any]:
    from ..errors import StoreError
    from ..simulation.store import Store

    if not Path(path).is_file():
        raise ConfigError(f"store {path!r} does not exist")
    with Store(path) as st:
        try:
            return st.cells()
        except (TypeError, AttributeError) as exc:  # a row whose JSON has the wrong shape
            raise StoreError(f"store {path} is corrupt: cannot read the cells: {exc}") from None


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..simulation.compare import compare, counts
    from ..simulation.report import format_value, sweep_label

    rows = compare(_open_cells(args.store_a), _open_cells(args.store_b))
    n = counts(rows)
    console = Console()

    def num(x: float | None, delta: bool = False) -> str:
        if x is None:
            return "—"
        return (f"{x:+.3g}" if delta else format_value(x)) if x == x else "nan"

    styles = {"status": "bold magenta", "changed": "yellow", "only_a": "red", "only_b": "green"}
    words = {"status": "status", "changed": "values", "only_a": "only in A", "only_b": "only in B"}
    changed = [r for r in rows if r["change"] != "same"]
    if changed:
        show_sweep = any(r["sweep"] for r in changed)
        metrics = [("relative_drift", "drift")]
        if any(r["accuracy_a"] is not None or r["accuracy_b"] is not None for r in changed):
            metrics.append(("accuracy", "acc"))
        table = Table(title=f"A = {args.store_a}   B = {args.store_b}", title_justify="left")
        for col in [*(["sweep"] if show_sweep else []), "attack", "defense", "seed", "change", "status"]:
            table.add_column(col, justify="right" if col == "seed" else "left")
        for _, short in metrics:
            for col in (f"{short} A", f"{short} B", f"Δ {short}"):
                table.add_column(col, justify="right")
        for r in changed:
            a, b = r["status_a"], r["status_b"]
            status = f"{a} -> {b}" if a is not None and b is not None and a != b else str(a or b)
            values = []
            for m, _ in metrics:
                values += [num(r[f"{m}_a"]), num(r[f"{m}_b"]), num(r[f"{m}_delta"], delta=True)]
            table.add_row(
                *([sweep_label(r["sweep"])] if show_sweep else []),
                r["attack"],
                r["defense"],
                str(r["seed"]),
                Text(words[r["change"]], style=styles[r["change"]]),
                status,
                *values,
            )
        console.print(table)
    line = (
        f"{len(rows)} cells: {n['same']} unchanged, {n['changed']} changed values, {n['status']} changed "
        f"status, {n['only_a']} only in A, {n['only_b']} only in B"
    )
    line += "" if changed else " (no differences)"
    console.print(line, highlight=False, markup=False, soft_wrap=True)
    return 0


def cmd_bound(args: argparse.Namespace) -> int:
    from ..theory.bound import cli_bound

    return cli_bound(args)


def cmd_plugin(args: argparse.Namespace) -> int:
    from .plugin_new import write_plugin

    path = write_plugin(args.name, args.kind, args.dir)
    if not args.quiet:
        print(f"wrote plugin package {path}")
    return 0


_COMMANDS = {
    "run": cmd_run,
    "matrix": cmd_matrix,
    "validate": cmd_validate,
    "list": cmd_list,
    "report": cmd_report,
    "compare": cmd_compare,
    "bound": cmd_bound,
    "plugin": cmd_plugin,
}


def entry() -> None:
    """The console script."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `robustfl list | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
