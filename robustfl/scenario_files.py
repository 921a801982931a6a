"""Where named scenarios live: the checkout's ``scenarios/``, then the installed copy; a name or a
path to one TOML file (:func:`find_scenario`)."""

from __future__ import annotations

import contextlib
import os
from importlib import resources
from pathlib import Path

from .errors import ConfigError, UnknownNameError


def scenario_dirs() -> list[Path]:
    """Where named scenarios are found: the checkout's scenarios/, then the installed copy."""
    dirs = [Path(__file__).resolve().parent.parent / "scenarios"]
    with contextlib.suppress(Exception):
        dirs.append(Path(str(resources.files("robustfl") / "scenarios")))
    seen: dict[Path, Path] = {}
    for d in dirs:
        if d.is_dir():
            seen.setdefault(d.resolve(), d)
    return list(seen.values())


def scenario_names() -> list[str]:
    names: set[str] = set()
    for d in scenario_dirs():
        names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def find_scenario(name_or_path: str | os.PathLike[str]) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if p.is_dir():
            raise ConfigError(f"scenario {str(p)!r} is a folder: expected a TOML file or a scenario name")
        if not p.is_file():
            raise ConfigError(f"scenario file {str(p)!r} does not exist")
        return p
    for d in scenario_dirs():
        cand = d / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    raise UnknownNameError("scenario", str(name_or_path), scenario_names())
