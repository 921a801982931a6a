"""Issue 12, item 6: tables readable at 80 columns, progress when piped, an ETA learned per
attack/defense, `run --json` saying where it wrote, and the plugin scaffold's README links."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from robustfl.cli import main, render
from robustfl.cli.plugin_new import write_plugin
from robustfl.simulation.results import Cell

from .test_cli import SMALL

DEFENSES = [
    "fedavg", "fltrust", "fedsim", "median", "krum", "multi_krum", "trimmed_mean", "bulyan",
    "geomed", "centered_clipping", "nnm+clipping+krum", "signguard", "dnc",
]
ATTACKS = ["none", "sign_flip", "scaling", "alie", "ipm-100", "min_max", "fltrust_adaptive"]


def _wide_matrix() -> list[Cell]:
    """7 attacks x 13 defenses x 2 seeds, values in every band, one cell outside the guarantee."""
    out = []
    for i, a in enumerate(ATTACKS):
        for j, d in enumerate(DEFENSES):
            for s in range(2):
                drift = 0.0123 * (i + 1) * (j + 1) * (s + 1)
                out.append(Cell(a, d, s, final={"relative_drift": drift}, elapsed_s=1.5 + i,
                                outside_guarantee=(a, d) == ("alie", "krum")))
    return out


def _render(width: int, **kw: object) -> str:
    con = Console(record=True, width=width, file=io.StringIO())
    render.print_matrix(_wide_matrix(), con, title="runs/quick.db", **kw)  # type: ignore[arg-type]
    return con.export_text()


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("show_time", [False, True])
def test_matrix_table_fits_the_width_and_never_breaks_a_name(width: int, show_time: bool) -> None:
    text = _render(width, show_time=show_time)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, "a line is wider than the terminal"
    words = set(re.findall(r"[^\s│┃|]+", text))
    for name in [*ATTACKS, *DEFENSES]:
        assert name in words, f"{name!r} is broken across lines or missing at {width} columns"
    assert "worst case" in text and "defense" in text
    if width == 200:  # two parts at most at 200 columns, each repeating the attack names
        assert text.count("sign_flip") <= 2


def test_split_tables_repeat_the_row_names_and_keep_one_caption() -> None:
    text = _render(80)
    assert text.count("sign_flip") >= 2  # the attack column is repeated in every part
    assert text.count("compute time") <= 1 and text.count("Student-t") == 1  # the caption once, at the end


def test_progress_line_fits_80_columns() -> None:
    con = Console(record=True, width=80, file=io.StringIO())
    with render.MatrixProgress(console=con, plain=False) as p:
        p.start(1105, done=3)
        p.cell_started("fltrust_adaptive × centered_clipping seed 1 [threat.byzantine=0.4]")
        p.cell_finished(Cell("fltrust_adaptive", "centered_clipping", 1, status="diverged", final={}))
        p.cell_started("fltrust_adaptive × centered_clipping seed 2 [threat.byzantine=0.4]")
        p.cell_finished(Cell("fltrust_adaptive", "centered_clipping", 2, status="failed", final={}))
    lines = con.export_text().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 80, lines
    line = lines[0]
    assert "5/1105" in line and "diverged 1" in line and "failed 1" in line and "eta" in line


def test_piped_output_prints_plain_progress_lines_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    piped = Console(file=io.StringIO(), width=80)  # not a terminal
    assert not piped.is_terminal
    with render.MatrixProgress(console=piped) as p:
        p.start(4, done=1)
        for s in range(3):
            p.cell_started(f"none × fedavg seed {s}")
            p.cell_finished(Cell("none", "fedavg", s, final={}, elapsed_s=0.01))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines, "no progress on stderr when the output is piped"
    assert any("[4/4 cells" in ln for ln in lines) and all(len(ln) <= 80 for ln in lines)
    assert all(re.search(r"\[\d+/4 cells, .*elapsed", ln) for ln in lines)
    assert "\x1b[" not in err and piped.file.getvalue() == ""  # plain text; stdout left to the table


def test_piped_progress_ticks_while_a_long_cell_runs() -> None:
    stream = io.StringIO()
    piped = Console(file=io.StringIO(), width=80)
    with render.MatrixProgress(console=piped, interval=0.05, stream=stream) as p:
        p.start(2)
        p.cell_started("optimal × krum seed 0")
        deadline = time.monotonic() + 10
        while stream.getvalue().count("[0/2 cells") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)  # no cell finishes, yet lines keep coming
        assert stream.getvalue().count("[0/2 cells") >= 3  # the start line and two ticks
        p.cell_finished(Cell("optimal", "krum", 0, final={}, elapsed_s=0.3))


def test_eta_estimator_hand_computed() -> None:
    times = render.CellTimes()
    times.add("none", "fedavg", 1.0)
    times.add("none", "median", 3.0)
    times.add("optimal", "fedavg", 17.0)
    # overall mean 7; attack means none 2, optimal 17; defense means fedavg 9, median 3
    assert times.predict("none", "fedavg") == pytest.approx(1.0)  # its own pair's mean
    assert times.predict("optimal", "median") == pytest.approx(17 * 3 / 7)  # m_a * m_d / m
    assert times.predict("alie", "fedavg") == pytest.approx(9.0)  # only its defense seen
    assert times.predict("optimal", "krum") == pytest.approx(17.0)  # only its attack seen
    assert times.predict("alie", "krum") == pytest.approx(7.0)  # neither: the overall mean
    pending = [("optimal", "median"), ("none", "fedavg"), ("alie", "fedavg"), ("alie", "krum")]
    work = 17 * 3 / 7 + 1 + 9 + 7
    assert times.eta(pending, workers=2) == pytest.approx(work / 2)
    assert times.eta(pending, workers=8) == pytest.approx(9.0)  # the longest cell, not work / 8
    # a running cell counts only what is left of it
    assert times.eta([], workers=1, running=[("optimal", "fedavg", 12.0)]) == pytest.approx(5.0)
    assert render.CellTimes().eta(pending, workers=1) is None  # nothing seen yet


def test_progress_eta_weighs_cells_by_attack() -> None:
    """One plain cell (1 s) and one `optimal` cell (17 s) finished; left: one of each against
    another defense: 18 s on one worker, not "2 cells at the mean rate"."""
    with render.MatrixProgress(quiet=True) as p:
        p.start(4)
        p.pending(
            [
                ("none × fedavg seed 0", "none", "fedavg"),
                ("optimal × fedavg seed 0", "optimal", "fedavg"),
                ("none × median seed 0", "none", "median"),
                ("optimal × median seed 0", "optimal", "median"),
            ],
            workers=1,
        )
        p.cell_started("none × fedavg seed 0")
        p.cell_finished(Cell("none", "fedavg", 0, final={}, elapsed_s=1.0))
        p.cell_started("optimal × fedavg seed 0")
        p.cell_finished(Cell("optimal", "fedavg", 0, final={}, elapsed_s=17.0))
        assert p.eta_s() == pytest.approx(18.0, abs=0.1)


def test_run_json_says_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "cell.json"
    assert main(["run", "quick", *SMALL, "--set", "federation.rounds=3", "--json", str(out)]) == 0
    assert out.is_file()
    assert f"wrote {out}" in capsys.readouterr().out


def test_plugin_readme_has_no_placeholder_link(tmp_path: Path) -> None:
    for kind in ("attack", "defense"):
        root = write_plugin(f"my_{kind}_x", kind, tmp_path)
        readme = (root / "README.md").read_text(encoding="utf-8")
        assert "https://github.com/)" not in readme and "](http" not in readme
        assert f"robustfl show my_{kind}_x" in readme  # the installed docs: show, list, pydoc


def test_piped_matrix_command_shows_progress_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`robustfl matrix ... | cat`: plain progress lines on stderr, none of the live line on stdout."""
    argv = ["matrix", "quick", *SMALL, "--set", "federation.rounds=3", "--attacks", "none,sign_flip"]
    argv += ["--defenses", "fedavg", "--seeds", "0", "--workers", "1", "--store", str(tmp_path / "s.db")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    progress = [ln for ln in err.splitlines() if ln.startswith("[")]
    assert progress and progress[-1].startswith("[2/2 cells, ") and "elapsed" in progress[-1]
    assert "cells 2/2" not in out and "eta" not in out and "none" in out  # the table, not the live line


def test_json_files_are_written_one_item_a_line_by_the_c_encoder() -> None:
    """--json output: the same document as json.dumps (round trip), NaN refused, one line per
    top-level key and per item of a top-level list (a matrix: one line per cell)."""
    import json
    import math

    import pytest

    from robustfl.cli.common import dumps_by_line

    cells = [{"x": [1.5, {"y": None}]}, {"x": "q\""}]
    doc = {"scenario": {"a": 1, "b": [1, 2]}, "cells": cells, "e": [], 3: {}}
    text = dumps_by_line(doc)
    assert json.loads(text) == json.loads(json.dumps(doc))
    assert text.splitlines()[1:3] == [' "scenario": {', '  "a": 1,']
    assert '  {"x": [1.5, {"y": null}]},' in text.splitlines()
    for value in (5, "s", [], {}, [[1, [2]]]):
        assert json.loads(dumps_by_line(value)) == value
    with pytest.raises(ValueError):
        dumps_by_line({"cells": [{"v": math.nan}]})
