"""One store, two settings (issue 12, item 1) and one meaning of ± and of the colours (item 6).

A real store is written by two ``robustfl matrix`` runs that differ only in
``threat.byzantine`` (0.2, then 0.4). Every view must keep the two settings apart: the numbers
are recomputed here from the store's own rows (each cell's stored configuration says which
setting it belongs to), and the ± from scipy's Student-t quantile.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from robustfl.cli import main
from robustfl.reporting import curves
from robustfl.simulation.results import Cell

from ..factories import t_halfwidth as halfwidth

BASE = ["--set", "federation.rounds=5", "--set", "federation.clients=10"]
GRID = ["--attacks", "none,alie", "--defenses", "fedavg,median", "--seeds", "0,1", "--workers", "1"]
BYZ = (0.2, 0.4)


@pytest.fixture(scope="module")
def two_settings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("settings") / "q.db"
    assert main(["matrix", "quick", "--store", str(db), *BASE, *GRID, "--quiet"]) == 0
    more = [*BASE, "--set", "threat.byzantine=0.4"]
    assert main(["matrix", "quick", "--store", str(db), *more, *GRID, "--quiet"]) == 0
    return db


def stored(db: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(cell JSON, configuration) of every stored row, read with sqlite3 directly."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT cell, config FROM cells ORDER BY rowid").fetchall()
    return [(json.loads(c), json.loads(k)) for c, k in rows]


def by_hand(db: Path, byz: float, attack: str, defense: str) -> list[float]:
    """The final relative drifts of one (setting, attack, defense), over its seeds."""
    return [
        float(c["final"]["relative_drift"])
        for c, k in stored(db)
        if k["scenario"]["threat"]["byzantine"] == byz and c["attack"] == attack and c["defense"] == defense
    ]


def report(db: Path, fmt: str, tmp: Path) -> str:
    out = tmp / f"report.{fmt}"
    assert main(["report", str(db), "--format", fmt, "--output", str(out), "--published", "none"]) == 0
    return out.read_text(encoding="utf-8")


def test_store_holds_both_settings(two_settings: Path) -> None:
    rows = stored(two_settings)
    assert len(rows) == 16  # 2 settings x 2 attacks x 2 defenses x 2 seeds, none overwritten
    assert sorted({k["scenario"]["threat"]["byzantine"] for _, k in rows}) == list(BYZ)
    for byz in BYZ:  # the attack matters: the two settings give different numbers
        assert len(by_hand(two_settings, byz, "alie", "median")) == 2
    assert by_hand(two_settings, 0.2, "alie", "median") != by_hand(two_settings, 0.4, "alie", "median")


def test_table_shows_one_group_per_setting(two_settings: Path, tmp_path: Path) -> None:
    text = report(two_settings, "table", tmp_path)
    for byz in BYZ:
        assert f"threat.byzantine={byz}" in text
        v = by_hand(two_settings, byz, "alie", "median")
        assert f"{statistics.fmean(v):.3g} ± {halfwidth(v):.2g}" in text
    pooled = by_hand(two_settings, 0.2, "alie", "median") + by_hand(two_settings, 0.4, "alie", "median")
    assert f"{statistics.fmean(pooled):.3g} ±" not in text
    assert "over 2 seeds" in text and "2-4" not in text and "4 seeds" not in text


def test_csv_has_a_column_per_differing_key(two_settings: Path, tmp_path: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(report(two_settings, "csv", tmp_path))))
    assert len(rows) == 16
    assert "threat.byzantine" in rows[0]
    assert "federation.rounds" not in rows[0]  # the same in both settings: no column
    config = {c["key"]: k for c, k in stored(two_settings)}
    for r in rows:
        assert float(r["threat.byzantine"]) == config[r["key"]]["scenario"]["threat"]["byzantine"]
    assert sorted({float(r["threat.byzantine"]) for r in rows}) == list(BYZ)


def test_json_names_the_setting_and_groups_by_it(two_settings: Path, tmp_path: Path) -> None:
    doc = json.loads(report(two_settings, "json", tmp_path))
    assert {"scenario", "provenance", "cells"} <= set(doc)  # the contract's keys stay
    assert doc["settings"]["keys"] == ["threat.byzantine"]
    assert len(doc["cells"]) == 16
    config = {c["key"]: k for c, k in stored(two_settings)}
    for c in doc["cells"]:
        assert c["threat.byzantine"] == config[c["key"]]["scenario"]["threat"]["byzantine"]
    assert len(doc["runs"]) == 2
    groups = {
        (g["setting"]["threat.byzantine"], g["attack"], g["defense"]): g for g in doc["groups"]
    }
    assert len(groups) == 8
    for byz in BYZ:
        v = by_hand(two_settings, byz, "alie", "median")
        g = groups[(byz, "alie", "median")]
        assert g["n"] == 2
        assert g["mean"] == pytest.approx(statistics.fmean(v), rel=1e-12)
        assert g["ci95"] == pytest.approx(halfwidth(v), rel=1e-9)


def test_markdown_one_table_per_setting(two_settings: Path, tmp_path: Path) -> None:
    md = report(two_settings, "markdown", tmp_path)
    for byz in BYZ:
        v = by_hand(two_settings, byz, "alie", "median")
        section = md.split(f"**threat.byzantine={byz}**", 1)[1].split("**", 1)[0]
        alie = next(line for line in section.splitlines() if line.startswith("| alie |"))
        assert alie.endswith(f"| {statistics.fmean(v):.3g} ± {halfwidth(v):.2g} |")  # median: last column


def test_html_lists_every_run_and_keeps_settings_apart(two_settings: Path, tmp_path: Path) -> None:
    page = report(two_settings, "html", tmp_path)
    prov = page[page.index('id="provenance"') :]
    assert prov.count('class="run"') == 2
    assert "threat.byzantine=0.4" in prov  # the second run's override
    assert "federation.rounds=5" in prov
    for byz in BYZ:
        v = by_hand(two_settings, byz, "alie", "median")
        assert f"{statistics.fmean(v):.3g} ± {halfwidth(v):.2g}" in page


def test_compare_matches_settings(
    two_settings: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(two_settings, copy)
    assert main(["compare", str(two_settings), str(copy)]) == 0
    out = capsys.readouterr().out
    assert "16 cells: 16 unchanged" in out
    # A store holding only the first setting: the 0.4 cells are only in A, never matched to 0.2.
    one = tmp_path / "one.db"
    assert main(["matrix", "quick", "--store", str(one), *BASE, *GRID, "--quiet"]) == 0
    assert main(["compare", str(two_settings), str(one)]) == 0
    out = capsys.readouterr().out
    assert "16 cells: 8 unchanged" in out and "8 only in A" in out


# -- one meaning of ± -----------------------------------------------------------------------------


def test_plus_minus_is_the_t_halfwidth_in_every_view(two_settings: Path, tmp_path: Path) -> None:
    table = report(two_settings, "table", tmp_path)
    md = report(two_settings, "markdown", tmp_path)
    page = report(two_settings, "html", tmp_path)
    for byz in BYZ:
        for attack in ("none", "alie"):
            v = by_hand(two_settings, byz, attack, "fedavg")
            want = f"{statistics.fmean(v):.3g} ± {halfwidth(v):.2g}"
            assert want in table and want in md and want in page, (byz, attack, want)
    note = "95 % Student-t half-width"  # said on every view (a terminal caption may wrap it)
    for text in (table, md, page):
        assert note in " ".join(text.split())


# -- one colour scale, a titled heatmap, readable bands ----------------------------------------------


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Figure]]:
    """Every matplotlib Figure saved while the test runs."""
    saved: list[Figure] = []
    original = Figure.savefig

    def spy(self: Figure, *args: Any, **kwargs: Any) -> Any:
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    yield saved


def _cells(drifts: dict[tuple[str, str], list[float]], rounds: int = 4) -> list[Cell]:
    out = []
    for (a, d), values in drifts.items():
        for s, v in enumerate(values):
            ms = [{"round": r, "relative_drift": v * 2 ** (rounds - r)} for r in range(1, rounds + 1)]
            out.append(Cell(a, d, s, final=dict(ms[-1]), rounds=ms))
    return out


def test_heatmap_has_a_title(two_settings: Path, tmp_path: Path, figures: list[Figure]) -> None:
    from robustfl.reporting.heatmap import heatmap

    heatmap(_cells({("a", "d"): [0.2, 0.3]}), tmp_path / "h.png")
    title = figures[-1].get_suptitle()
    assert "relative_drift" in title or "relative drift" in title


def _image_colour(fig: Figure, value: float) -> str:
    from matplotlib.colors import to_hex

    image = fig.axes[0].images[0]
    return str(to_hex(image.cmap(image.norm(value))))


def test_heatmap_uses_the_tables_fixed_colour_scale(tmp_path: Path, figures: list[Figure]) -> None:
    from robustfl import reporting as report
    from robustfl.reporting.heatmap import heatmap

    colours = {"safe": 0.05, "weak": 0.3, "poor": 0.7, "broken": 3.0}
    for name, cells in {
        "small": _cells({("a", "d"): [0.0001, 0.0002], ("b", "d"): [0.01, 0.02]}),
        "large": _cells({("a", "d"): [0.05, 0.06], ("b", "d"): [300.0, 400.0]}),
    }.items():
        heatmap(cells, tmp_path / f"{name}.png")
        fig = figures[-1]
        for band, value in colours.items():
            want = report.BAND_COLOURS[band]
            assert _image_colour(fig, value) == want, (name, band)
            assert report.severity({"status": "ok", "metric": "relative_drift", "mean": value}) == band


def test_drift_bands_do_not_hide_two_seed_curves(figures: list[Figure]) -> None:
    from matplotlib.collections import PolyCollection

    two = _cells({("alie", "median"): [0.1, 0.5], ("alie", "fedavg"): [0.2, 0.21]})
    attacks = {"alie": {"median": two[:2], "fedavg": two[2:]}}
    assert curves.drift_figure(attacks) is not None
    ax = figures[-1].axes[0]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # n = 2: no band
    top = max(c.rounds[0]["relative_drift"] for c in two)
    assert ax.get_ylim()[1] <= 2 * top  # the axes fit the curves, not a 12.7·s/√2 band

    three = _cells({("alie", "median"): [0.1, 0.3, 0.5]})
    curves.drift_figure({"alie": {"median": three}})
    assert [c for c in figures[-1].axes[0].collections if isinstance(c, PolyCollection)]


# -- the grouping itself, on hand-made configurations ---------------------------------------------


def _config(byz: float, rounds: int = 5, attack: Any = "alie") -> dict[str, Any]:
    scenario = {"federation": {"rounds": rounds, "clients": 10}, "threat": {"byzantine": byz}}
    return {"scenario": scenario, "attack": attack, "defense": "median", "seed": 0, "schema": 1}


def test_annotate_names_only_the_keys_that_differ() -> None:
    from robustfl import reporting as report

    pairs = [
        (Cell("alie", "median", 0, sweep={"federation.rounds": 5}), _config(0.2, 5)),
        (Cell("alie", "median", 0, sweep={"federation.rounds": 9}), _config(0.2, 9)),
        (Cell("alie", "median", 0), _config(0.4, 5)),
    ]
    cells, keys = report.annotate(pairs)
    assert keys == ["federation.rounds", "threat.byzantine"]  # the swept key first
    assert [c.sweep for c in cells] == [
        {"federation.rounds": 5, "threat.byzantine": 0.2},
        {"federation.rounds": 9, "threat.byzantine": 0.2},
        {"federation.rounds": 5, "threat.byzantine": 0.4},
    ]
    assert pairs[2][0].sweep == {}  # the stored cells are left as they were
    one, _ = report.annotate(pairs[:1])
    assert one[0].sweep == {"federation.rounds": 5} and report.differing_keys([{"a": 1}, {"a": 1}]) == []


def test_one_label_two_attack_specifications_are_told_apart() -> None:
    from robustfl import reporting as report

    pairs = [
        (Cell("alie", "median", 0), _config(0.2)),
        (Cell("alie", "median", 0), _config(0.2, attack={"name": "alie", "z": 1.5})),
        (Cell("none", "median", 0), _config(0.2, attack="none")),
    ]
    cells, keys = report.annotate(pairs)
    assert keys == [] and [c.attack for c in cells] == ["alie (z=default)", "alie (z=1.5)", "none"]
    assert len(report.summarize(cells)) == 3  # never pooled
