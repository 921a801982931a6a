"""Published tables as data: the numbers a paper reports, beside what a store measured.

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

:func:`compare_published` sets a store's cells beside a table. The measured error of a cell is
``1 - accuracy`` at the end of training, per seed; it shows the mean over the seeds that ran to
``ok``, the half-width of the two-sided 95 % Student-t interval ``t_{0.975, n-1} * s / sqrt(n)``
(NaN for one seed) and n; diverged seeds make the cell ``diverged`` (worst, +inf), failed ones
are left out and counted. ``difference = measured mean - published``; a cell whose
``|difference| > tolerance`` is flagged (likewise the attack success rate, where the paper gives
one). Per column, Kendall's tau-b (:func:`scipy.stats.kendalltau`) between the paper's error
rates over the rules and the measured ones says whether the rules come in the same order; it is
undefined (None, with the reason) for fewer than two rules or when either side is all ties.
Cells are compared per sweep point (a store without a sweep has one, labelled "").

:func:`match_tables` picks the tables for a store: ``auto`` matches the scenario name the store
recorded (its provenance's ``scenario_name``, else the stem of ``scenario_path``), ``none`` none,
anything else names a table (comma-separated for several).
"""

from __future__ import annotations

import contextlib
import html
import math
import statistics
import tomllib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from scipy import stats

from robustfl.errors import ConfigError
from robustfl.simulation.results import Cell, clean_number

METRICS = ("error_rate",)
BACKDOOR_METRICS = ("attack_success_rate",)
FLAG = "⚠"

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
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{_where(p)}: not valid TOML: {exc}") from None
    return parse_table(raw, p.stem, p)


def table_dirs() -> list[Path]:
    """Where the shipped tables are: the checkout's scenarios/published/, then the installed copy."""
    dirs = [Path(__file__).resolve().parents[2] / "scenarios" / "published"]
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


# -- the comparison -----------------------------------------------------------------------------


def t_halfwidth(values: Sequence[float]) -> float:
    """Half-width of the two-sided 95 % Student-t interval for the mean (NaN for n < 2)."""
    n = len(values)
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n))


@dataclass(frozen=True)
class Measured:
    """One robustfl (attack, defense) group over its seeds."""

    attack: str
    defense: str
    status: str  # ok | diverged | failed | n/a (no accuracy recorded)
    n: int  # seeds with a value
    mean: float  # error rate (1 - accuracy); +inf when diverged
    ci95: float
    asr_n: int
    asr_mean: float
    asr_ci95: float
    diverged: int
    failed: int

    def text(self) -> str:
        if self.status == "diverged":
            return f"diverged ({self.diverged}/{self.n + self.diverged})" if self.n else "diverged"
        if self.status != "ok":
            return self.status
        return _mean_text(self.mean, self.ci95, self.n)


def _mean_text(mean: float, ci95: float, n: int) -> str:
    if n > 1 and math.isfinite(ci95):
        return f"{mean:.3f} ± {ci95:.3f} (n={n})"
    return f"{mean:.3f} (n={n})"


def measure(cells: Iterable[Cell], attack: str, defense: str) -> Measured | None:
    """The group's error rate and attack success rate over seeds; None when the cells hold no
    such group."""
    group = [c for c in cells if c.attack == attack and c.defense == defense]
    if not group:
        return None
    ok = [c for c in group if c.status == "ok"]
    diverged = sum(c.status == "diverged" for c in group)
    failed = len(group) - len(ok) - diverged
    errors, asrs = [], []
    for c in ok:
        acc = clean_number(c.final.get("accuracy"))
        if acc is not None:
            errors.append(1.0 - float(acc))
        a = clean_number(c.final.get("attack_success_rate"))
        if a is not None:
            asrs.append(float(a))
    if diverged:
        status, mean, ci = "diverged", math.inf, math.nan
    elif errors:
        status, mean, ci = "ok", statistics.fmean(errors), t_halfwidth(errors)
    else:
        status, mean, ci = ("n/a" if ok else "failed"), math.nan, math.nan
    return Measured(
        attack=attack,
        defense=defense,
        status=status,
        n=len(errors),
        mean=mean,
        ci95=ci,
        asr_n=len(asrs),
        asr_mean=statistics.fmean(asrs) if asrs else math.nan,
        asr_ci95=t_halfwidth(asrs),
        diverged=diverged,
        failed=failed,
    )


@dataclass(frozen=True)
class CellComparison:
    """One (paper attack, paper rule) cell."""

    attack: str  # the paper's column
    rule: str  # the paper's row
    defense: str  # robustfl defense label
    candidates: tuple[str, ...]  # robustfl attack labels it maps to
    present: tuple[str, ...]  # those the store holds for this defense
    measured: Measured | None  # the strongest of them (None: not run / not mapped)
    published: float | None
    published_asr: float | None
    difference: float | None
    asr_difference: float | None
    outside: bool
    asr_outside: bool

    @property
    def status(self) -> str:
        """``compared``, ``not mapped`` (no robustfl counterpart), ``not run`` (not in the store),
        ``not published``, or the measured group's status (diverged / failed / n/a)."""
        if not self.candidates:
            return "not mapped"
        if self.published is None:
            return "not published"
        if self.measured is None:
            return "not run"
        return "compared" if self.measured.status == "ok" else self.measured.status

    @property
    def chosen(self) -> str | None:
        return self.measured.attack if self.measured is not None else None

    @property
    def strongest_of(self) -> bool:
        """Several labelled variants were in the store and the strongest was taken."""
        return len(self.present) > 1

    def to_json(self) -> dict[str, Any]:
        m = self.measured
        return {
            "attack": self.attack,
            "rule": self.rule,
            "defense": self.defense,
            "candidates": list(self.candidates),
            "present": list(self.present),
            "chosen": self.chosen,
            "status": self.status,
            "n": m.n if m else 0,
            "diverged": m.diverged if m else 0,
            "failed": m.failed if m else 0,
            "measured": _num(m.mean) if m else None,
            "ci95": _num(m.ci95) if m else None,
            "published": self.published,
            "difference": self.difference,
            "outside": self.outside,
            "measured_asr": _num(m.asr_mean) if m else None,
            "asr_ci95": _num(m.asr_ci95) if m else None,
            "published_asr": self.published_asr,
            "asr_difference": self.asr_difference,
            "asr_outside": self.asr_outside,
        }


@dataclass(frozen=True)
class RankAgreement:
    """Kendall's tau-b between the paper's and the measured error rates over the rules of one column."""

    attack: str
    rules: tuple[str, ...]  # the rules compared (both sides have a value)
    tau: float | None
    p_value: float | None
    reason: str = ""  # why tau is undefined

    def text(self) -> str:
        if self.tau is None:
            return f"undefined ({self.reason})"
        return f"{self.tau:+.2f} over {len(self.rules)} rules"

    def to_json(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "rules": list(self.rules),
            "tau": self.tau,
            "p_value": self.p_value,
            "reason": self.reason or None,
        }


@dataclass(frozen=True)
class Section:
    """The comparison at one sweep point."""

    point: str
    cells: tuple[CellComparison, ...]
    ranks: tuple[RankAgreement, ...]


@dataclass(frozen=True)
class Comparison:
    table: PublishedTable
    sections: tuple[Section, ...]

    @property
    def compared(self) -> int:
        return sum(c.status == "compared" for s in self.sections for c in s.cells)

    @property
    def flagged(self) -> int:
        return sum(c.outside or c.asr_outside for s in self.sections for c in s.cells)

    def to_json(self) -> dict[str, Any]:
        t = self.table
        return {
            "table": t.name,
            "paper": {
                "authors": list(t.paper.authors),
                "title": t.paper.title,
                "venue": t.paper.venue,
                "year": t.paper.year,
                "url": t.paper.url or None,
                "doi": t.paper.doi or None,
            },
            "number": t.number,
            "setting": t.setting,
            "metric": t.metric,
            "backdoor_metric": t.backdoor_metric,
            "scenario": t.scenario,
            "tolerance": t.tolerance,
            "asr_tolerance": t.asr_tol(),
            "verified": t.verified,
            "source": t.source or None,
            "note": t.note or None,
            "sections": [
                {
                    "sweep": s.point,
                    "cells": [c.to_json() for c in s.cells],
                    "ranks": [r.to_json() for r in s.ranks],
                }
                for s in self.sections
            ],
        }


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _strength(m: Measured) -> float:
    return m.mean if m.status in ("ok", "diverged") else -math.inf


def _strongest(found: Sequence[Measured]) -> Measured | None:
    """The highest mean error (diverged = +inf); first on ties; groups without a value lose."""
    return max(found, key=_strength) if found else None


def kendall(attack: str, pairs: Sequence[tuple[str, float, float]]) -> RankAgreement:
    """Kendall's tau-b of ``(rule, published, measured)`` triples; diverged (+inf) ranks worst."""
    rules = tuple(r for r, _, _ in pairs)
    if len(pairs) < 2:
        return RankAgreement(
            attack, rules, None, None, f"{len(pairs)} rule{'s' if len(pairs) != 1 else ''} compared"
        )
    pub = [p for _, p, _ in pairs]
    top = max([m for _, _, m in pairs if math.isfinite(m)], default=0.0)
    mea = [m if math.isfinite(m) else top + 1.0 for _, _, m in pairs]
    if len(set(pub)) == 1:
        return RankAgreement(attack, rules, None, None, "the published values are all tied")
    if len(set(mea)) == 1:
        return RankAgreement(attack, rules, None, None, "the measured values are all tied")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.kendalltau(pub, mea)
    tau, p = float(res.statistic), float(res.pvalue)
    if not math.isfinite(tau):
        return RankAgreement(attack, rules, None, None, "undefined")
    return RankAgreement(attack, rules, tau, p if math.isfinite(p) else None)


def _compare_point(cells: Sequence[Cell], table: PublishedTable, point: str) -> Section:
    out: list[CellComparison] = []
    ranks: list[RankAgreement] = []
    tol, asr_tol = table.tolerance, table.asr_tol()
    for attack in table.attacks:
        pairs: list[tuple[str, float, float]] = []
        for rule in table.rules:
            defense = table.rule_labels[rule]
            candidates = table.labels_for(rule, attack)
            found = [m for m in (measure(cells, a, defense) for a in candidates) if m is not None]
            m = _strongest(found) if candidates else None
            pub = table.error.get((rule, attack))
            pub_asr = table.asr.get((rule, attack))
            diff = asr_diff = None
            if m is not None and m.status == "ok" and pub is not None:
                diff = m.mean - pub
            if m is not None and m.asr_n and pub_asr is not None:
                asr_diff = m.asr_mean - pub_asr
            if m is not None and pub is not None and m.status in ("ok", "diverged") and candidates:
                pairs.append((rule, pub, m.mean))
            out.append(
                CellComparison(
                    attack=attack,
                    rule=rule,
                    defense=defense,
                    candidates=candidates,
                    present=tuple(f.attack for f in found),
                    measured=m,
                    published=pub,
                    published_asr=pub_asr,
                    difference=diff,
                    asr_difference=asr_diff,
                    outside=(diff is not None and abs(diff) > tol + 1e-12)
                    or (m is not None and m.status == "diverged" and pub is not None),
                    asr_outside=asr_diff is not None and abs(asr_diff) > asr_tol + 1e-12,
                )
            )
        if any(table.labels_for(r, attack) for r in table.rules):
            ranks.append(kendall(attack, pairs))
    return Section(point, tuple(out), tuple(ranks))


def compare_published(cells: Iterable[Cell], table: PublishedTable) -> Comparison:
    """The table beside the cells, per sweep point (see the module doc)."""
    from robustfl.simulation.report import sweep_label

    by_point: dict[str, list[Cell]] = {}
    for c in cells:
        by_point.setdefault(sweep_label(c.sweep), []).append(c)
    if not by_point:
        by_point[""] = []
    return Comparison(table, tuple(_compare_point(cs, table, p) for p, cs in by_point.items()))


# -- text ---------------------------------------------------------------------------------------

HEADERS = (
    "attack (paper → robustfl)",
    "rule",
    "measured error",
    "published",
    "difference",
    "flag",
    "measured ASR",
    "published ASR",
    "ASR difference",
)


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.3f}"


def _pub(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def attack_text(c: CellComparison) -> str:
    """``Min-Max attack → min_max_std (strongest of min_max, min_max_std)``."""
    if not c.candidates:
        return f"{c.attack} → (no robustfl counterpart)"
    if c.chosen is None:
        return f"{c.attack} → {', '.join(c.candidates)}"
    if c.strongest_of:
        return f"{c.attack} → {c.chosen} (strongest of {', '.join(c.present)})"
    return f"{c.attack} → {c.chosen}"


def row_cells(c: CellComparison) -> list[str]:
    """The text of one comparison row (:data:`HEADERS`); the flag column holds ``⚠`` or ``ok``."""
    m = c.measured
    status = c.status
    if status == "compared" and m is not None:
        measured = m.text()
        if m.failed:
            measured += f" ({m.failed} failed)"
    elif status == "not mapped":
        measured = "not compared"
    elif status == "not published":
        measured = m.text() if m is not None else "—"
    else:
        measured = m.text() if m is not None and status != "not run" else status
    flag = FLAG if c.outside or c.asr_outside else ("ok" if status == "compared" else "")
    if c.published_asr is not None or (m is not None and m.asr_n):
        asr = _mean_text(m.asr_mean, m.asr_ci95, m.asr_n) if m is not None and m.asr_n else "—"
        asr_cells = [asr, _pub(c.published_asr), _signed(c.asr_difference)]
    else:
        asr_cells = ["", "", ""]
    rule = c.rule if c.rule == c.defense else f"{c.rule} ({c.defense})"
    return [attack_text(c), rule, measured, _pub(c.published), _signed(c.difference), flag, *asr_cells]


def header_lines(comp: Comparison) -> list[str]:
    """The paper, the setting, what is compared, and whether the numbers were verified."""
    t = comp.table
    title = t.paper.title if t.paper.title[-1:] in ".?!" else t.paper.title + "."
    lines = [f"{', '.join(t.paper.authors)}. {title} {t.paper.venue} {t.paper.year}."]
    if t.paper.url:
        lines[0] += f" {t.paper.url}"
    lines.append(f"Table {t.number}" + (f": {t.caption}" if t.caption else ""))
    if t.row_tables:
        lines.append(
            "Rows from other tables: " + ", ".join(f"{r} (Table {n})" for r, n in t.row_tables.items())
        )
    lines.append(f"Setting: {t.setting}")
    lines.append(
        f"Metric: test error rate = 1 − final accuracy; attack success rate (ASR) for backdoor cells. "
        f"Measured: mean over seeds ± half-width of the 95 % Student-t interval (n seeds). "
        f"Flagged {FLAG}: |difference| > {t.tolerance:g} (ASR: > {t.asr_tol():g}). "
        f"Attacks mapped to several labelled variants take the strongest (highest mean error) in the store."
    )
    verified = f"Numbers {'' if t.verified else 'NOT '}verified against the paper."
    lines.append(verified + (f" Source: {t.source}" if t.source else ""))
    if t.note:
        lines.append(f"Note: {t.note}")
    return lines


def summary_line(comp: Comparison) -> str:
    cells = [c for s in comp.sections for c in s.cells]
    not_run = sum(c.status == "not run" for c in cells)
    text = f"{comp.compared} cells compared, {comp.flagged} outside the tolerance"
    if not_run:
        text += f", {not_run} not in the store"
    return text


def to_markdown(comparisons: Sequence[Comparison]) -> str:
    """``## Measured vs published`` sections, one per table; empty when there are none."""
    parts: list[str] = []
    for comp in comparisons:
        parts.append(f"## Measured vs published: {_md(comp.table.title)}\n")
        parts.append("  \n".join(_md(line) for line in header_lines(comp)) + "\n")
        for s in comp.sections:
            if s.point:
                parts.append(f"**{_md(s.point)}**\n")
            lines = ["| " + " | ".join(HEADERS) + " |", "|---|---|" + "---:|" * (len(HEADERS) - 2)]
            lines += ["| " + " | ".join(_md(x) for x in row_cells(c)) + " |" for c in s.cells]
            parts.append("\n".join(lines) + "\n")
            parts.append(
                "| attack (paper) | Kendall τ, published vs measured order of the rules |\n|---|---|"
            )
            parts[-1] += "".join(f"\n| {_md(r.attack)} | {_md(r.text())} |" for r in s.ranks) + "\n"
        parts.append(summary_line(comp) + "\n")
    return "\n".join(parts)


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def to_html(comparisons: Sequence[Comparison], heading: str = "h2") -> str:
    """``<section class="published">`` per table (empty string when there are none)."""
    e = html.escape
    out: list[str] = []
    for comp in comparisons:
        out.append(f'<section class="published" data-table="{e(comp.table.name)}">')
        out.append(f"<{heading}>Measured vs published: {e(comp.table.title)}</{heading}>")
        out.append('<p class="note">' + "<br>".join(e(line) for line in header_lines(comp)) + "</p>")
        for s in comp.sections:
            if s.point:
                out.append(f"<h3>{e(s.point)}</h3>")
            out.append('<table class="published-cells"><thead><tr>')
            out.append(
                "".join(
                    f'<th class="l">{e(h)}</th>' if i < 2 else f"<th>{e(h)}</th>"
                    for i, h in enumerate(HEADERS)
                )
            )
            out.append("</tr></thead><tbody>")
            for c in s.cells:
                texts = row_cells(c)
                style = ' style="background:#ffcc80"' if c.outside or c.asr_outside else ""
                tds = "".join(
                    f'<td class="l">{e(x)}</td>' if i < 2 else f"<td>{e(x)}</td>" for i, x in enumerate(texts)
                )
                out.append(f"<tr{style}>{tds}</tr>")
            out.append("</tbody></table>")
            out.append('<table class="published-ranks"><thead><tr><th class="l">attack (paper)</th>')
            out.append("<th>Kendall τ, published vs measured order of the rules</th></tr></thead><tbody>")
            out += [f'<tr><td class="l">{e(r.attack)}</td><td>{e(r.text())}</td></tr>' for r in s.ranks]
            out.append("</tbody></table>")
        out.append(f'<p class="note">{e(summary_line(comp))}</p>')
        out.append("</section>")
    return "\n".join(out)
