"""robustfl's command line (argparse). Exit codes: 0 done, 1 a run or cell failed, 2 bad input.

Every command works in-process as ``robustfl.cli.main(argv) -> int``. Bad usage or bad input
gets one line on stderr naming the bad value and what was expected, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
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


_LISTS = ["attacks", "defenses", "tasks", "algorithms", "sharing", "scenarios"]


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
        choices=["all", *_LISTS],
        help="which part of the catalogue (default: all)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print [{"name", "origin", "kind", "description", "paper"}] ({part: [...]} for all)',
    )
    _common(p)

    p = sub.add_parser("show", help="one attack, defense, task, algorithm or sharing scheme in full")
    p.add_argument("name", help="its name, as `robustfl list` shows it")
    p.add_argument("--json", action="store_true", help="print it as one JSON object")
    _common(p)

    p = sub.add_parser("report", help="show a results store")
    p.add_argument("store", help="the SQLite results store a matrix wrote")
    p.add_argument(
        "--format",
        default="table",
        choices=["table", "csv", "json", "markdown", "html"],
        help="output format (default: table)",
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
    from ..simulation import convergence
    from ..simulation.components import chosen_spec
    from ..simulation.matrix import Job, _failed, set_up
    from ..simulation.runner import clean_convergence
    from . import render

    sc = _load(args)  # --set attack.* / defense.* apply to the attack and defense chosen
    attack: Any = chosen_spec(sc, "attack", args.attack or None)
    defense: Any = chosen_spec(sc, "defense", args.defense or None)
    sim = set_up(sc, attack, defense, args.seed, args.allow_outside_guarantee, device=args.device)
    verdict: dict[str, Any] | None = None  # has the clean run converged? (convergence.py)
    try:
        ref = None
        if sim.problem.optimum is None:  # the clean run: the reference, and its verdict
            ref, verdict = clean_convergence(sc, args.seed, device=args.device)
            if verdict["error"] is not None:
                raise ConfigError(
                    f"the clean run (attack none, defense fedavg, seed {args.seed}) diverged: "
                    f"{verdict['error']}"
                )
        cell = sim.run(ref).cell
    except RobustFLError:
        raise
    except Exception as exc:
        cell = _failed(Job("", sc, attack, defense, args.seed), exc)
    if verdict is None and cell.status != "failed":  # an exact optimum: the clean run's own verdict
        rounds = int(sc.section("federation")["rounds"])
        if attack == "none" and defense == "fedavg":  # this cell is the clean run
            verdict = convergence.from_cell(cell, rounds, every=int(sc.section("metrics")["every"]))
        if verdict is None:
            try:
                verdict = clean_convergence(sc, args.seed, device=args.device)[1]
            except Exception as exc:  # said beside the cell, never fatal to it
                verdict = convergence.verdict(
                    None, rounds=rounds, reference=cell.reference, seed=args.seed, error=str(exc)
                )
    if args.json:
        doc = cell.to_json()
        if verdict is not None:
            doc["convergence"] = verdict
        _write_json(args.json, doc)
    if not args.quiet:
        render.print_cell(cell)
        render.print_convergence([verdict] if verdict is not None else [])
        if args.json:
            render.print_note(f"wrote {args.json}")
    return 1 if cell.status == "failed" else 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from ..simulation.components import refuse_choice_settings
    from ..simulation.matrix import Interrupted, _interrupted_message, failure_summary, run_matrix
    from . import render

    sc = _load(args)
    refuse_choice_settings(sc.settings)
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
        verdicts = list(result.provenance.get("convergence") or [])  # the clean runs converged?
        if args.json:
            _write_json(args.json, {**result.to_json(), "convergence": verdicts})
        if args.plot:
            from .plots import heatmap

            heatmap(result.cells, args.plot)
        render.print_matrix(result.cells, title=sc.name, convergence=verdicts)
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
    summary = failure_summary(result.cells)
    if summary is not None:  # never looks like success: one line on stderr, exit 1
        line = summary.replace(" (see result.failed)", "; rerun the command to retry them")
        print(f"robustfl: {line}", file=sys.stderr)
    return 1 if result.failed else 0


def cmd_validate(args: argparse.Namespace) -> int:
    from ..simulation.matrix import plan
    from . import render

    sc = _load(args)
    jobs = plan(sc, allow_outside_guarantee=args.allow_outside_guarantee)
    if not args.quiet:
        render.print_note(f"{sc.name}: valid ({len(jobs)} cells)")
    return 0


def _catalogue(part: str) -> list[dict[str, Any]]:
    """One part of ``robustfl list``: every entry's name, origin, kind, description and paper
    (from its module's docstring); the defenses are followed by the pre-aggregators."""
    from .. import attacks, defenses, tasks
    from ..errors import PluginError
    from ..registry import doc_parts
    from ..scenario import ALGORITHM_PARAMS, SHARING_PARAMS, find_scenario, scenario_names

    if part == "scenarios":
        rows = []
        for n in scenario_names():
            doc = _scenario_doc(find_scenario(n))
            rows.append({"name": n, "origin": "built-in", "kind": "scenario", "description": doc})
            rows[-1]["paper"] = ""
        return rows
    if part in ("algorithms", "sharing"):
        names = ALGORITHM_PARAMS if part == "algorithms" else SHARING_PARAMS
        kind = "algorithm" if part == "algorithms" else "sharing scheme"
        return [
            {"name": n, "origin": "built-in", "kind": kind, **_short(doc_parts(_federation_class(n)))}
            for n in names
        ]
    regs = {"attacks": [attacks.registry], "defenses": [defenses.registry, defenses.pre_registry]}
    rows = []
    for reg in regs.get(part, [tasks.registry]):
        for name, origin in reg.items():
            row: dict[str, Any] = {"name": name, "origin": origin, "kind": reg.kind}
            try:
                row.update(_short(doc_parts(reg.get(name))))
            except PluginError as exc:
                print(f"robustfl: warning: {exc}", file=sys.stderr)
                row.update(origin=f"{origin} (broken)", description="", paper="")
            rows.append(row)
    return rows


def _short(parts: dict[str, str]) -> dict[str, str]:
    return {"description": parts["description"], "paper": parts["paper"]}


def _scenario_doc(path: Path) -> str:
    """A scenario file's description: its leading comment's first sentence."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(x for x in lines if x)
    end = text.find(". ")
    return text[: end + 1] if end >= 0 else text


def _federation_class(name: str) -> Any:
    import importlib

    table = {
        "fedavg": "base:Algorithm",
        "fedprox": "fedprox:FedProx",
        "feddyn": "feddyn:FedDyn",
        "full": "base:Sharing",
        "psfed": "psfed:PSFed",
    }
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(f"robustfl.federation.{module}"), attr)


def _wrap(text: str, width: int, indent: str) -> str:
    import textwrap

    return "\n".join(
        textwrap.wrap(text, width=max(40, width), initial_indent=indent, subsequent_indent=indent)
    )


def cmd_list(args: argparse.Namespace) -> int:
    import shutil

    parts = _LISTS if args.what == "all" else [args.what]
    out = {part: _catalogue(part) for part in parts}
    if args.json:
        print(json.dumps(out[parts[0]] if len(parts) == 1 else out, indent=1))
        return 0
    width = shutil.get_terminal_size((100, 24)).columns - 1
    blocks = []
    for part, rows in out.items():
        lines = [f"{part}:"]
        for r in rows:
            marks = [r["kind"]] if r["kind"] == "pre-aggregator" else []
            marks += [] if r["origin"] == "built-in" else [r["origin"]]
            head = f"  {r['name']}" + (f"  [{', '.join(marks)}]" if marks else "")
            lines.append(head)
            if r["description"]:
                lines.append(_wrap(r["description"], width, "      "))
            if r["paper"]:
                lines.append(_wrap(f"paper: {r['paper']}", width, "      "))
        blocks.append("\n".join(lines))
    print("\n\n".join(blocks))
    if args.what in ("all", "attacks", "defenses"):
        print("\n`robustfl show NAME`: parameters, defaults, constraints, knowledge and the formula.")
    return 0


def _show_info(name: str) -> dict[str, Any]:
    """Everything ``robustfl show NAME`` prints, from the registries and the docstrings."""
    from .. import attacks, defenses, tasks
    from ..errors import UnknownNameError
    from ..registry import doc_parts
    from ..scenario import ALGORITHM_PARAMS, SHARING_PARAMS

    for reg in (attacks.registry, defenses.registry, defenses.pre_registry, tasks.registry):
        if name in reg:
            return reg.info(name)
    for table, kind in ((ALGORITHM_PARAMS, "algorithm"), (SHARING_PARAMS, "sharing scheme")):
        if name in table:
            params = [
                {"name": k, "default": default, "constraint": _constraint_text(cons, typ)}
                for k, (default, typ, cons) in table[name].items()
            ]
            return {
                "name": name,
                "kind": kind,
                "origin": "built-in",
                **doc_parts(_federation_class(name)),
                "parameters": params,
            }
    known = [*attacks.names(), *defenses.names(), *defenses.pre_registry.names(), *tasks.names()]
    raise UnknownNameError("component", name, [*known, *ALGORITHM_PARAMS, *SHARING_PARAMS])


def _constraint_text(cons: str, typ: str) -> str:
    """A scenario schema constraint in words: "choice:a,b" -> "one of 'a', 'b'", ">=0" -> ">= 0"."""
    if cons.startswith("choice:"):
        return "one of " + ", ".join(repr(c) for c in cons.split(":", 1)[1].split(","))
    words = {"[0,1]": "in [0, 1]", "(0,1]": "in (0, 1]", "": ""}
    text = words[cons] if cons in words else re.sub(r"^(>=|<=|>|<)\s*", r"\1 ", cons)
    kind = {"float": "a number", "int": "an integer", "str": "a string"}.get(typ, typ)
    return f"{kind} {text}".strip()


def cmd_show(args: argparse.Namespace) -> int:
    import shutil

    info = _show_info(args.name)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    width = shutil.get_terminal_size((100, 24)).columns - 1
    lines = [f"{info['name']}  ({info['kind']}, {info['origin']})"]
    if info.get("description"):
        lines.append(_wrap(info["description"], width, "  "))
    if info.get("paper"):
        lines.append(_wrap(f"paper: {info['paper']}", width, "  "))
    if "knowledge" in info:
        data = "yes (its clients train on poisoned data)" if info.get("poisons_data") else "no"
        lines.append(f"  knowledge needed: {info['knowledge']}   data poisoning: {data}")
    params = info.get("parameters", [])
    lines.append("parameters:" if params else "parameters: none")
    for prm in params:
        default = "required" if prm.get("required") else f"default {prm['default']!r}"
        lines.append(f"  {prm['name']}: {default}; {prm['constraint']}")
    if info.get("details"):  # the docstring as written: formulas keep their layout
        lines.append("formula and details:")
        lines.extend(f"  {line}".rstrip() for line in info["details"].splitlines())
    print("\n".join(lines))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..simulation.published import compare_published, match_tables
    from ..simulation.report import load_store
    from . import render

    if not Path(args.store).is_file():
        raise ConfigError(f"store {args.store!r} does not exist")
    # Every setting the store holds, kept apart: the cells' sweep points carry the keys that differ.
    view = load_store(args.store)
    cells = view.cells
    tables = match_tables(view.scenario, view.provenance, args.published)
    published = [compare_published(cells, t) for t in tables]
    if args.format == "html":  # one self-contained page: heatmap, tables, curves, provenance
        from ..simulation.html import page

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
            out = Path(args.output)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
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
    from ..simulation.compare import compare_stores, counts
    from . import render

    for path in (args.store_a, args.store_b):
        if not Path(path).is_file():
            raise ConfigError(f"store {path!r} does not exist")
    rows, keys = compare_stores(args.store_a, args.store_b)
    render.print_compare(rows, counts(rows), args.store_a, args.store_b, keys)
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
    "show": cmd_show,
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
