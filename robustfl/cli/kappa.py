"""``robustfl kappa``: runs :func:`robustfl.theory.kappa.run_kappa` with a progress bar, prints the
table (loudly, any kappa_hat above a proven bound) and writes ``{"rows": [...]}`` as JSON."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ..errors import ConfigError
from ..outputs import check_outputs
from .common import csv_list, write_json
from .tables import get_console

JSON_KEYS = (
    "rule",
    "n",
    "f",
    "f_hat",
    "family",
    "kappa",
    "attack",
    "upper_bound",
    "upper_source",
    "upper_condition",
    "upper_verified",
    "lower_bound",
    "evaluations",
    "best_fixed",
    "best_fixed_attack",
    "status",
    "error",
    "saved",
    "elapsed_s",
)


def rule_spec(token: str) -> Any:
    """``krum`` -> "krum"; ``nnm+krum`` -> {"name": "krum", "pre": ["nnm"]}; a JSON object as given."""
    token = token.strip()
    if token.startswith("{"):
        return json.loads(token)
    parts = [p.strip() for p in token.split("+")]
    if not all(parts):
        raise ConfigError(f"--rules: {token!r} has an empty part: expected PRE+...+RULE, e.g. nnm+krum")
    from ..defenses import pre_registry, registry

    if len(parts) == 1 and parts[0] in pre_registry and parts[0] not in registry:
        raise ConfigError(f"--rules: {token!r} is a pre-aggregator: put it before a rule ({token}+krum?)")
    if len(parts) > 1 and parts[-1] in pre_registry and parts[-1] not in registry:
        order = "+".join([parts[-1], *parts[:-1]])
        raise ConfigError(
            f"--rules: {token!r} ends with the pre-aggregator {parts[-1]!r}: the rule comes last ({order!r}?)"
        )
    return parts[0] if len(parts) == 1 else {"name": parts[-1], "pre": parts[:-1]}


def _pairs(text: str | None) -> list[tuple[int, int]]:
    out = []
    for item in csv_list(text, "misspecified") or []:
        try:
            f, fh = (int(x) for x in item.split(":"))
        except ValueError:
            raise ConfigError(f"--misspecified takes F:F_HAT pairs, e.g. 4:2, got {item!r}") from None
        out.append((f, fh))
    return out


def _num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _attack_text(a: Any) -> str:
    """``direction +pc1 a=316``, ``local (from direction)``, ``alie``: what found the kappa_hat."""
    if not a:
        return "-"
    p = a["params"]
    if a["name"] == "direction":
        return f"direction {p.get('direction')} a={_num(p.get('a'), 3)}"
    if "from" in p:
        return f"{a['name']} (from {p['from']})"
    if "honest_row" in p:
        return f"copy of honest row {p['honest_row']}"
    return str(a["name"])


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row.get(k) for k in JSON_KEYS}
    for k in ("kappa", "best_fixed", "upper_bound", "lower_bound"):
        value = out[k]
        if isinstance(value, float) and not math.isfinite(value):
            out[k] = None
            out[f"{k}_infinite"] = True
    out["spec"] = row["spec"]
    return out


def cmd_kappa(args: argparse.Namespace) -> int:
    """``robustfl kappa [SCENARIO]``: 0 when every row ran (refusals included), 1 when a kappa_hat
    exceeds a proven upper bound (a finding: the inputs are saved)."""
    from ..scenario import load_scenario
    from ..theory import kappa as K
    from ..theory.kappa_families import FAMILIES, task_rounds

    if not args.scenario and args.overrides:  # the synthetic families read no scenario key
        raise ConfigError("--set applies to a SCENARIO's rounds; without one, kappa runs the synthetic "
                          "families (--n, --dim, --families): give a SCENARIO or drop --set")
    if args.scenario:  # the rows are the scenario's rounds: the synthetic families' options do not apply
        given = [f"--{o}" for o in ("n", "dim", "families", "misspecified") if getattr(args, o) is not None]
        if given:
            raise ConfigError(
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the synthetic input "
                "families, not to a SCENARIO's rounds "
                "(there n is federation.clients and f is --f or threat.byzantine): drop them or the SCENARIO"
            )
    rules = [rule_spec(t) for t in (csv_list(args.rules, "rules") or [])] or list(K.DEFAULT_RULES)
    fs = csv_list(args.f, "f", integers=True)
    families = csv_list(args.families, "families") or list(FAMILIES)
    for fam in families:
        if fam not in FAMILIES:
            raise ConfigError(f"--families: {fam!r}, expected one of {', '.join(FAMILIES)}")
    from ..scenario import check_seed

    check_seed("--seed", args.seed)
    n = args.n if args.n is not None else K.DEFAULT_N
    dim = args.dim if args.dim is not None else K.DEFAULT_DIM
    if dim < 1:
        raise ConfigError(f"--dim must be an integer >= 1 (coordinates of the rows), got {dim}")
    save_dir = Path(args.save_dir)
    if save_dir.exists() and not save_dir.is_dir():
        raise ConfigError(f"--save-dir {args.save_dir!r} is a file: expected a folder")
    scenario_file = args.scenario if args.scenario and Path(args.scenario).is_file() else None
    check_outputs({"--json": args.json}, {"the scenario": scenario_file})
    console = get_console(None)
    rows: list[dict[str, Any]] = []
    plain = not console.is_terminal or args.quiet
    with Progress(
        TextColumn("kappa"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=plain,
        transient=True,
    ) as progress:
        task = progress.add_task("", total=None)

        def on_row(row: dict[str, Any], done: int, total: int) -> None:
            progress.update(task, completed=done, total=total, description=f"{row['rule']} {row['family']}")
            if plain and not args.quiet and (done % 10 == 0 or done == total):
                print(f"[{done}/{total} rows]", file=sys.stderr, flush=True)

        common = {
            "budget": args.budget,
            "seed": args.seed,
            "allow_outside_guarantee": args.allow_outside_guarantee,
            "save_dir": save_dir,
            "on_row": on_row,
        }
        if args.scenario:
            sc = load_scenario(args.scenario, args.overrides)
            n = sc.section("federation")["clients"]
            T = sc.section("federation")["rounds"]
            picks = sorted({1, max(1, T // 2), T})
            for f in fs or [sc.byzantine_count()]:
                rows += K.run_kappa(
                    rules, [K.Setting(n, f, f)], task=task_rounds(sc, args.seed, picks, f), **common
                )
        else:
            sets = K.settings(n, fs or list(K.DEFAULT_F), _pairs(args.misspecified))
            rows = K.run_kappa(rules, sets, families, dim=dim, **common)
    _print(rows, console, args.quiet)
    if args.json:
        write_json(args.json, {"rows": [_clean(r) for r in rows]})
        if not args.quiet:
            print(f"wrote {args.json}", file=sys.stderr)
    return 1 if any(r["status"] == "exceeds_bound" for r in rows) else 0


def _status(r: dict[str, Any]) -> str:
    """The table's status: short (the JSON's ``error`` has the whole sentence)."""
    err = str(r["error"] or "")
    if r["status"] in ("refused", "outside_guarantee") and "needs n >=" in err:
        need = err.split("needs n >=")[1].split()[0]
        return f"{r['status']} (needs n >= {need})"
    if r["status"] == "refused" and "reference" in err:
        return "refused (needs the server's reference: task rounds only)"
    return str(r["status"])


def _setting(r: dict[str, Any]) -> str:
    return f"n = {r['n']}, f = {r['f']}" + (
        f", f_hat = {r['f_hat']} (misspecified)" if r["f_hat"] != r["f"] else ""
    )


def _print(rows: list[dict[str, Any]], console: Any, quiet: bool) -> None:
    """One table per setting (rows: rule x family), short cells; the bounds' sources in a legend."""
    for setting in dict.fromkeys(_setting(r) for r in rows):
        group = [r for r in rows if _setting(r) == setting]
        lower = _num(group[0]["lower_bound"])
        table = Table(title=f"kappa_hat at {setting} (lower bound f/(n-2f) = {lower})", title_justify="left")
        for col, justify in (
            ("rule", "left"),
            ("family", "left"),
            ("kappa_hat", "right"),
            ("found by", "left"),
            ("best fixed", "left"),
            ("upper", "right"),
            ("status", "left"),
        ):
            table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for r in group:
            fixed = f"{_num(r['best_fixed'], 3)} {r['best_fixed_attack']}" if r["best_fixed_attack"] else "-"
            upper = _num(r["upper_bound"], 3) + (
                "†" if r["upper_bound"] is not None and not r.get("upper_verified") else ""
            )
            status = _status(r)
            family = r["family"].replace("task:", "")
            table.add_row(
                r["rule"], family, _num(r["kappa"], 3), _attack_text(r["attack"]), fixed, upper, status
            )
        console.print(table)
    if not quiet:
        console.print(
            "kappa_hat: the largest kappa the search found, a lower bound on the rule's kappa (it "
            "certifies non-robustness only). upper: a published bound; † as reported by secondary "
            "sources, not verified against the paper (docs/kappa-bounds.md; the JSON's upper_source "
            "says which).",
            soft_wrap=False,
        )
    for r in rows:
        if r["status"] == "exceeds_bound":
            where = f"{r['rule']} at n={r['n']} f={r['f']} on {r['family']}"
            print(
                f"FINDING: {where}: kappa_hat {_num(r['kappa'])} > proven bound {_num(r['upper_bound'])} "
                f"({r['upper_source']}); inputs saved to {r['saved']}",
                file=sys.stderr,
            )
