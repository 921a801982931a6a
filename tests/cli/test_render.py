"""The rich views (table, progress, one-run summary, errors, report output) and the heatmap."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread
from rich.console import Console
from rich.table import Table
from rich.text import Text
from scipy import stats

from robustfl import reporting as report
from robustfl.cli import render
from robustfl.reporting.heatmap import heatmap
from robustfl.simulation.results import Cell

from .. import factories


def cell(attack: str, defense: str, seed: int, drift: float | None = None, status: str = "ok",
         **kw: object) -> Cell:
    metrics = {"drift": None if drift is None else 3 * drift, "round": 50}
    return factories.cell(attack, defense, seed, drift, status, metrics=metrics, **kw)


def matrix_cells(sweep: dict | None = None) -> list[Cell]:
    """none/alie[z=1] x fedavg/krum/median, 3 seeds: every colour band plus diverged and failed."""
    sw: dict[str, Any] = {"sweep": sweep} if sweep else {}
    out = []
    for s in range(3):
        out += [
            cell("none", "fedavg", s, [0.01, 0.02, 0.03][s], **sw),  # 0.02 ± 0.01: safe
            cell("none", "krum", s, [0.2, 0.3, 0.4][s], outside_guarantee=True, **sw),  # 0.3 ± 0.1: weak
            cell("none", "median", s, [0.6, 0.7, 0.8][s], **sw),  # 0.7 ± 0.1: poor
            cell("alie[z=1]", "fedavg", s, None, "diverged", **sw),
            cell("alie[z=1]", "krum", s, [1.0, 2.0, 3.0][s], **sw),  # 2 ± 1: broken
            cell("alie[z=1]", "median", s, None, "failed", **sw),
        ]
    return out


T3 = float(stats.t.ppf(0.975, 2) / np.sqrt(3))  # the 95 % half-width of 3 seeds, per unit of std


def console() -> Console:
    return Console(record=True, width=200, file=io.StringIO(), color_system="truecolor")


def column_texts(table: Table, j: int) -> list[Text]:
    cells = list(table.columns[j].cells)
    assert all(isinstance(c, Text) for c in cells)
    return cells  # type: ignore[return-value]


def test_matrix_table_text_and_colours() -> None:
    table = render.matrix_table(matrix_cells())
    c = console()
    c.print(table)
    out = c.export_text(clear=False)
    # ± is the 95 % Student-t half-width: t(0.975, 2) * s / sqrt(3) = 2.48 s (scipy below)
    assert pytest.approx(2.4841377118, rel=1e-9) == T3
    for s in ("0.02 ± 0.025", "0.3 ± 0.25 †", "0.7 ± 0.25", "diverged", "2 ± 2.5", "failed", "alie[z=1]"):
        assert s in out, s
    words = " ".join(out.split())
    assert "over 3 seeds: mean ± 95 % Student-t half-width" in words
    assert "one fixed scale in every view" in words and "† run outside the rule's guarantee" in out
    # rows attacks, columns defenses, both in first-seen order
    assert [str(col.header) for col in table.columns] == ["attack \\ defense", "fedavg", "krum", "median"]
    assert [t.plain for t in column_texts(table, 0)] == ["none", "alie[z=1]"]
    fedavg, krum, median = (column_texts(table, j) for j in (1, 2, 3))
    assert [str(t.style) for t in fedavg] == ["green", "bold red"]
    assert [str(t.style) for t in krum] == ["yellow", "red"]
    assert [str(t.style) for t in median] == ["dark_orange", "magenta"]
    assert krum[0].plain == "0.3 ± 0.25 †" and fedavg[1].plain == "diverged" and median[1].plain == "failed"
    # the coloured export carries the colours (green 0.02, red diverged, magenta failed)
    styled = c.export_text(styles=True, clear=False)
    assert re.search(r"\x1b\[32m *0\.02 ± 0\.025", styled) and re.search(r"\x1b\[35m *failed", styled)
    assert re.search(r"\x1b\[1;31m *diverged", styled)


def test_no_dagger_no_note() -> None:
    c = console()
    c.print(render.matrix_table([cell("a", "d", 0, 0.5)], title="quick"))
    out = c.export_text(clear=False)
    words = " ".join(out.split())
    assert "†" not in out and "quick" in out and "│ 0.5 │" in out and "±" not in out.split("\n")[4]
    assert "over 1 seed: mean ± 95 % Student-t half-width" in words
    assert "without ± comes from one seed" in words


def test_one_table_per_sweep_point() -> None:
    cells = matrix_cells({"threat.byzantine": 0.1}) + matrix_cells({"threat.byzantine": 0.3})[:6]
    tables = render.matrix_tables(cells)
    assert [t.title for t in tables] == ["threat.byzantine=0.1", "threat.byzantine=0.3"]
    assert [len(t.rows) for t in tables] == [2, 2]
    c = console()
    render.print_matrix(cells, c)
    out = c.export_text(clear=False)
    assert out.count("attack \\ defense") == 2 and out.index("threat.byzantine=0.1") < out.index("=0.3")
    # matrix_table stacks them in one renderable
    c2 = console()
    c2.print(render.matrix_table(cells))
    assert c2.export_text(clear=False).count("attack \\ defense") == 2


def test_progress_counts_and_quiet() -> None:
    c = console()
    with render.MatrixProgress(console=c, plain=False) as p:  # the live line (not a terminal: plain lines)
        p.start(5, done=1)
        p.cell_started("alie[z=1] vs krum")
        p.cell_started("none vs krum")
        assert p.running == 2
        p.cell_finished(cell("alie[z=1]", "krum", 0, None, "failed"))
        p.cell_finished(cell("none", "krum", 0, None, "diverged"))
        p.cell_finished(cell("none", "krum", 1, 0.2))
        p.cell_finished(cell("none", "krum", 2, 0.2))
    out = c.export_text(clear=False)
    assert "5/5" in out and "failed 1" in out and "diverged 1" in out and "running 0" in out and "eta" in out
    assert (p.done, p.running, p.failed, p.diverged) == (5, 0, 1, 1)

    q = console()
    with render.MatrixProgress(console=q, quiet=True) as p:
        p.start(2)
        p.cell_started("x")
        p.cell_finished(cell("a", "b", 0, None, "failed"))
    assert q.export_text(clear=False) == "" and (p.done, p.failed) == (1, 1)


def test_print_cell_and_error() -> None:
    c = console()
    render.print_cell(Cell("sign_flip", "fltrust", 3, final={"relative_drift": 0.0123, "round": 100,
                                                              "accuracy": None}, elapsed_s=2.5), c)
    out = c.export_text(clear=False)
    assert "sign_flip vs fltrust, seed 3: ok" in out
    assert "relative_drift" in out and "0.0123" in out and "100" in out and "accuracy" not in out
    assert "2.50 s" in out
    c = console()
    render.print_cell(cell("ipm", "krum", 0, None, "failed"), c)
    assert "failed" in c.export_text(clear=False) and "RuntimeError: boom" in c.export_text(clear=False)
    c = console()
    render.print_error("unknown attack 'sing_flip' [did you mean]", c)
    assert c.export_text(clear=False) == "error: unknown attack 'sing_flip' [did you mean]\n"


def test_print_report_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cells = matrix_cells()
    render.print_report(cells, "csv")
    assert capsys.readouterr().out == report.to_csv(cells)
    render.print_report(cells, "markdown", output=str(tmp_path / "r.md"))
    assert (tmp_path / "r.md").read_text(encoding="utf-8") == report.to_markdown(cells)
    render.print_report(cells, "table", output=str(tmp_path / "r.txt"))
    text = (tmp_path / "r.txt").read_text(encoding="utf-8")
    assert "0.02 ± 0.025" in text and "\x1b[" not in text
    c = console()
    render.print_report(cells, "table", console=c)
    assert "0.7 ± 0.25" in c.export_text(clear=False)


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_heatmap_png(tmp_path: Path) -> None:
    one = heatmap(matrix_cells(), tmp_path / "out" / "m.png")
    assert one == tmp_path / "out" / "m.png" and one.read_bytes()[:8] == PNG_MAGIC
    img = imread(one)
    assert img.ndim == 3 and img.shape[2] in (3, 4) and img.shape[0] > 150 and img.shape[1] > 300
    assert np.ptp(img[..., :3]) > 0.5  # not a blank canvas

    two = heatmap(matrix_cells({"x": 1}) + matrix_cells({"x": 2}), tmp_path / "two.png")
    img2 = imread(two)
    # two panels side by side
    assert img2.shape[0] == img.shape[0] and img2.shape[1] > 1.5 * img.shape[1] - 300


def test_heatmap_degenerate_inputs(tmp_path: Path) -> None:
    only_bad = [cell("a", "d", 0, None, "failed"), cell("a", "e", 0, None, "diverged")]
    for name, cells, metric in [("bad", only_bad, "relative_drift"), ("empty", [], "relative_drift"),
                                ("acc", [Cell("a", "d", 0, final={"accuracy": 0.0})], "accuracy")]:
        p = heatmap(cells, tmp_path / f"{name}.png", metric=metric)
        assert p.read_bytes()[:8] == PNG_MAGIC and imread(p).shape[0] > 50


def test_note_listing_and_time_caption() -> None:
    c = console()
    render.print_note("store: runs/quick.db", c)
    render.print_listing({"attacks": [{"name": "alie", "origin": "built-in"},
                                      {"name": "mine[x]", "origin": "plugin file /tmp/p.py"}]}, c)
    out = c.export_text(clear=False)
    assert out.startswith("store: runs/quick.db\n")
    assert "attacks" in out and "alie" in out and "mine[x]" in out and "plugin file /tmp/p.py" in out
    cells = [Cell("a", "d", s, final={"relative_drift": 0.1}, elapsed_s=t)
             for s, t in enumerate([1.0, 2.0, 3.0])]
    c = console()
    render.print_matrix(cells, c, show_time=True)
    assert "compute time 6.0 s over 3 cells (2.00 s per cell)" in " ".join(c.export_text().split())


def test_progress_ignores_resumed_cells_for_eta() -> None:
    with render.MatrixProgress(quiet=True) as p:
        p.start(4)
        p.cell_finished(cell("a", "d", 0, 0.1))  # resumed from the store: before any start
        p.cell_finished(cell("a", "d", 1, 0.1))
        assert p._done_here == 2
        p.cell_started("a vs d seed 2")
        assert p._done_here == 0 and p.done == 2
        p.cell_finished(cell("a", "d", 2, 0.1))
        assert p._done_here == 1 and p.done == 3 and p.running == 0
