"""Helpers the commands share: the scenario argument, comma-separated lists, JSON files, errors."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError


def csv_list(text: str | None, kind: str, integers: bool | None = None) -> list[Any] | None:
    """``--attacks a,b`` as a list (ints with ``integers``, by default for ``--seeds``); None when
    the option was not given."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{kind} must list at least one value, got {text!r}")
    twice = next((t for i, t in enumerate(items) if t in items[:i]), None)
    if twice is not None:
        raise ConfigError(f"--{kind} lists {twice!r} twice, in {text!r}: give each value once")
    if integers if integers is not None else kind == "seeds":
        try:
            values = [int(t) for t in items]
        except ValueError:
            raise ConfigError(f"--{kind} must be comma-separated integers, got {text!r}") from None
        if kind == "seeds":
            from ..scenario import check_seed

            for v in values:
                check_seed("--seeds", v)
        return values
    return items


def print_error(msg: str) -> None:
    """``robustfl: error: <first line>`` on stderr."""
    first = msg.strip().splitlines()[0] if msg.strip() else "error"
    print(f"robustfl: error: {first}", file=sys.stderr)


def load(args: argparse.Namespace) -> Any:
    """The scenario the command names, with its ``--set`` overrides."""
    from ..scenario import load_scenario

    return load_scenario(args.scenario, args.overrides)


def dumps_by_line(obj: Any) -> str:
    """``obj`` as JSON (no NaN), a dict's keys and a list's items one per line two levels deep
    (a matrix: one line per cell), each line encoded compactly by json's C encoder: ~20 x faster
    than ``indent=``, which runs json's pure-Python encoder (seconds for a 1,000-cell matrix)."""

    def enc(x: Any) -> str:
        return json.dumps(x, allow_nan=False)

    def block(x: Any, depth: int) -> str:
        pad, inner = " " * depth, " " * (depth + 1)
        if depth < 2 and isinstance(x, dict) and x:
            items = [f"{inner}{enc(str(k))}: {block(v, depth + 1)}" for k, v in x.items()]
            return "{\n" + ",\n".join(items) + f"\n{pad}}}"
        if depth < 2 and isinstance(x, list) and x:
            return "[\n" + ",\n".join(f"{inner}{block(v, depth + 1)}" for v in x) + f"\n{pad}]"
        return enc(x)

    return block(obj, 0)


def check_outputs(
    outputs: Mapping[str, str | None], inputs: Mapping[str, str | Path | None] | None = None
) -> None:
    """Before any work: every output path (option -> path; None: not given) can be written, and
    none names the same file as another output or as a file the command reads or keeps (``inputs``:
    the scenario, the store). Otherwise one line, exit 2: nothing computed is lost to a path that
    cannot take it, and no output overwrites a store or a scenario. Folders are made, as the
    writers make them; a probe file that did not exist is removed again."""
    seen: dict[Path, str] = {}
    for what, path in (inputs or {}).items():
        if path is not None and str(path) != ":memory:":
            seen[Path(path).resolve()] = what
    for option, path in outputs.items():
        if not path:
            continue
        resolved = Path(path).resolve()
        if resolved in seen:
            raise ConfigError(
                f"{option} {path!r} is the same file as {seen[resolved]}: give it a path of its own"
            )
        seen[resolved] = option
        writable(option, path)


def writable(option: str, path: str | Path) -> None:
    """Refuse (one line, exit 2) a path ``option`` names that cannot be written: a folder, a place
    where no file can be made, no permission. An existing file is opened for appending only."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"cannot write {option} {str(path)!r}: it is a folder (expected a file path)")
    above = next((a for a in p.parents if a.exists()), None)  # the nearest existing folder above it
    if above is not None and not above.is_dir():
        raise ConfigError(f"cannot write {option} {str(path)!r}: {str(above)!r} is a file, not a folder")
    existed = p.exists()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write {option} {str(path)!r}: {exc.strerror or exc}") from None
    if not existed:
        p.unlink(missing_ok=True)


def write_text(option: str, path: str | Path, text: str) -> None:
    """``text`` at ``path`` (its folder made); a failure is one line naming the option, exit 2."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {option} {str(path)!r}: {exc.strerror or exc}") from None


def write_json(path: str, obj: Any, option: str = "--json") -> None:
    """``obj`` as JSON (no NaN) at ``path``, one line per item two levels deep, its folder made."""
    write_text(option, path, dumps_by_line(obj) + "\n")
