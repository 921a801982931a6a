"""Non-terminal report views: summaries over seeds (vs numpy/scipy), CSV, JSON, Markdown, HTML."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from robustfl import reporting as report
from robustfl.errors import ConfigError
from robustfl.reporting.page import page as html_page
from robustfl.simulation.results import Cell

from .. import factories


def cell(attack: str, defense: str, seed: int, drift: float | None = None, status: str = "ok",
         **kw: object) -> Cell:
    metrics = {"accuracy": None, "round": 10}
    return factories.cell(attack, defense, seed, drift, status, metrics=metrics, error="ValueError: x", **kw)


DRIFTS = [0.12, 0.31, 0.07, 0.25]


def test_summary_matches_numpy_and_scipy() -> None:
    cells = [cell("alie", "krum", s, d) for s, d in enumerate(DRIFTS)]
    cells += [cell("alie", "median", 0, 0.4), cell("alie", "median", 1, 0.6)]
    cells += [cell("none", "krum", 0, 0.02)]
    summary = report.summarize(cells)
    assert list(summary) == [("", "alie", "krum"), ("", "alie", "median"), ("", "none", "krum")]

    g = summary[("", "alie", "krum")]
    a = np.array(DRIFTS)
    assert g["n"] == 4 and g["ok"] == 4 and g["diverged"] == 0 and g["failed"] == 0
    assert g["mean"] == pytest.approx(a.mean(), rel=1e-14)
    assert g["std"] == pytest.approx(a.std(ddof=1), rel=1e-14)
    lo, hi = stats.t.interval(0.95, df=3, loc=a.mean(), scale=stats.sem(a))
    assert g["ci95"] == pytest.approx((hi - lo) / 2, rel=1e-12)
    assert g["status"] == "ok" and severity_is(g, "weak")  # 0.1875 in [0.1, 0.5)
    # ± is the 95 % Student-t half-width in every view (not the std)
    assert g["text"] == f"{a.mean():.3g} ± {(hi - lo) / 2:.2g}" == "0.188 ± 0.18"

    g = summary[("", "alie", "median")]  # n = 2: t_{0.975, 1} = 12.7062047...
    assert g["mean"] == pytest.approx(0.5) and g["std"] == pytest.approx(math.sqrt(0.02))
    assert g["ci95"] == pytest.approx(12.706204736174698 * math.sqrt(0.02) / math.sqrt(2), rel=1e-12)
    assert g["text"] == "0.5 ± 1.3"

    g = summary[("", "none", "krum")]  # one seed: no spread
    assert g["n"] == 1 and g["mean"] == 0.02 and g["std"] == 0.0 and math.isnan(g["ci95"])
    assert g["text"] == "0.02"  # no interval from one seed: no ±
    assert severity_is(g, "safe")


def severity_is(group: dict, name: str) -> bool:
    return report.severity(group) == name


def test_bands() -> None:
    for drift, name in [(0.0999, "safe"), (0.1, "weak"), (0.4999, "weak"), (0.5, "poor"), (0.999, "poor"),
                        (1.0, "broken"), (1e6, "broken")]:
        assert report.severity(report.summarize([cell("a", "d", 0, drift)])[("", "a", "d")]) == name
    acc = report.summarize([Cell("a", "d", 0, final={"accuracy": 0.9})], metric="accuracy")[("", "a", "d")]
    assert acc["mean"] == 0.9 and report.severity(acc) is None  # no bands for accuracy


def test_diverged_failed_and_missing() -> None:
    cells = [
        cell("ipm", "fedavg", 0, None, "diverged"), cell("ipm", "fedavg", 1, None, "diverged"),
        cell("ipm", "trim", 0, 0.2), cell("ipm", "trim", 1, None, "diverged"), cell("ipm", "trim", 2, 0.3),
        cell("ipm", "krum", 0, None, "failed"), cell("ipm", "krum", 1, None, "failed"),
        cell("ipm", "median", 0, 0.2), cell("ipm", "median", 1, 0.4),
        cell("ipm", "median", 2, None, "failed"),
        Cell("ipm", "cc", 0, final={"relative_drift": None}),
    ]
    s = report.summarize(cells)
    g = s[("", "ipm", "fedavg")]
    assert g["status"] == "diverged" and g["text"] == "diverged" and g["mean"] == math.inf
    assert g["n"] == 2 and g["values"] == [math.inf, math.inf] and report.severity(g) == "diverged"
    g = s[("", "ipm", "trim")]  # one diverged seed of three: the group counts as +inf
    assert g["status"] == "diverged" and g["text"] == "diverged (1/3)" and g["mean"] == math.inf
    assert math.isnan(g["std"]) and g["n"] == 3
    g = s[("", "ipm", "krum")]
    assert g["status"] == "failed" and g["text"] == "failed" and g["failed"] == 2 and g["n"] == 0
    assert math.isnan(g["mean"]) and report.severity(g) == "failed"
    g = s[("", "ipm", "median")]  # failed seeds are left out of the statistics, but counted
    assert g["n"] == 2 and g["mean"] == pytest.approx(0.3) and g["failed"] == 1
    half = stats.t.ppf(0.975, 1) * np.std([0.2, 0.4], ddof=1) / math.sqrt(2)
    assert g["text"] == f"0.3 ± {half:.2g} (1 failed)" == "0.3 ± 1.3 (1 failed)"
    g = s[("", "ipm", "cc")]
    assert g["status"] == "n/a" and g["n"] == 0 and report.severity(g) is None


def test_sweep_points_and_guarantee_flag() -> None:
    cells = [cell("a", "krum", s, 0.1 * (s + 1), sweep={"threat.byzantine": b, "federation.clients": 10},
                  outside_guarantee=(b == 0.4 and s == 1))
             for b in (0.1, 0.4) for s in range(2)]
    s = report.summarize(cells)
    assert list(s) == [("threat.byzantine=0.1, federation.clients=10", "a", "krum"),
                       ("threat.byzantine=0.4, federation.clients=10", "a", "krum")]
    first, second = s.values()
    assert first["sweep"] == {"threat.byzantine": 0.1, "federation.clients": 10}
    assert not first["outside_guarantee"] and second["outside_guarantee"]
    assert first["mean"] == pytest.approx(0.15) and first["n"] == 2
    assert [p for p, _, _ in report.layout(s)] == list(dict.fromkeys(k[0] for k in s))


def test_layout_first_seen_order() -> None:
    cells = [cell("z", "q", 0, 0.1), cell("b", "q", 0, 0.1), cell("z", "a", 0, 0.1), cell("m", "x", 0, 0.1)]
    assert report.layout(report.summarize(cells)) == [("", ["z", "b", "m"], ["q", "a", "x"])]


def test_markdown() -> None:
    cells = [cell("none", "fedavg", s, d) for s, d in enumerate([0.1, 0.2, 0.3])]
    cells += [cell("none", "krum", s, 0.05, outside_guarantee=True) for s in range(3)]
    cells += [cell("sign|flip", "fedavg", s, None, "diverged") for s in range(3)]
    cells += [cell("sign|flip", "krum", s, None, "failed") for s in range(3)]
    md = report.to_markdown(cells)
    lines = md.splitlines()
    assert lines[:4] == [
        "| attack \\\\ defense | fedavg | krum |",
        "|---|---|---|",
        "| none | 0.2 ± 0.25 | 0.05 ± 0 † |",  # t(0.975, 2) * 0.1 / sqrt(3) = 0.248
        "| sign\\|flip | diverged | failed |",
    ]
    assert "over 3 seeds: mean ± 95 % Student-t half-width" in md and report.GUARANTEE_NOTE in md
    assert "colours" not in md  # Markdown has none to explain


def test_markdown_one_table_per_sweep_point() -> None:
    cells = [cell("a", "d", 0, 0.2, sweep={"x": 1}), cell("a", "d", 0, 0.7, sweep={"x": 2}),
             cell("b", "d", 0, 0.9, sweep={"x": 2})]
    md = report.to_markdown(cells)
    assert md.count("|---|---|") == 2
    one, two = md.split("**x=2**")
    assert "**x=1**" in one and "| a | 0.2 |" in one and "| b |" not in one  # one seed: no ±
    assert "| a | 0.7 |" in two and "| b | 0.9 |" in two


def test_csv_records() -> None:
    cells = [cell("none", "fedavg", 0, 0.125, sweep={"threat.byzantine": 0.2}, key="abc"),
             cell("alie", "krum", 1, None, "failed")]
    rows = list(csv.DictReader(io.StringIO(report.to_csv(cells))))
    assert len(rows) == 2
    r0, r1 = rows
    assert (r0["attack"], r0["defense"], r0["seed"], r0["status"]) == ("none", "fedavg", "0", "ok")
    assert float(r0["relative_drift"]) == 0.125 and r0["threat.byzantine"] == "0.2" and r0["key"] == "abc"
    assert r0["accuracy"] == "" and r0["round"] == "10" and r0["outside_guarantee"] == "False"
    assert r1["status"] == "failed" and r1["error"] == "ValueError: x" and r1["relative_drift"] == ""
    assert r1["threat.byzantine"] == "" and r1["key"] == ""
    assert set(r0) == set(cells[0].record()) | {"key"}


def test_json_document() -> None:
    cells = [cell("none", "fedavg", 0, 0.5, sweep={"x": 1}),
             cell("ipm", "fedavg", 0, math.inf, "diverged"),
             Cell("a", "b", 2, final={"relative_drift": math.nan})]
    text = report.to_json(cells, {"task": {"name": "ridge"}}, {"robustfl": "0.1.0"})

    def no_constants(name: str) -> float:
        raise AssertionError(f"non-standard JSON constant {name}")

    doc = json.loads(text, parse_constant=no_constants)
    assert doc["scenario"] == {"task": {"name": "ridge"}} and doc["provenance"] == {"robustfl": "0.1.0"}
    assert [Cell.from_json(c) for c in doc["cells"]][0] == cells[0]
    assert doc["cells"][1]["final"]["relative_drift"] is None
    assert doc["cells"][2]["final"]["relative_drift"] is None
    assert json.loads(report.to_json([]))["cells"] == []


def test_html_escapes_and_colours() -> None:
    cells = [cell("<script>", "fedavg", 0, 0.05), cell("<script>", "krum", 0, 2.0),
             cell("<script>", "median", 0, None, "failed")]
    page = html_page(cells)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert '<td style="background:#c8e6c9">0.05</td>' in page  # safe: green
    assert '<td style="background:#ef9a9a">2</td>' in page  # broken: red
    assert "one fixed scale in every view" in page
    assert '<td style="background:#e1bee7">failed</td>' in page


def test_render_dispatch() -> None:
    cells = [cell("a", "d", 0, 0.3)]
    assert report.render(cells, "csv") == report.to_csv(cells)
    assert report.render(cells, "markdown") == report.to_markdown(cells)
    assert report.render(cells, "html") == html_page(cells)  # the one HTML page
    assert report.render(cells, "json") == report.to_json(cells)
    with pytest.raises(ConfigError, match="format must be one of csv, json, markdown, html, got 'xml'"):
        report.render(cells, "xml")
    with pytest.raises(ConfigError, match="'table' is the terminal's view"):  # not "one of table, ..."
        report.render(cells, "table")


def test_a_misspelt_metric_is_refused_not_shown_as_n_a_everywhere(tmp_path: Path) -> None:
    from robustfl.reporting.heatmap import heatmap

    cells = [factories.cell("none", "fedavg", 0, 0.5)]
    for call in (lambda: report.render(cells, "markdown", metric="relative_drfit"),
                 lambda: heatmap(cells, tmp_path / "h.png", metric="relative_drfit")):
        with pytest.raises(ConfigError, match="unknown metric 'relative_drfit'; did you mean 'relative_dri"):
            call()
    assert not (tmp_path / "h.png").exists()
    assert "n/a" in report.render(cells, "markdown", metric="accuracy")  # a known metric a cell lacks
