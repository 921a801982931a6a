"""Helpers the commands share: the scenario argument, comma-separated lists, JSON files, errors."""

from __future__ import annotations

import argparse
import json
import sys
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
    if integers if integers is not None else kind == "seeds":
        try:
            return [int(t) for t in items]
        except ValueError:
            raise ConfigError(f"--{kind} must be comma-separated integers, got {text!r}") from None
    return items


def print_error(msg: str) -> None:
    """``robustfl: error: <first line>`` on stderr."""
    first = msg.strip().splitlines()[0] if msg.strip() else "error"
    print(f"robustfl: error: {first}", file=sys.stderr)


def load(args: argparse.Namespace) -> Any:
    """The scenario the command names, with its ``--set`` overrides."""
    from ..scenario import load_scenario

    return load_scenario(args.scenario, args.overrides)


def write_json(path: str, obj: Any) -> None:
    """``obj`` as indented JSON (no NaN) at ``path``, its folder made."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, indent=1, allow_nan=False))
