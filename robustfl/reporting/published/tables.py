"""Published tables as data: one table of one paper per TOML file, parsed and checked, and the
tables that match a store.

A file under ``scenarios/published/`` (TOML) holds one table of one paper::

    [paper]      authors = [...], title, venue, year, url (doi optional)
    [table]      number ("I(a)"), caption, setting (in words), metric = "error_rate",
                 backdoor_metric = "attack_success_rate", scenario (the robustfl scenario it
                 matches, e.g. "fltrust-mnist"), tolerance (absolute), asr_tolerance (optional,
                 default: tolerance), verified (bool), source (where the numbers were read), note
    [attacks]    the paper's columns, in its order -> one robustfl attack label, or a list of
                 labelled variants (the comparison takes the strongest present: the highest mean
                 error), or [] (no robustfl counterpart: shown, not compared)
    [rules]      the paper's rows -> robustfl defense labels
    [rows."R"]   the numbers of row R: column = test error rate, or [error rate, attack success
                 rate] for a backdoor column
    [overrides."R"]  column = label(s): row R maps that column to other labels (optional)
    [row_tables]     R = "III": row R comes from another table of the paper (optional)

Every key is checked; a bad file is a :class:`~robustfl.errors.ConfigError` (exit 2) whose one
line names the file and the value.

:func:`match_tables` picks the tables for a store: ``auto`` matches the scenario name the store
recorded (its provenance's ``scenario_name``, else the stem of ``scenario_path``), ``none`` none,
anything else names a table (comma-separated for several).
"""

from __future__ import annotations

import contextlib
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from robustfl.errors import ConfigError

METRICS = ("error_rate",)
BACKDOOR_METRICS = ("attack_success_rate",)

_SECTIONS = ("paper", "table", "attacks", "rules", "rows", "overrides", "row_tables")
_PAPER_KEYS = {"authors": "list", "title": "str", "venue": "str", "year": "int", "url": "str", "doi": "str"}
_PAPER_REQUIRED = ("authors", "title", "venue", "year")
_TABLE_KEYS = {
    "number": "str",
    "caption": "str",
    "setting": "str",
    "metric": "str",
    "backdoor_metric": "str",
    "scenario": "str",
    "tolerance": "float",
    "asr_tolerance": "float",
    "verified": "bool",
    "source": "str",
    "note": "str",
}
_TABLE_REQUIRED = ("number", "setting", "metric", "scenario", "tolerance", "verified")


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paper:
    authors: tuple[str, ...]
    title: str
    venue: str
    year: int
    url: str = ""
    doi: str = ""

    def cite(self) -> str:
        """``Fang et al., NDSS 2025``."""
        surname = self.authors[0].split()[-1] if self.authors else "?"
        who = (
            surname
            if len(self.authors) == 1
            else (
                f"{surname} and {self.authors[1].split()[-1]}"
                if len(self.authors) == 2
                else f"{surname} et al."
            )
        )
        return f"{who}, {self.venue} {self.year}"


@dataclass(frozen=True)
class PublishedTable:
    """One table of one paper (see the module doc for the file format)."""

    name: str
    paper: Paper
    number: str
    setting: str
    scenario: str
    tolerance: float
    verified: bool
    attacks: tuple[str, ...]
    rules: tuple[str, ...]
    attack_labels: Mapping[str, tuple[str, ...]]
    rule_labels: Mapping[str, str]
    error: Mapping[tuple[str, str], float]  # (rule, attack) -> published error rate
    asr: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (rule, attack) -> ASR
    overrides: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    row_tables: Mapping[str, str] = field(default_factory=dict)
    caption: str = ""
    metric: str = "error_rate"
    backdoor_metric: str = "attack_success_rate"
    asr_tolerance: float | None = None
    source: str = ""
    note: str = ""
    path: Path | None = None

    @property
    def title(self) -> str:
        """``Fang et al., NDSS 2025, Table I(a)``."""
        return f"{self.paper.cite()}, Table {self.number}"

    def labels_for(self, rule: str, attack: str) -> tuple[str, ...]:
        """The robustfl attack labels the paper's ``attack`` column maps to in ``rule``'s row."""
        return self.overrides.get((rule, attack), self.attack_labels[attack])

    def asr_tol(self) -> float:
        return self.tolerance if self.asr_tolerance is None else self.asr_tolerance


def _where(path: Path | str) -> str:
    return f"published table {str(path)!r}"


def _check_type(where: str, key: str, value: Any, kind: str) -> Any:
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "list": isinstance(value, list) and all(isinstance(v, str) for v in value),
    }[kind]
    if not ok:
        expected = {"list": "a list of strings", "float": "a number", "int": "an integer"}.get(
            kind, f"a {kind}"
        )
        raise ConfigError(f"{where}: {key} must be {expected}, got {value!r}")
    return float(value) if kind == "float" else value


def _section(
    where: str, raw: Mapping[str, Any], name: str, keys: Mapping[str, str], required: Sequence[str]
) -> dict[str, Any]:
    sec = raw.get(name)
    if not isinstance(sec, Mapping):
        raise ConfigError(f"{where}: [{name}] is missing or not a table")
    for key in sec:
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {name}.{key} (known: {', '.join(keys)})")
    for key in required:
        if key not in sec:
            raise ConfigError(f"{where}: {name}.{key} is missing")
    return {k: _check_type(where, f"{name}.{k}", v, keys[k]) for k, v in sec.items()}


def _labels(where: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ConfigError(f"{where}: {key} must be a robustfl label or a list of labels, got {value!r}")


def _rate(where: str, key: str, value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    raise ConfigError(f"{where}: {key} must be a rate in [0, 1], got {value!r}")


def parse_table(raw: Mapping[str, Any], name: str, path: Path | None = None) -> PublishedTable:
    """A :class:`PublishedTable` from a parsed TOML document (see the module doc)."""
    where = _where(path if path is not None else name)
    for sec in raw:
        if sec not in _SECTIONS:
            raise ConfigError(f"{where}: unknown section [{sec}] (known: {', '.join(_SECTIONS)})")
    paper = _section(where, raw, "paper", _PAPER_KEYS, _PAPER_REQUIRED)
    if not paper["authors"]:
        raise ConfigError(f"{where}: paper.authors must list at least one author, got []")
    table = _section(where, raw, "table", _TABLE_KEYS, _TABLE_REQUIRED)
    if table["metric"] not in METRICS:
        raise ConfigError(
            f"{where}: table.metric must be one of {', '.join(METRICS)}, got {table['metric']!r}"
        )
    backdoor = table.get("backdoor_metric", "attack_success_rate")
    if backdoor not in BACKDOOR_METRICS:
        raise ConfigError(
            f"{where}: table.backdoor_metric must be one of {', '.join(BACKDOOR_METRICS)}, got {backdoor!r}"
        )
    for key in ("tolerance", "asr_tolerance"):
        if key in table and not (math.isfinite(table[key]) and 0.0 <= table[key] <= 1.0):
            raise ConfigError(f"{where}: table.{key} must be in [0, 1], got {table[key]!r}")

    attacks_raw = raw.get("attacks")
    if not isinstance(attacks_raw, Mapping) or not attacks_raw:
        raise ConfigError(f"{where}: [attacks] must map the paper's columns to robustfl labels")
    attack_labels: dict[str, tuple[str, ...]] = {}
    for a, v in attacks_raw.items():
        attack_labels[a] = () if v == [] else _labels(where, f"attacks.{a!r}", v)
    rules_raw = raw.get("rules")
    if not isinstance(rules_raw, Mapping) or not rules_raw:
        raise ConfigError(f"{where}: [rules] must map the paper's rows to robustfl defense labels")
    rule_labels: dict[str, str] = {}
    for r, v in rules_raw.items():
        if not isinstance(v, str) or not v:
            raise ConfigError(f"{where}: rules.{r!r} must be one robustfl defense label, got {v!r}")
        rule_labels[r] = v

    rows = raw.get("rows")
    if not isinstance(rows, Mapping) or not rows:
        raise ConfigError(f"{where}: [rows] is missing: no published numbers")
    error: dict[tuple[str, str], float] = {}
    asr: dict[tuple[str, str], float] = {}
    for rule, row in rows.items():
        if rule not in rule_labels:
            raise ConfigError(f"{where}: rows.{rule!r} is not one of the [rules] ({', '.join(rule_labels)})")
        if not isinstance(row, Mapping):
            raise ConfigError(f"{where}: rows.{rule!r} must be a table of numbers, got {row!r}")
        for attack, value in row.items():
            key = f"rows.{rule!r}.{attack!r}"
            if attack not in attack_labels:
                raise ConfigError(
                    f"{where}: {key}: {attack!r} is not one of the [attacks] ({', '.join(attack_labels)})"
                )
            if isinstance(value, list):
                if len(value) != 2:
                    raise ConfigError(
                        f"{where}: {key} must be an error rate or [error rate, attack success rate], "
                        f"got {value!r}"
                    )
                error[(rule, attack)] = _rate(where, key, value[0])
                asr[(rule, attack)] = _rate(where, key, value[1])
            else:
                error[(rule, attack)] = _rate(where, key, value)

    overrides: dict[tuple[str, str], tuple[str, ...]] = {}
    for rule, sec in dict(raw.get("overrides") or {}).items():
        if rule not in rule_labels or not isinstance(sec, Mapping):
            raise ConfigError(
                f"{where}: overrides.{rule!r} must be a table for one of the [rules] "
                f"({', '.join(rule_labels)})"
            )
        for attack, v in sec.items():
            if attack not in attack_labels:
                raise ConfigError(
                    f"{where}: overrides.{rule!r}.{attack!r}: {attack!r} is not one of the [attacks]"
                )
            overrides[(rule, attack)] = () if v == [] else _labels(where, f"overrides.{rule!r}.{attack!r}", v)
    row_tables: dict[str, str] = {}
    for rule, v in dict(raw.get("row_tables") or {}).items():
        if rule not in rule_labels:
            raise ConfigError(f"{where}: row_tables.{rule!r} is not one of the [rules]")
        row_tables[rule] = _check_type(where, f"row_tables.{rule!r}", v, "str")

    return PublishedTable(
        name=name,
        paper=Paper(
            authors=tuple(paper["authors"]),
            title=paper["title"],
            venue=paper["venue"],
            year=paper["year"],
            url=paper.get("url", ""),
            doi=paper.get("doi", ""),
        ),
        number=table["number"],
        setting=" ".join(table["setting"].split()),
        scenario=table["scenario"],
        tolerance=table["tolerance"],
        verified=table["verified"],
        attacks=tuple(attack_labels),
        rules=tuple(rule_labels),
        attack_labels=attack_labels,
        rule_labels=rule_labels,
        error=error,
        asr=asr,
        overrides=overrides,
        row_tables=row_tables,
        caption=" ".join(table.get("caption", "").split()),
        metric=table["metric"],
        backdoor_metric=backdoor,
        asr_tolerance=table.get("asr_tolerance"),
        source=" ".join(table.get("source", "").split()),
        note=" ".join(table.get("note", "").split()),
        path=path,
    )


def load_table(path: str | Path) -> PublishedTable:
    """One published table from its TOML file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{_where(p)}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{_where(p)}: not a text (TOML) file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{_where(p)}: not valid TOML: {exc}") from None
    return parse_table(raw, p.stem, p)


def table_dirs() -> list[Path]:
    """Where the shipped tables are: the checkout's scenarios/published/, then the installed copy."""
    dirs = [Path(__file__).resolve().parents[3] / "scenarios" / "published"]
    with contextlib.suppress(Exception):
        dirs.append(Path(str(resources.files("robustfl") / "scenarios" / "published")))
    seen: dict[Path, Path] = {}
    for d in dirs:
        if d.is_dir():
            seen.setdefault(d.resolve(), d)
    return list(seen.values())


def load_tables(directory: str | Path | None = None) -> list[PublishedTable]:
    """Every table under ``directory`` (default: the shipped ones), sorted by name; the first
    directory that has a name wins."""
    if directory is not None and not Path(directory).is_dir():  # it read as "no tables"
        raise ConfigError(f"published tables: {str(directory)!r} is not a folder of table files")
    dirs = [Path(directory)] if directory is not None else table_dirs()
    found: dict[str, PublishedTable] = {}
    for d in dirs:
        for p in sorted(d.glob("*.toml")):
            if p.stem not in found:
                found[p.stem] = load_table(p)
    return [found[k] for k in sorted(found)]


def scenario_name(scenario: Mapping[str, Any] | None, provenance: Mapping[str, Any] | None) -> str | None:
    """The scenario name a store recorded: provenance ``scenario_name`` (or ``scenario``, when a
    string), else the stem of ``scenario_path``; None when it recorded neither."""
    prov = provenance if isinstance(provenance, Mapping) else {}
    for key in ("scenario_name", "scenario"):
        if isinstance(prov.get(key), str) and prov[key]:
            return str(prov[key])
    path = prov.get("scenario_path")
    if isinstance(path, str) and path:
        return Path(path).stem
    return None


def match_tables(
    scenario: Mapping[str, Any] | None,
    provenance: Mapping[str, Any] | None,
    published: str = "auto",
    tables: Sequence[PublishedTable] | None = None,
) -> list[PublishedTable]:
    """The tables to set beside a store: ``auto`` (those whose ``scenario`` is the store's
    scenario name), ``none``, or table names, comma-separated (an unknown one: ConfigError)."""
    choice = published.strip()
    if choice == "none":
        return []
    pool = list(tables) if tables is not None else load_tables()
    if choice == "auto":
        name = scenario_name(scenario, provenance)
        return [t for t in pool if name is not None and t.scenario == name]
    by_name = {t.name: t for t in pool}
    out = []
    for want in (w.strip() for w in choice.split(",")):
        if not want:
            continue
        if want not in by_name:
            from robustfl.errors import UnknownNameError

            raise UnknownNameError("published table", want, sorted(by_name))
        out.append(by_name[want])
    if not out:
        raise ConfigError(f"--published must be auto, none or table names, got {published!r}")
    return out
