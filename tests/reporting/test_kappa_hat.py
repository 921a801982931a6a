"""Issue 15, item 3: κ̂ (max over a cell's rounds of aggregation_error², mean over seeds) in the
"worst case" row, and the worst_case attack set against the worst fixed one -- every number by hand."""

from __future__ import annotations

import csv
import html
import io
import json
import math
from typing import Any

import pytest

from robustfl import reporting as report
from robustfl.reporting.page import page as html_page
from robustfl.simulation.results import Cell

from .. import factories


def kcell(attack: str, defense: str, seed: int, drift: float | None, errors: list[float | None],
          status: str = "ok", **kw: Any) -> Cell:
    """A cell whose measured rounds record ``errors`` as aggregation_error (final: ``drift``)."""
    rounds = [{"round": r, "relative_drift": drift, "aggregation_error": e} for r, e in enumerate(errors, 1)]
    return factories.cell(attack, defense, seed, drift, status, rounds=rounds, **kw)


def matrix(with_worst_case: bool = True) -> list[Cell]:
    """none / alie / sign_flip (/ worst_case) x median, 2 seeds.

    κ̂ by hand: alie seed 0: max(1, 9, 4) = 9, seed 1: max(4, 1) = 4 (None skipped) -> 6.5;
    sign_flip: 1.5² = 2.25 both seeds; worst_case: 4² = 16 and 5² = 25 -> 20.5; none: 0.25.
    Means: none 0.9 (a clean run worse than every attack: not a fixed attack, never compared),
    alie 0.4, sign_flip 0.3, worst_case 0.55.
    """
    out = []
    for s in range(2):
        out += [
            kcell("none", "median", s, 0.9, [0.5, 0.25]),
            kcell("alie", "median", s, 0.4, [[1.0, 3.0, 2.0], [2.0, None, 1.0]][s]),
            kcell("sign_flip", "median", s, 0.3, [1.0, 1.5]),
        ]
        if with_worst_case:
            out.append(kcell("worst_case", "median", s, 0.55, [[4.0, None, 2.0], [5.0, 1.0]][s]))
    return out


def test_cell_kappa_is_the_largest_squared_aggregation_error() -> None:
    assert report.cell_kappa(kcell("a", "d", 0, 0.1, [1.0, 3.0, 2.0])) == 9.0
    assert report.cell_kappa(kcell("a", "d", 0, 0.1, [None, 0.5, None])) == 0.25  # None rounds skipped
    assert report.cell_kappa(kcell("a", "d", 0, 0.1, [None, None])) is None
    assert report.cell_kappa(factories.cell("a", "d", 0, 0.1)) is None  # no rounds recorded
    assert report.cell_kappa(kcell("a", "d", 0, 0.1, [2.0, math.inf, math.nan])) == 4.0  # not finite: none


def test_mean_kappa_over_the_seeds_that_ran() -> None:
    cells = [kcell("a", "d", 0, 0.1, [1.0, 3.0, 2.0]), kcell("a", "d", 1, 0.1, [2.0]),
             kcell("a", "d", 2, None, [10.0], "failed"),  # failed: left out like its metric
             kcell("a", "d", 3, None, [1.0, 5.0], "diverged")]  # diverged: its rounds count
    assert report.mean_kappa(cells) == pytest.approx((9.0 + 4.0 + 25.0) / 3)
    assert report.mean_kappa(cells[2:3]) is None and report.mean_kappa([]) is None
    assert report.summarize(cells)[("", "a", "d")]["kappa"] == pytest.approx(38.0 / 3)


def test_worst_case_row_carries_the_worst_attacks_kappa() -> None:
    w = report.worst_case(matrix(with_worst_case=False))[("", "median")]
    assert w["attack"] == "none" and w["mean"] == pytest.approx(0.9)  # the worst row is over all attacks
    assert w["kappa"] == pytest.approx(0.25) and w["text"] == "0.9 (none) κ̂ 0.25"
    assert w["kappa_by_attack"] == pytest.approx({"none": 0.25, "alie": 6.5, "sign_flip": 2.25})
    assert w["vs_fixed"] is None  # no worst_case attack ran: no comparison

    cells = [c for c in matrix(with_worst_case=False) if c.attack != "none"]
    w = report.worst_case(cells)[("", "median")]
    assert (w["attack"], w["kappa"], w["text"]) == ("alie", 6.5, "0.4 (alie) κ̂ 6.5")
    # without recorded rounds: the text as before, kappa None
    w = report.worst_case([factories.cell("a", "d", 0, 0.2), factories.cell("b", "d", 0, 0.3)])[("", "d")]
    assert w["text"] == "0.3 (b)" and w["kappa"] is None


def test_worst_case_against_the_worst_fixed_attack_by_hand() -> None:
    w = report.worst_case(matrix())[("", "median")]
    v = w["vs_fixed"]
    assert v is not None
    # the worst fixed attack is alie (0.4 > sign_flip's 0.3); none (0.9) is not a fixed attack
    assert (v["attack"], v["status"], v["worst_case_status"]) == ("alie", "ok", "ok")
    assert v["mean"] == pytest.approx(0.4) and v["kappa"] == pytest.approx(6.5)
    assert v["worst_case_mean"] == pytest.approx(0.55) and v["worst_case_kappa"] == pytest.approx(20.5)
    assert v["gap"] == pytest.approx(0.55 - 0.4) and v["kappa_ratio"] == pytest.approx(20.5 / 6.5)
    assert v["text"] == "alie 0.4 κ̂ 6.5: Δ +0.15, κ̂×3.15"
    assert report.versus_lines(v) == ["alie 0.4 κ̂ 6.5", "Δ +0.15, κ̂×3.15"]
    assert w["attack"] == "none" and w["text"] == "0.9 (none) κ̂ 0.25"  # the worst case row itself unchanged


def test_higher_is_better_diverged_and_lonely_worst_case() -> None:
    # accuracy: the worst fixed attack is the least accurate; the gap is worst_case's minus its
    acc = [factories.cell(a, "d", 0, 0.1, metrics={"accuracy": x}, rounds=[{"aggregation_error": e}])
           for a, x, e in (("alie", 0.7, 2.0), ("ipm", 0.6, 3.0), ("worst_case", 0.5, 6.0))]
    v = report.worst_case(acc, "accuracy")[("", "d")]["vs_fixed"]
    assert v["attack"] == "ipm" and v["gap"] == pytest.approx(-0.1) and v["kappa_ratio"] == pytest.approx(4.0)
    assert v["text"] == "ipm 0.6 κ̂ 9: Δ -0.1, κ̂×4"
    # worst_case diverged: no finite gap, said in words; JSON has null
    div = [kcell("alie", "d", 0, 0.4, [2.0]), kcell("worst_case", "d", 0, None, [3.0, None], "diverged")]
    v = report.worst_case(div)[("", "d")]["vs_fixed"]
    assert v["gap"] == math.inf and v["text"] == "alie 0.4 κ̂ 4: worst_case diverged, κ̂×2.25"
    doc = json.loads(report.to_json(div))
    assert doc["worst_case"][0]["vs_fixed"]["gap"] is None
    # no fixed attack beside worst_case (none is not one), or worst_case failed: no comparison
    lonely = [kcell("none", "d", 0, 0.1, [1.0]), kcell("worst_case", "d", 0, 0.5, [2.0])]
    assert report.worst_case(lonely)[("", "d")]["vs_fixed"] is None
    failed = [kcell("alie", "d", 0, 0.4, [2.0]), kcell("worst_case", "d", 0, None, [], "failed")]
    assert report.worst_case(failed)[("", "d")]["vs_fixed"] is None


def test_markdown_rows() -> None:
    lines = report.to_markdown(matrix()).splitlines()
    assert lines[6:8] == [
        "| **worst case** | 0.9 (none) κ̂ 0.25 |",
        "| **worst_case vs best fixed** | alie 0.4 κ̂ 6.5: Δ +0.15, κ̂×3.15 |",
    ]
    md = report.to_markdown(matrix())
    assert report.KAPPA_NOTE in md and report.VERSUS_NOTE in md
    plain = report.to_markdown(matrix(with_worst_case=False))
    assert "| **worst case** | 0.9 (none) κ̂ 0.25 |" in plain and report.KAPPA_NOTE in plain
    assert "worst_case vs best fixed" not in plain  # absent without the worst_case attack
    # a point without worst_case beside one with it: "—" there
    spec = (("alie", "krum", 0.2, 1.0), ("worst_case", "krum", 0.3, 2.0), ("alie", "median", 0.1, 1.0),
            ("ipm", "median", 0.2, 3.0))
    two = [kcell(a, d, 0, x, [e]) for a, d, x, e in spec]
    assert "| **worst_case vs best fixed** | alie 0.2 κ̂ 1: Δ +0.1, κ̂×4 | — |" in report.to_markdown(two)


def test_json_and_csv_add_kappa_and_keep_every_old_key() -> None:
    cells = matrix()
    doc = json.loads(report.to_json(cells))
    assert {"scenario", "provenance", "cells", "settings", "groups", "runs", "convergence"} <= set(doc)
    group = next(g for g in doc["groups"] if g["attack"] == "alie")
    assert {"attack", "defense", "metric", "status", "text", "n", "mean", "std", "ci95", "ok", "diverged",
            "failed", "outside_guarantee", "setting"} <= set(group)
    assert group["kappa"] == pytest.approx(6.5)
    (w,) = doc["worst_case"]
    assert (w["defense"], w["attack"], w["setting"]) == ("median", "none", {})
    assert w["kappa"] == pytest.approx(0.25) and w["kappa_by_attack"]["worst_case"] == pytest.approx(20.5)
    assert w["vs_fixed"]["attack"] == "alie" and w["vs_fixed"]["gap"] == pytest.approx(0.15)
    assert w["vs_fixed"]["kappa_ratio"] == pytest.approx(20.5 / 6.5)
    assert json.loads(report.to_json(matrix(with_worst_case=False)))["worst_case"][0]["vs_fixed"] is None

    rows = list(csv.DictReader(io.StringIO(report.to_csv(cells))))
    kappas = {(r["attack"], r["seed"]): r["kappa"] for r in rows}
    assert float(kappas[("alie", "0")]) == 9.0 and float(kappas[("alie", "1")]) == 4.0
    assert float(kappas[("worst_case", "1")]) == 25.0
    assert "kappa" not in next(csv.DictReader(io.StringIO(report.to_csv([factories.cell("a", "d", 0, 0.1)]))))


def test_html_table_foot() -> None:
    text = html_page(matrix())
    worst = '<td style="background:#ffcc80">0.9 (none) κ̂ 0.25</td>'  # poor: orange
    assert f'<tfoot>\n<tr><th class="l">worst case</th>{worst}</tr>' in text
    versus = "<td>alie 0.4 κ̂ 6.5: Δ +0.15, κ̂×3.15</td>"
    assert f'<tr><th class="l">worst_case vs best fixed</th>{versus}</tr>\n</tfoot>' in text
    assert html.escape(report.KAPPA_NOTE) in text and html.escape(report.VERSUS_NOTE) in text
    assert "worst_case vs best fixed" not in html_page(matrix(with_worst_case=False))
