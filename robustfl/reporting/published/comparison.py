"""A store's cells set beside a published table, per sweep point.

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
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from robustfl.simulation.results import Cell, clean_number

from ..summaries import sweep_label, t975
from .tables import PublishedTable


def t_halfwidth(values: Sequence[float]) -> float:
    """Half-width of the two-sided 95 % Student-t interval for the mean (NaN for n < 2)."""
    n = len(values)
    if n < 2:
        return math.nan
    return t975(n - 1) * statistics.stdev(values) / math.sqrt(n)


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
        return mean_text(self.mean, self.ci95, self.n)


def mean_text(mean: float, ci95: float, n: int) -> str:
    """``0.123 ± 0.045 (n=3)``; the mean alone (with n) for one seed or no interval."""
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
    store_scenario: str | None = None  # the scenario the store ran, when known

    @property
    def other_scenario(self) -> bool:
        """The store ran a scenario other than the table's (a table chosen by name): its
        settings may not be the paper's, and the views say so."""
        return self.store_scenario is not None and self.store_scenario != self.table.scenario

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
            "store_scenario": self.store_scenario,
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
    from scipy import stats  # here, not with the module: scipy.stats costs ~1 s to import

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


def compare_published(
    cells: Iterable[Cell], table: PublishedTable, store_scenario: str | None = None
) -> Comparison:
    """The table beside the cells, per sweep point (see the module doc); ``store_scenario``: the
    scenario name the store ran (:func:`scenario_name`), when known."""
    by_point: dict[str, list[Cell]] = {}
    for c in cells:
        by_point.setdefault(sweep_label(c.sweep), []).append(c)
    if not by_point:
        by_point[""] = []
    sections = tuple(_compare_point(cs, table, p) for p, cs in by_point.items())
    return Comparison(table, sections, store_scenario)
