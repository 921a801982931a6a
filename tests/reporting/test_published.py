"""Published tables as data (robustfl.reporting.published): the shipped TOML files, their
validation, the comparison with a store, and the report views that show it."""

from __future__ import annotations

import html
import itertools
import json
import math
import statistics
import tomllib
from pathlib import Path
from typing import Any

import pytest

from robustfl import reporting as report
from robustfl.cli import main
from robustfl.errors import ConfigError, UnknownNameError
from robustfl.reporting import published as P
from robustfl.reporting.page import page
from robustfl.simulation.results import Cell

from ..conftest import ROOT
from ..factories import t_halfwidth as halfwidth
from ..factories import write_store, write_text

REPO = ROOT
SHIPPED = REPO / "scenarios" / "published"


def tiny_doc() -> dict[str, Any]:
    """A hand-made table: two columns (one mapped to labelled variants, one backdoor), three rules."""
    return {
        "paper": {"authors": ["Ada Lovelace", "Alan Turing"], "title": "T", "venue": "V", "year": 2024},
        "table": {
            "number": "9",
            "setting": "tiny",
            "metric": "error_rate",
            "scenario": "fltrust-mnist",
            "tolerance": 0.05,
            "verified": False,
            "source": "made up for the tests",
        },
        "attacks": {
            "Min-Max": ["min_max", "min_max_std", "min_max_sign"],
            "Scaling": "backdoor",
            "Other": [],
        },
        "rules": {"FedAvg": "fedavg", "Median": "median", "Krum": "krum"},
        "rows": {
            "FedAvg": {"Min-Max": 0.90, "Scaling": [0.64, 0.70], "Other": 0.5},
            "Median": {"Min-Max": 0.19, "Scaling": [0.05, 0.02]},
            "Krum": {"Min-Max": 0.11, "Scaling": [0.10, 0.01]},
        },
    }


def cell(
    attack: str,
    defense: str,
    seed: int,
    accuracy: float | None,
    asr: float | None = None,
    status: str = "ok",
    sweep: dict[str, Any] | None = None,
) -> Cell:
    return Cell(
        attack=attack,
        defense=defense,
        seed=seed,
        status=status,
        final={"accuracy": accuracy, "attack_success_rate": asr},
        sweep=dict(sweep or {}),
    )


def tiny_cells() -> list[Cell]:
    cells: list[Cell] = []
    # Min-Max under FedAvg: min_max (error 0.2) and min_max_std (error ~0.85): the strongest is std.
    for seed, acc in enumerate((0.80, 0.80, 0.80)):
        cells.append(cell("min_max", "fedavg", seed, acc))
    for seed, acc in enumerate((0.10, 0.20, 0.15)):
        cells.append(cell("min_max_std", "fedavg", seed, acc))
    for seed, acc in enumerate((0.83, 0.80, 0.86)):
        cells.append(cell("min_max", "median", seed, acc))
    for seed, acc in enumerate((0.90, 0.88, 0.92)):
        cells.append(cell("min_max", "krum", seed, acc))
    # backdoor: error and ASR; Krum not run
    for seed, (acc, asr) in enumerate(((0.40, 0.60), (0.30, 0.80), (0.35, 0.75))):
        cells.append(cell("backdoor", "fedavg", seed, acc, asr))
    for seed, (acc, asr) in enumerate(((0.95, 0.01), (0.94, 0.03))):
        cells.append(cell("backdoor", "median", seed, acc, asr))
    return cells


def by_key(comp: P.Comparison) -> dict[tuple[str, str], P.CellComparison]:
    (section,) = comp.sections
    return {(c.attack, c.rule): c for c in section.cells}


# -- the shipped files ---------------------------------------------------------------------------


def test_shipped_tables_load_and_match_the_fltrust_mnist_scenario() -> None:
    tables = {t.name: t for t in P.load_tables()}
    assert {"foundationfl-mnist", "fang2020-mnist"} <= set(tables)
    scenario = tomllib.loads((REPO / "scenarios" / "fltrust-mnist.toml").read_text())
    attacks = {a if isinstance(a, str) else a.get("label", a["name"]) for a in scenario["matrix"]["attacks"]}
    defenses = set(scenario["matrix"]["defenses"])
    for t in tables.values():
        assert t.scenario == "fltrust-mnist"
        assert t.metric == "error_rate" and t.backdoor_metric == "attack_success_rate"
        assert 0 < t.tolerance < 1 and t.paper.authors and t.paper.year > 2000
        assert set(t.rule_labels.values()) <= defenses
        for rule, attack in itertools.product(t.rules, t.attacks):
            labels = t.labels_for(rule, attack)
            # every mapped column names at least one label that the scenario runs
            assert not labels or set(labels) & attacks, (t.name, rule, attack)
        assert all(0 <= v <= 1 for v in [*t.error.values(), *t.asr.values()])


def test_foundationfl_table_holds_the_numbers_of_the_issue() -> None:
    t = {x.name: x for x in P.load_tables()}["foundationfl-mnist"]
    assert t.verified and t.number == "I(a)" and t.paper.venue == "NDSS" and t.paper.year == 2025
    cols = [
        "No attack",
        "LF attack",
        "Gaussian attack",
        "Trim attack",
        "Krum attack",
        "Min-Max attack",
        "Min-Sum attack",
    ]
    assert [t.error[("FedAvg", a)] for a in cols] == [0.05, 0.07, 0.90, 0.32, 0.10, 0.90, 0.90]
    assert [t.error[("Trim-mean", a)] for a in cols] == [0.06, 0.06, 0.06, 0.27, 0.08, 0.19, 0.13]
    assert [t.error[("Median", a)] for a in cols] == [0.05, 0.09, 0.16, 0.23, 0.17, 0.19, 0.23]
    assert t.error[("FedAvg", "Scaling attack")] == 0.64 and t.asr[("FedAvg", "Scaling attack")] == 0.70
    assert (t.error[("Trim-mean", "Scaling attack")], t.asr[("Trim-mean", "Scaling attack")]) == (0.13, 0.02)
    assert (t.error[("Median", "Scaling attack")], t.asr[("Median", "Scaling attack")]) == (0.05, 0.02)
    assert "min_max_std" in t.attack_labels["Min-Max attack"]


def test_fang2020_full_knowledge_column_maps_per_rule() -> None:
    t = {x.name: x for x in P.load_tables()}["fang2020-mnist"]
    assert t.labels_for("Krum", "Full") == ("fang_krum",)
    assert t.labels_for("Median", "Full") == ("fang_trim",)
    assert t.labels_for("Krum", "Partial") == ()


# -- validation ----------------------------------------------------------------------------------


def _doc_text(doc: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        return json.dumps(v)

    lines: list[str] = []
    for sec in ("paper", "table", "attacks", "rules"):
        lines.append(f"[{sec}]")
        lines += [f"{json.dumps(k)} = {value(v)}" for k, v in doc[sec].items()]
    for rule, row in doc["rows"].items():
        lines.append(f"[rows.{json.dumps(rule)}]")
        lines += [f"{json.dumps(k)} = {value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


def test_a_round_trip_through_toml(tmp_path: Path) -> None:
    t = P.load_table(write_text(tmp_path, _doc_text(tiny_doc()), "bad.toml"))
    assert t.name == "bad" and t.rules == ("FedAvg", "Median", "Krum")
    assert t.attack_labels["Other"] == () and t.asr[("Median", "Scaling")] == 0.02
    assert t.title == "Lovelace and Turing, V 2024, Table 9"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["rows"]["FedAvg"].update({"Min-Max": 1.5}), "rows.'FedAvg'.'Min-Max'"),
        (lambda d: d["rows"]["FedAvg"].update({"Min-Max": "high"}), "'high'"),
        (lambda d: d["rows"]["FedAvg"].update({"Scaling": [0.1, 0.2, 0.3]}), "[0.1, 0.2, 0.3]"),
        (lambda d: d["rows"]["FedAvg"].update({"Nope": 0.1}), "'Nope' is not one of the [attacks]"),
        (lambda d: d["rows"].update({"Bulyan": {"Min-Max": 0.1}}), "rows.'Bulyan'"),
        (lambda d: d["table"].update({"tolerance": "small"}), "table.tolerance"),
        (lambda d: d["table"].update({"metric": "accuracy"}), "'accuracy'"),
        (lambda d: d["table"].update({"colour": "red"}), "table.colour"),
        (lambda d: d["table"].pop("scenario"), "table.scenario is missing"),
        (lambda d: d["paper"].update({"year": "2024"}), "paper.year"),
        (lambda d: d["rules"].update({"Median": ["median", "krum"]}), "rules.'Median'"),
        (lambda d: d["attacks"].update({"Scaling": 3}), "attacks.'Scaling'"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_value(tmp_path: Path, edit: Any, needle: str) -> None:
    doc = tiny_doc()
    edit(doc)
    path = write_text(tmp_path, _doc_text(doc), "bad.toml")
    with pytest.raises(ConfigError) as info:
        P.load_table(path)
    msg = str(info.value)
    assert "\n" not in msg and needle in msg and "bad.toml" in msg


def test_bad_toml_and_unknown_section(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        P.load_table(write_text(tmp_path, "[paper\n", "bad.toml"))
    with pytest.raises(ConfigError, match=r"unknown section \[extra\]"):
        P.load_table(write_text(tmp_path, _doc_text(tiny_doc()) + "[extra]\nx = 1\n", "bad.toml"))


# -- the comparison ------------------------------------------------------------------------------


def test_comparison_against_a_hand_made_cell_list() -> None:
    table = P.parse_table(tiny_doc(), "tiny")
    comp = P.compare_published(tiny_cells(), table)
    got = by_key(comp)

    # Min-Max / FedAvg: the strongest variant present (min_max_std: errors 0.9, 0.8, 0.85)
    c = got[("Min-Max", "FedAvg")]
    errors = [0.9, 0.8, 0.85]
    assert c.present == ("min_max", "min_max_std") and c.chosen == "min_max_std" and c.strongest_of
    assert c.measured is not None and c.measured.n == 3
    assert c.measured.mean == pytest.approx(statistics.fmean(errors))
    assert c.measured.ci95 == pytest.approx(halfwidth(errors))
    assert c.difference == pytest.approx(0.85 - 0.90) and not c.outside
    assert "strongest of min_max, min_max_std" in P.attack_text(c)

    # Min-Max / Median: errors 0.17, 0.20, 0.14 vs 0.19: inside; Krum: 0.10 vs 0.11: inside
    assert got[("Min-Max", "Median")].difference == pytest.approx(0.17 - 0.19)
    assert not got[("Min-Max", "Median")].outside
    assert got[("Min-Max", "Krum")].difference == pytest.approx(0.10 - 0.11)

    # Scaling / FedAvg: error 0.65 vs 0.64 inside, ASR 0.7166 vs 0.70 inside
    c = got[("Scaling", "FedAvg")]
    assert c.measured is not None
    assert c.measured.asr_mean == pytest.approx(statistics.fmean([0.6, 0.8, 0.75]))
    assert c.measured.asr_ci95 == pytest.approx(halfwidth([0.6, 0.8, 0.75]))
    assert c.asr_difference == pytest.approx(statistics.fmean([0.6, 0.8, 0.75]) - 0.70)
    assert not c.outside and not c.asr_outside

    # Scaling / Median: error 0.055 vs 0.05; ASR 0.02 vs 0.02; two seeds
    c = got[("Scaling", "Median")]
    assert c.measured is not None and c.measured.n == 2
    assert c.measured.ci95 == pytest.approx(halfwidth([0.05, 0.06]))

    # Scaling / Krum: not in the store; Other: no robustfl counterpart
    assert got[("Scaling", "Krum")].status == "not run" and got[("Scaling", "Krum")].difference is None
    assert got[("Other", "FedAvg")].status == "not mapped"
    assert got[("Other", "Median")].status == "not mapped"


def test_flags_cells_outside_the_tolerance() -> None:
    doc = tiny_doc()
    doc["rows"]["Median"]["Min-Max"] = 0.05  # measured 0.17: 0.12 off
    doc["rows"]["FedAvg"]["Scaling"] = [0.64, 0.30]  # ASR 0.7166 measured: 0.4166 off
    comp = P.compare_published(tiny_cells(), P.parse_table(doc, "tiny"))
    got = by_key(comp)
    assert got[("Min-Max", "Median")].outside
    assert got[("Scaling", "FedAvg")].asr_outside and not got[("Scaling", "FedAvg")].outside
    assert comp.flagged == 2
    assert P.row_cells(got[("Min-Max", "Median")])[5] == P.FLAG
    assert P.row_cells(got[("Min-Max", "Krum")])[5] == "ok"


def test_kendall_tau_against_a_hand_computed_case() -> None:
    # published 0.1 < 0.2 < 0.3 < 0.4; measured 0.1 < 0.3 < 0.2 < 0.4: one discordant pair of six
    r = P.kendall("A", [("a", 0.1, 0.1), ("b", 0.2, 0.3), ("c", 0.3, 0.2), ("d", 0.4, 0.4)])
    assert r.tau == pytest.approx((5 - 1) / 6) and r.rules == ("a", "b", "c", "d")
    # the tiny table's Min-Max column: published FedAvg 0.90 > Median 0.19 > Krum 0.11,
    # measured 0.85 > 0.17 > 0.10: the same order
    comp = P.compare_published(tiny_cells(), P.parse_table(tiny_doc(), "tiny"))
    ranks = {x.attack: x for x in comp.sections[0].ranks}
    assert ranks["Min-Max"].tau == pytest.approx(1.0)
    # Scaling: two rules (Krum not run): FedAvg 0.64 > Median 0.05, measured 0.65 > 0.055
    assert ranks["Scaling"].tau == pytest.approx(1.0) and ranks["Scaling"].rules == ("FedAvg", "Median")
    assert "Other" not in ranks  # nothing mapped: no tau


def test_kendall_tau_undefined_says_why() -> None:
    assert P.kendall("A", [("a", 0.1, 0.2)]).tau is None
    assert "1 rule" in P.kendall("A", [("a", 0.1, 0.2)]).text()
    tied = P.kendall("A", [("a", 0.1, 0.2), ("b", 0.1, 0.3)])
    assert tied.tau is None and "published values are all tied" in tied.text()
    tied = P.kendall("A", [("a", 0.1, 0.2), ("b", 0.3, 0.2)])
    assert tied.tau is None and "measured values are all tied" in tied.text()
    # a diverged group (+inf) ranks worst
    assert P.kendall("A", [("a", 0.1, 0.2), ("b", 0.3, math.inf)]).tau == pytest.approx(1.0)


def test_diverged_and_failed_cells() -> None:
    cells = tiny_cells()
    cells.append(cell("min_max_sign", "fedavg", 0, None, status="diverged"))
    cells.append(cell("min_max", "krum", 3, None, status="failed"))
    got = by_key(P.compare_published(cells, P.parse_table(tiny_doc(), "tiny")))
    c = got[("Min-Max", "FedAvg")]
    assert c.chosen == "min_max_sign" and c.status == "diverged" and c.outside and c.difference is None
    k = got[("Min-Max", "Krum")]
    assert k.measured is not None and k.measured.failed == 1 and k.measured.n == 3
    assert "(1 failed)" in P.row_cells(k)[2]


def test_one_section_per_sweep_point() -> None:
    cells = [cell("backdoor", "fedavg", 0, 0.5, 0.5, sweep={"federation.rounds": r}) for r in (10, 20)]
    comp = P.compare_published(cells, P.parse_table(tiny_doc(), "tiny"))
    assert [s.point for s in comp.sections] == ["federation.rounds=10", "federation.rounds=20"]


def test_match_tables() -> None:
    tables = [P.parse_table(tiny_doc(), "tiny")]
    prov = {"scenario_path": "/x/scenarios/fltrust-mnist.toml"}
    assert P.match_tables(None, prov, "auto", tables) == tables
    assert P.match_tables(None, {"scenario_path": "/x/quick.toml"}, "auto", tables) == []
    assert P.match_tables(None, None, "auto", tables) == []
    assert P.match_tables(None, {"scenario_name": "fltrust-mnist"}, "auto", tables) == tables
    assert P.match_tables(None, prov, "none", tables) == []
    assert P.match_tables(None, None, "tiny", tables) == tables
    with pytest.raises(UnknownNameError):
        P.match_tables(None, None, "tinny", tables)


# -- the report views ----------------------------------------------------------------------------


def _store(path: Path, scenario_file: str) -> Path:
    cells = tiny_cells()
    for c in cells:
        c.rounds = [{"round": 1, "relative_drift": 0.5, "accuracy": c.final["accuracy"]}]
        c.final["relative_drift"] = 0.5
    run = ({"task": {"name": "mnist"}}, {"robustfl": "0.1.0", "scenario_path": scenario_file})
    return write_store(path, cells, run=run, config=lambda i: {"i": i})


@pytest.fixture()
def matching(tmp_path: Path) -> Path:
    return _store(tmp_path / "match.db", str(REPO / "scenarios" / "fltrust-mnist.toml"))


@pytest.fixture()
def other(tmp_path: Path) -> Path:
    return _store(tmp_path / "other.db", str(REPO / "scenarios" / "quick.toml"))


def _report(store: Path, fmt: str, tmp_path: Path, *extra: str) -> str:
    out = tmp_path / f"out.{fmt}"
    assert main(["report", str(store), "--format", fmt, "--output", str(out), *extra]) == 0
    return out.read_text()


def test_markdown_report_shows_the_side_by_side_table(matching: Path, other: Path, tmp_path: Path) -> None:
    text = _report(matching, "markdown", tmp_path)
    assert "## Measured vs published: Fang et al., NDSS 2025, Table I(a)" in text
    assert "Fang et al., USENIX Security 2020, Table 2(b)" in text
    assert "Min-Max attack → min_max_std (strongest of min_max, min_max_std)" in text
    assert "Kendall τ" in text and "0.64" in text
    assert "Measured vs published" not in _report(other, "markdown", tmp_path)
    assert "Measured vs published" not in _report(matching, "markdown", tmp_path, "--published", "none")
    one = _report(other, "markdown", tmp_path, "--published", "fang2020-mnist")
    assert "Table 2(b)" in one and "Table I(a)" not in one


def test_html_page_shows_the_side_by_side_table(matching: Path, other: Path, tmp_path: Path) -> None:
    text = _report(matching, "html", tmp_path)
    assert 'id="published"' in text and 'class="published-cells"' in text and "Table I(a)" in text
    text = _report(other, "html", tmp_path)
    assert "published-cells" not in text and "Measured vs published" not in text


def test_json_and_table_reports(matching: Path, other: Path, tmp_path: Path) -> None:
    doc = json.loads(_report(matching, "json", tmp_path))
    names = [c["table"] for c in doc["published"]]
    assert names == ["fang2020-mnist", "foundationfl-mnist"]
    cells = {(c["attack"], c["rule"]): c for c in doc["published"][1]["sections"][0]["cells"]}
    assert cells[("Scaling attack", "FedAvg")]["published_asr"] == 0.70
    assert "published" not in json.loads(_report(other, "json", tmp_path))
    text = _report(matching, "table", tmp_path)
    assert "Measured vs published" in text and "Kendall" in text
    assert "Measured vs published" not in _report(other, "table", tmp_path)


def test_render_without_published_is_unchanged() -> None:
    cells = tiny_cells()
    assert report.render(cells, "markdown") == report.render(cells, "markdown", published=[])
    assert "Measured vs published" not in page(cells)


def test_unknown_published_name_is_exit_2(matching: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(matching), "--published", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_a_table_named_for_a_store_of_another_scenario_is_shown_with_a_warning(
    matching: Path, other: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warning = "this table is for scenario 'fltrust-mnist', and the store ran scenario 'quick'"
    for fmt in ("markdown", "html", "table"):
        text = " ".join(html.unescape(_report(other, fmt, tmp_path, "--published", "fang2020-mnist")).split())
        assert "Table 2(b)" in text and warning in text, fmt
        err = capsys.readouterr().err
        assert "warning: published table 'fang2020-mnist' is for scenario 'fltrust-mnist'" in err
        assert f"{other} ran 'quick'" in err
    doc = json.loads(_report(other, "json", tmp_path, "--published", "fang2020-mnist"))
    assert [(c["scenario"], c["store_scenario"]) for c in doc["published"]] == [("fltrust-mnist", "quick")]
    assert "warning" in capsys.readouterr().err
    # the store of the table's own scenario: no warning, named or auto
    for extra in ((), ("--published", "fang2020-mnist")):
        assert warning.split(",")[0] not in _report(matching, "markdown", tmp_path, *extra)
        assert "warning" not in capsys.readouterr().err
    doc = json.loads(_report(matching, "json", tmp_path))
    assert {c["store_scenario"] for c in doc["published"]} == {"fltrust-mnist"}


def test_a_table_path_that_is_no_table_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "store.db"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match="not a text \\(TOML\\) file"):
        P.load_table(binary)
    for where in (tmp_path / "nowhere", binary):
        with pytest.raises(ConfigError, match="is not a folder of table files"):  # it returned []
            P.load_tables(where)
