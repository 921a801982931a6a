"""``robustfl run``, ``robustfl matrix`` and ``robustfl validate``: one cell, a matrix, a dry check."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RobustFLError
from ..outputs import check_outputs
from ..scenario import check_seed
from .common import csv_list, load, write_json


def cmd_run(args: argparse.Namespace) -> int:
    """One cell: the scenario's attack and defense (or --attack/--defense), with its convergence verdict."""
    from ..simulation import convergence
    from ..simulation.components import chosen_spec
    from ..simulation.runner import clean_convergence
    from ..sweep.jobs import failed_cell as _failed
    from ..sweep.plan import Job, set_up
    from . import render

    for option, given in (("--attack", args.attack), ("--defense", args.defense)):
        if given is not None and not given.strip():
            raise ConfigError(f"{option} must name a component, got {given!r}")
    sc = load(args)  # --set attack.* / defense.* apply to the attack and defense chosen
    check_seed("--seed", args.seed)
    check_outputs({"--json": args.json}, {"the scenario": sc.path})
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
            verdict = convergence.from_cell(cell, rounds)
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
        write_json(args.json, doc)
    render.print_cell(cell)  # the result, --quiet or not (as matrix prints its table)
    render.print_convergence([verdict] if verdict is not None else [])
    if args.json and not args.quiet:
        render.print_note(f"wrote {args.json}")
    return 1 if cell.status == "failed" else 0


def cmd_matrix(args: argparse.Namespace) -> int:
    """The matrix into a resumable store, with live progress, then its table (exit 1: a cell failed)."""
    from ..simulation.components import refuse_choice_settings
    from ..sweep.driver import run_matrix
    from ..sweep.interrupt import Interrupted
    from ..sweep.interrupt import interrupted_message as _interrupted_message
    from ..sweep.jobs import failure_summary
    from . import render

    sc = load(args)
    refuse_choice_settings(sc.settings)
    store = args.store or str(Path("runs") / f"{sc.name}.db")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if args.address is not None and args.executor != "ray":
        raise ConfigError(f"--address {args.address!r} is a Ray cluster's address: it needs --executor ray")
    check_outputs({"--json": args.json, "--plot": args.plot}, {"the scenario": sc.path, "the store": store})
    result = None  # (the store's folder is made when the store opens, after the plan is checked)
    try:
        with render.MatrixProgress(quiet=args.quiet) as progress:
            result = run_matrix(
                sc,
                attacks=csv_list(args.attacks, "attacks"),
                defenses=csv_list(args.defenses, "defenses"),
                seeds=csv_list(args.seeds, "seeds"),
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
            write_json(args.json, {**result.to_json(), "convergence": verdicts})
        if args.plot:
            from ..reporting.heatmap import heatmap

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
    """The scenario checked and planned as ``matrix`` would (its refusals included), and its
    [attack] / [defense] sections built as ``run`` would; nothing run."""
    from ..simulation import components as C
    from ..simulation.components import refuse_choice_settings
    from ..sweep.plan import plan
    from . import render

    sc = load(args)
    refuse_choice_settings(sc.settings)
    jobs = plan(sc, allow_outside_guarantee=args.allow_outside_guarantee)
    for section, build in (("attack", C.build_attack), ("defense", C.build_defense)):
        # the [attack] / [defense] sections as written (run's default cell); --set section.p is a
        # matrix's per-entry setting here, checked by the plan above
        given = C.section_settings(sc.settings, section)
        build({k: v for k, v in sc.section(section).items() if k == "name" or k not in given})
    if not args.quiet:
        render.print_note(f"{sc.name}: valid ({len(jobs)} cells)")
    return 0
