"""Issue 15, item 3 in the terminal: the "worst case" row with κ̂, and the "worst_case vs best
fixed" row where the worst_case attack ran (absent where it did not), readable at 80 columns."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from robustfl import reporting as report
from robustfl.cli import main, render
from robustfl.simulation.results import Cell

from .. import factories

DEFENSES = ["median", "krum", "trimmed_mean", "geomed", "bulyan", "centered_clipping", "multi_krum"]


def kcell(attack: str, defense: str, seed: int, drift: float, errors: list[float | None], **kw: Any) -> Cell:
    rounds = [{"round": r, "relative_drift": drift, "aggregation_error": e} for r, e in enumerate(errors, 1)]
    return factories.cell(attack, defense, seed, drift, rounds=rounds, **kw)


def cells(with_worst_case: bool = True, defenses: list[str] | None = None) -> list[Cell]:
    """none / alie / sign_flip (/ worst_case), one seed. κ̂ by hand: none 0.25, alie max(1, 9, 4)
    = 9, sign_flip 2.25, worst_case 16 (None skipped); gap 0.55 - 0.4 = +0.15, κ̂ ratio 16/9 = 1.78."""
    out = []
    for d in defenses or ["median", "krum"]:
        out += [kcell("none", d, 0, 0.01, [0.5]), kcell("alie", d, 0, 0.4, [1.0, 3.0, 2.0]),
                kcell("sign_flip", d, 0, 0.3, [1.5])]
        if with_worst_case:
            out.append(kcell("worst_case", d, 0, 0.55, [4.0, None, 2.0]))
    return out


def text(cs: list[Cell], width: int = 200) -> str:
    con = Console(record=True, width=width, file=io.StringIO())
    render.print_matrix(cs, con)
    return con.export_text()


def row(out: str, name: str) -> list[str]:
    """The lines of the table row starting with ``name`` (the row wraps over several)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {name}"))
    stop = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("│ " + " " * len(name)))
    return lines[start:stop]


def test_worst_row_shows_kappa_and_the_gap_row_by_hand() -> None:
    out = text(cells())
    worst = " ".join(" ".join(row(out, "worst case")).replace("│", " ").split())
    assert worst == "worst case 0.55 (worst_case) 0.55 (worst_case) κ̂ 16 κ̂ 16"
    versus = " ".join(" ".join(row(out, "worst_case vs")).replace("│", " ").split())
    assert versus == "worst_case vs best fixed alie 0.4 κ̂ 9 alie 0.4 κ̂ 9 Δ +0.15, κ̂×1.78 Δ +0.15, κ̂×1.78"
    words = " ".join(out.split())
    assert report.KAPPA_NOTE in words and report.VERSUS_NOTE in words


def test_no_gap_row_without_the_worst_case_attack() -> None:
    out = text(cells(with_worst_case=False))
    assert "worst_case vs best fixed" not in " ".join(out.split()) and "Δ" not in out
    worst = " ".join(" ".join(row(out, "worst case")).replace("│", " ").split())
    assert worst == "worst case 0.4 (alie) 0.4 (alie) κ̂ 9 κ̂ 9"
    assert report.VERSUS_NOTE not in " ".join(out.split())
    # no rounds recorded: no κ̂ and no note about it
    plain = text([factories.cell("a", "d", 0, 0.2), factories.cell("b", "d", 0, 0.3)])
    assert "κ̂" not in plain and "0.3 (b)" in plain


@pytest.mark.parametrize("width", [80, 120])
def test_wide_table_with_the_gap_row_fits(width: int) -> None:
    out = text(cells(defenses=DEFENSES), width)
    assert max(cell_len(line) for line in out.splitlines()) <= width  # κ̂: one cell, two code points
    words = set(re.findall(r"[^\s│┃|]+", out))
    for name in [*DEFENSES, "none", "alie", "sign_flip", "worst_case"]:
        assert name in words, f"{name!r} broken or missing at {width} columns"
    # under every part (80), or in the table of the worst cases per defense (120): a column then
    assert "worst_case vs" in out and ("┃ worst_case vs best fixed ┃" in out) == (width == 120)
    assert out.count("κ̂×1.78") == len(DEFENSES) and out.count("κ̂ 16") == len(DEFENSES)


def test_report_command_prints_both_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = factories.write_store(tmp_path / "m.db", cells())
    assert main(["report", str(store), "--published", "none"]) == 0
    out = capsys.readouterr().out
    assert "worst_case vs" in out and "κ̂×1.78" in out and "κ̂ 16" in out
    assert main(["report", str(store), "--format", "markdown", "--published", "none"]) == 0
    md = capsys.readouterr().out
    assert "| **worst case** | 0.55 (worst_case) κ̂ 16 | 0.55 (worst_case) κ̂ 16 |" in md
    gap = "alie 0.4 κ̂ 9: Δ +0.15, κ̂×1.78"
    assert f"| **worst_case vs best fixed** | {gap} | {gap} |" in md
