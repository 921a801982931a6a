"""Scenario files: TOML with a default for every key, validated with errors that name the key.

A :class:`Scenario` holds the fully resolved sections (defaults filled in). Component sections
(``task``, ``algorithm``, ``sharing``, ``attack``, ``defense``) carry a ``name`` plus that
component's own parameters, which the component validates when it is built (a misspelled
parameter is an error naming it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import numbers
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .scenario_files import find_scenario

# --- the table of defaults (mirrored in README.md) ------------------------------------------
# key -> (default, type, constraint). Types: "int", "float", "str", "bool", "number|null", "list".
Spec = tuple[Any, str, str]
SCHEMA: dict[str, dict[str, Spec]] = {
    "task": {"name": ("ridge", "str", "")},
    "partition": {
        "name": ("iid", "str", "choice:iid,dirichlet,bias,shards"),
        "alpha": (0.5, "float", ">0"),
        "q": (0.5, "float", "[0,1]"),
        "shards_per_client": (2, "int", ">=1"),
    },
    "federation": {
        "clients": (20, "int", ">=1"),
        "rounds": (100, "int", ">=1"),
        "local_steps": (1, "int", ">=1"),
        "local_lr": (0.1, "float", ">0"),
        "server_lr": (1.0, "float", ">0"),
        "batch_size": (0, "int", ">=0"),
        "participation": (1.0, "float", "(0,1]"),
        "init_scale": (0.1, "float", ">0"),
        "threads": (1, "int", ">=1"),
    },
    "algorithm": {"name": ("fedavg", "str", "")},
    "sharing": {"name": ("full", "str", "")},
    "threat": {
        "byzantine": (0.2, "number", ">=0"),
        "knowledge": ("full", "str", "choice:full,honest,own"),
        "assumed_byzantine": (None, "number|null", ">=0"),
    },
    "server": {"root_size": (100, "int", ">=0"), "root_bias": (0.0, "float", "[0,1]")},
    "metrics": {"every": (1, "int", ">=1")},
    "attack": {"name": ("sign_flip", "str", "")},
    "defense": {"name": ("fltrust", "str", "")},
    "matrix": {
        "attacks": (["none", "sign_flip", "scaling"], "list", "nonempty"),
        "defenses": (["fedavg", "fltrust", "fedsim"], "list", "nonempty"),
        "seeds": ([0, 1, 2], "list", "nonempty"),
        "sweep": ({}, "table", ""),
    },
    "bound": {
        "fractions": ([0.0, 0.3, 0.6, 0.9], "list", "nonempty"),
        "root_sizes": ([80, 160, 400, 800, 1600, 3200], "list", "nonempty"),
        "draws": (200, "int", ">=2"),
        "alpha": (None, "number|null", ">0"),
        "rounds": (200, "int", ">=1"),
        "attacks": (
            ["none", "sign_flip", "scaling", "similarity_poisoning", "fltrust_adaptive"],
            "list",
            "nonempty",
        ),
        "defenses": (["fltrust", "fedavg", "median", "krum"], "list", "nonempty"),
        "seeds": ([0], "list", "nonempty"),
    },
}
COMPONENT_SECTIONS = ("task", "algorithm", "sharing", "attack", "defense")
def _type_ok(value: Any, typ: str) -> bool:
    if typ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ in ("float", "number"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if typ == "number|null":
        return value is None or _type_ok(value, "number")
    if typ == "str":
        return isinstance(value, str)
    if typ == "bool":
        return isinstance(value, bool)
    if typ == "list":
        return isinstance(value, list)
    if typ == "table":
        return isinstance(value, dict)
    return True


def _check_value(key: str, value: Any, typ: str, constraint: str) -> Any:
    if not _type_ok(value, typ):
        want = {
            "number": "a number", "number|null": "a number", "float": "a number", "table": "a table",
            "int": "an integer", "str": "a string", "bool": "true or false",
        }.get(typ, f"a {typ}")
        raise ConfigError(f"{key} must be {want}, got {value!r} ({type(value).__name__})")
    if (
        value is None
        or typ in ("str", "bool", "list", "table")
        and not constraint.startswith(("choice", "nonempty"))
    ):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key} must be finite, got {value!r}")
    if typ == "int" and not -(2**63) <= value < 2**63:  # every count ends up in a 64-bit integer
        raise ConfigError(f"{key} must be below 2**63, got {value!r}")
    c = constraint
    bad = False
    if c == ">0":
        bad = not value > 0
    elif c == ">=0":
        bad = not value >= 0
    elif c == ">=1":
        bad = not value >= 1
    elif c == ">=2":
        bad = not value >= 2
    elif c == "[0,1]":
        bad = not 0 <= value <= 1
    elif c == "(0,1]":
        bad = not 0 < value <= 1
    elif c.startswith("choice:"):
        choices = c.split(":", 1)[1].split(",")
        if value not in choices:
            raise ConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    elif c == "nonempty":
        bad = len(value) == 0
        if bad:
            raise ConfigError(f"{key} must be a non-empty list, got []")
    if bad:
        raise ConfigError(
            f"{key} must be {c.replace('[0,1]', 'in [0, 1]').replace('(0,1]', 'in (0, 1]')}, got {value!r}"
        )
    return value


def count_of(value: float | int, n: int) -> int:
    """A fraction (float) -> floor(x*n + 0.5); an integer is a count."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(math.floor(float(value) * n + 0.5))


@dataclass
class Scenario:
    """A resolved scenario: ``data[section][key]`` with every default filled in."""

    data: dict[str, dict[str, Any]]
    name: str = "scenario"
    path: Path | None = None
    overrides: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    """The overrides as given (dotted key -> value): ``attack.*`` / ``defense.*`` ones also apply to
    the attack or defense a command chooses (``run --attack``, every matrix entry that takes them)."""

    # convenient views
    def section(self, name: str) -> dict[str, Any]:
        return self.data[name]

    @property
    def base_dir(self) -> str | None:
        return str(self.path.parent) if self.path is not None else None

    def component(self, section: str) -> tuple[str, dict[str, Any]]:
        """(name, params) of a component section."""
        sec = dict(self.data[section])
        name = sec.pop("name")
        return name, sec

    def copy(self) -> Scenario:
        return Scenario(
            copy.deepcopy(self.data), self.name, self.path, list(self.overrides), dict(self.settings)
        )

    def with_values(self, values: Mapping[str, Any]) -> Scenario:
        """A copy with dotted keys set (a sweep point), re-validated."""
        raw = copy.deepcopy(self.data)
        for k, v in values.items():
            _set_dotted(raw, k, v)
        return Scenario(_resolve(raw), self.name, self.path, list(self.overrides), dict(self.settings))

    def byzantine_count(self) -> int:
        return count_of(self.data["threat"]["byzantine"], self.data["federation"]["clients"])

    def assumed_count(self, rows: int) -> int:
        """f-hat for a round with ``rows`` participants."""
        a = self.data["threat"]["assumed_byzantine"]
        if a is None:
            f = self.byzantine_count()
            k = self.data["federation"]["clients"]
            return f if rows == k else count_of(f / k, rows)
        return count_of(a, rows)

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)

    def hash(self) -> str:
        return config_hash(self.data)


def config_hash(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    section, dot, name = key.partition(".")
    if not dot or not section or not name:
        raise ConfigError(f"--set/sweep key {key!r} must look like section.key")
    if section not in SCHEMA:
        raise ConfigError(f"unknown scenario section {section!r} in {key!r} (sections: {', '.join(SCHEMA)})")
    raw.setdefault(section, {})[name] = value


def _resolve(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Fill defaults and validate; returns a new dict."""
    if not isinstance(raw, Mapping):
        raise ConfigError("a scenario must be a TOML table")
    for section in raw:
        if section not in SCHEMA:
            import difflib

            if not isinstance(raw[section], Mapping):  # a key outside any section
                homes = [s for s, keys in SCHEMA.items() if section in keys and section != "name"]
                where = f"; it belongs under [{homes[0]}]" if homes else ""
                raise ConfigError(f"scenario key {section!r} is outside any [section]{where}")
            close = difflib.get_close_matches(section, SCHEMA, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown scenario section [{section}]{hint} (sections: {', '.join(SCHEMA)})")
        if not isinstance(raw[section], Mapping):
            raise ConfigError(f"[{section}] must be a table, got {raw[section]!r}")
    out: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        given = dict(raw.get(section, {}))
        sec: dict[str, Any] = {}
        if section in COMPONENT_SECTIONS:
            name = given.pop("name", keys["name"][0])
            sec["name"] = _check_value(f"{section}.name", name, "str", "")
            if section in ("algorithm", "sharing"):
                from .federation import resolve_params  # the component validates its parameters

                sec.update(resolve_params(section, str(name), copy.deepcopy(given)))
            else:  # task / attack / defense: the component validates its own parameters
                sec.update(copy.deepcopy(given))
            out[section] = sec
            continue
        for k in given:
            if k not in keys:
                import difflib

                close = difflib.get_close_matches(k, keys, n=1)
                hint = f"; did you mean {section}.{close[0]}?" if close else ""
                raise ConfigError(f"unknown scenario key {section}.{k}{hint}")
        for k, (default, typ, cons) in keys.items():
            sec[k] = _check_value(f"{section}.{k}", copy.deepcopy(given.get(k, default)), typ, cons)
        out[section] = sec
    _check_relations(out)
    return out


PARTITION_OWNERS = {"alpha": "dirichlet", "q": "bias", "shards_per_client": "shards"}  # key -> its partition


def _check_relations(d: dict[str, dict[str, Any]]) -> None:
    part = d["partition"]
    for key, owner in PARTITION_OWNERS.items():  # a value set for another partition would do nothing
        if part["name"] != owner and part[key] != SCHEMA["partition"][key][0]:
            raise ConfigError(
                f"partition.{key} = {part[key]!r} applies to partition {owner!r} only, and this scenario's "
                f"partition is {part['name']!r}: set partition.name = {owner!r} or drop partition.{key}"
            )
    k = d["federation"]["clients"]
    byz = d["threat"]["byzantine"]
    if isinstance(byz, float) and byz > 1:
        raise ConfigError(f"threat.byzantine must be a fraction in [0, 1] or an integer count, got {byz!r}")
    f = count_of(byz, k)
    if f > k:
        raise ConfigError(
            f"threat.byzantine = {byz!r} gives {f} Byzantine clients, more than federation.clients = {k}"
        )
    a = d["threat"]["assumed_byzantine"]
    if isinstance(a, float) and a > 1:
        raise ConfigError(f"threat.assumed_byzantine must be a fraction in [0, 1] or a count, got {a!r}")
    if a is not None and count_of(a, k) > k:
        raise ConfigError(f"threat.assumed_byzantine = {a!r} exceeds federation.clients = {k}")
    if d["algorithm"]["name"] == "feddyn":
        if d["sharing"]["name"] == "psfed":
            raise ConfigError("algorithm feddyn with sharing psfed is not defined; choose one of them")
        if d["federation"]["server_lr"] != 1.0:
            raise ConfigError(
                f"federation.server_lr must be 1 with algorithm feddyn (its server step is its own), "
                f"got {d['federation']['server_lr']!r}"
            )
    for s in d["matrix"]["seeds"]:
        check_seed("matrix.seeds", s)
    for key in ("attacks", "defenses"):
        for item in d["matrix"][key]:
            if isinstance(item, str):
                continue
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise ConfigError(f"matrix.{key} items must be names or tables with a name, got {item!r}")
            if key == "defenses":
                _check_pre(item)
    _check_pre(d["defense"])
    for sk, values in d["matrix"]["sweep"].items():
        if isinstance(values, dict):  # {federation.clients = [...]}: TOML reads a dotted key as nesting
            inner = next(iter(values), "key")
            raise ConfigError(
                f"matrix.sweep.{sk} is a table: a sweep key is one quoted dotted name, "
                f'e.g. {{ "{sk}.{inner}" = [...] }}'
            )
        if not isinstance(values, list) or not values:
            raise ConfigError(f"matrix.sweep.{sk} must be a non-empty list, got {values!r}")
        section, dot, _ = sk.partition(".")
        if not dot or section not in SCHEMA or section in ("matrix", "bound"):
            raise ConfigError(f"matrix.sweep key {sk!r} must name a scenario key like threat.byzantine")


def _check_pre(spec: Mapping[str, Any]) -> None:
    """A defense's ``pre``: a list of pre-aggregator names or tables with a string ``name`` (its
    labels are built from it before the composition itself is validated)."""
    if "pre" not in spec:
        return
    pre = spec["pre"]
    if not isinstance(pre, list):
        raise ConfigError(f"defense.pre: expected a list, got {pre!r}")
    for item in pre:
        if not isinstance(item, str) and not (isinstance(item, dict) and isinstance(item.get("name"), str)):
            msg = f"defense.pre: entries must be a name or a table with a string 'name', got {item!r}"
            raise ConfigError(msg)


def parse_override(text: str) -> tuple[str, Any]:
    """``section.key=value``; the value is read as TOML (so 1.5, 3, true, "x", [1,2]), else a string."""
    key, eq, value = text.partition("=")
    key = key.strip()
    if not eq or "." not in key:
        raise ConfigError(f"--set {text!r} must look like section.key=value")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return key, parsed


MAX_SEED = 2**63 - 1  # a store keeps a cell's seed as an SQLite INTEGER


def check_seed(what: str, s: Any) -> int:
    """A seed: an integer in [0, 2**63 - 1] (a numpy integer as its int); else one line naming ``what``."""
    if isinstance(s, numbers.Integral) and not isinstance(s, bool | int):
        s = int(s)
    if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED:
        raise ConfigError(f"{what}: a seed must be an integer in [0, 2**63 - 1], got {s!r}")
    return s


def load_scenario(
    name_or_path: str | os.PathLike[str] | Mapping[str, Any] = "quick",
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
) -> Scenario:
    """Load a scenario by name (under scenarios/), by path, or from a dict; apply overrides."""
    if not isinstance(name_or_path, str | os.PathLike | Mapping):
        raise ConfigError(f"a scenario is a name, a path or a dict, got {name_or_path!r}")
    if overrides is not None and (isinstance(overrides, str) or not isinstance(overrides, Sequence | Mapping)
                                  or not all(isinstance(o, str) for o in overrides)):
        raise ConfigError(f"overrides must be a list of 'section.key=value' strings or a dict keyed by "
                          f"'section.key', got {overrides!r}")
    if isinstance(name_or_path, Mapping):
        raw: dict[str, Any] = copy.deepcopy(dict(name_or_path))
        path, name = None, "scenario"
    else:
        path = find_scenario(name_or_path)
        name = path.stem
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"scenario {str(path)!r} is not valid TOML: {exc}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read scenario {str(path)!r}: {exc}") from None
    texts: list[str] = []
    settings: dict[str, Any] = {}
    if overrides:
        items = (
            overrides.items() if isinstance(overrides, Mapping) else [parse_override(o) for o in overrides]
        )
        for k, v in items:
            _set_dotted(raw, k, v)
            texts.append(f"{k}={v!r}")
            settings[k.strip()] = copy.deepcopy(v)
    return Scenario(_resolve(raw), name, path.resolve() if path else None, texts, settings)
