"""``robustfl list``, ``robustfl show`` and ``robustfl plugin new``: the components and their docs.

``list`` gives every attack, defense (with the pre-aggregators), task, algorithm, sharing scheme
and scenario with its origin, one-line description and paper; ``show NAME`` one component in full
(parameters, defaults, constraints, knowledge, the formula); ``plugin new`` writes a package.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .parser import LISTS


def _catalogue(part: str) -> list[dict[str, Any]]:
    """One part of ``robustfl list``: every entry's name, origin, kind, description and paper
    (from its module's docstring); the defenses are followed by the pre-aggregators."""
    from .. import attacks, defenses, federation, tasks
    from ..errors import PluginError
    from ..registry import doc_parts
    from ..scenario_files import find_scenario, scenario_names

    if part == "scenarios":
        rows = []
        for n in scenario_names():
            doc = _scenario_doc(find_scenario(n))
            rows.append({"name": n, "origin": "built-in", "kind": "scenario", "description": doc})
            rows[-1]["paper"] = ""
        return rows
    regs = {
        "attacks": [attacks.registry],
        "defenses": [defenses.registry, defenses.pre_registry],
        "algorithms": [federation.algorithm_registry],
        "sharing": [federation.sharing_registry],
    }
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


def _wrap(text: str, width: int, indent: str) -> str:
    import textwrap

    return "\n".join(
        textwrap.wrap(text, width=max(40, width), initial_indent=indent, subsequent_indent=indent)
    )


def cmd_list(args: argparse.Namespace) -> int:
    """The catalogue, or one part of it, as text or JSON."""
    import shutil

    parts = LISTS if args.what == "all" else [args.what]
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


QUALIFIERS = {"attack": "attack", "defense": "defense", "pre": "pre-aggregator", "task": "task",
              "algorithm": "algorithm", "sharing": "sharing scheme"}  # show KIND:NAME


def _show_info(name: str) -> tuple[dict[str, Any], list[str]]:
    """Everything ``robustfl show NAME`` prints, from the registries and the docstrings, and the
    qualified names (``KIND:NAME``) of the other components with that name (``fedavg`` is a defense
    and an algorithm: the first kind in ``robustfl list``'s order is shown)."""
    from ..errors import ConfigError, UnknownNameError
    from ..plugins import plugin_tables

    registries = [reg for _, reg in plugin_tables()]
    qualifier, sep, bare = name.partition(":")
    if sep:
        if qualifier not in QUALIFIERS:
            raise ConfigError(
                f"show {name!r}: unknown kind {qualifier!r}; expected one of {', '.join(QUALIFIERS)} "
                "(show KIND:NAME)"
            )
        registries = [reg for reg in registries if reg.kind == QUALIFIERS[qualifier]]
        name = bare
    found = [reg for reg in registries if name in reg]
    if not found:
        known = list(dict.fromkeys(n for reg in registries for n in reg.names()))
        raise UnknownNameError(registries[0].kind if sep else "component", name, known)
    kinds = {v: k for k, v in QUALIFIERS.items()}
    return found[0].info(name), [f"{kinds[reg.kind]}:{name}" for reg in found[1:]]

def cmd_show(args: argparse.Namespace) -> int:
    """One component in full: parameters, defaults, constraints, knowledge, the formula."""
    import shutil

    info, others = _show_info(args.name)
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
    if others:
        lines.append(f"also named {info['name']!r}: " + ", ".join(f"robustfl show {q}" for q in others))
    print("\n".join(lines))
    return 0


def cmd_plugin(args: argparse.Namespace) -> int:
    """``robustfl plugin new``: an installable plugin package with its tests."""
    from .plugin_new import write_plugin

    path = write_plugin(args.name, args.kind, args.dir)
    if not args.quiet:
        print(f"wrote plugin package {path}")
    return 0
