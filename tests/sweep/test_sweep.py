"""Sweeps over scenario keys: the cells a sweep expands to, and its views (worst case over attacks,
one table per sweep axis, compute time per cell), checked against the same numbers computed by hand
from the cells."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from robustfl import reporting as report
from robustfl.cli import main, render
from robustfl.simulation.results import Cell
from robustfl.simulation.store import Store

from .. import factories

BYZ = [0.1, 0.3]
ASSUMED = [0.1, 0.4]  # f-hat = 4 of 10 clients: below Krum's min_clients (2 f-hat + 3 = 11)
ATTACKS = ["sign_flip", "alie"]
DEFENSES = ["fedavg", "median", "krum", "fltrust"]
SEEDS = [0, 1]

SCENARIO = f"""
[task]
name = "ridge"
dim = 5
samples_per_client = 20

[federation]
clients = 10
rounds = 10
local_lr = 0.1

[server]
root_size = 30

[matrix]
attacks = {json.dumps(ATTACKS)}
defenses = {json.dumps(DEFENSES)}
seeds = {json.dumps(SEEDS)}
sweep = {{ "threat.byzantine" = {json.dumps(BYZ)}, "threat.assumed_byzantine" = {json.dumps(ASSUMED)} }}
"""


# -- by hand ----------------------------------------------------------------------------------------


def _drift(doc: dict[str, Any]) -> float:
    return math.inf if doc["status"] == "diverged" else float(doc["final"]["relative_drift"])


def _hand_worst(docs: list[dict[str, Any]]) -> dict[tuple[float, float, str], tuple[float, str]]:
    """(byzantine, assumed, defense) -> (largest seed-mean drift over attacks, that attack)."""
    out = {}
    for b, f, d in itertools.product(BYZ, ASSUMED, DEFENSES):
        means = {}
        for a in ATTACKS:
            vals = [_drift(c) for c in docs if c["attack"] == a and c["defense"] == d
                    and c["sweep"] == {"threat.byzantine": b, "threat.assumed_byzantine": f}]  # fmt: skip
            assert len(vals) == len(SEEDS)
            means[a] = sum(vals) / len(vals)
        worst = max(ATTACKS, key=lambda a: means[a])
        out[(b, f, d)] = (means[worst], worst)
    return out


def _hand_kappa(docs: list[dict[str, Any]], b: float, f: float, d: str, attack: str) -> float:
    """κ̂ of (point, attack, defense): per seed the largest aggregation_error² over its rounds, mean
    over seeds."""
    sweep = {"threat.byzantine": b, "threat.assumed_byzantine": f}
    per_seed = [max(r["aggregation_error"] ** 2 for r in c["rounds"] if r["aggregation_error"] is not None)
                for c in docs if (c["attack"], c["defense"], c["sweep"]) == (attack, d, sweep)]
    return sum(per_seed) / len(per_seed)


def test_sweep_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich: no cell wrapped onto two lines
    path = tmp_path / "sw.toml"
    path.write_text(SCENARIO)
    store, js = tmp_path / "sw.db", tmp_path / "sw.json"
    argv = ["matrix", str(path), "--workers", "1", "--store", str(store), "--json", str(js), "--quiet",
            "--allow-outside-guarantee"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    docs = json.loads(js.read_text())["cells"]

    # the expansion: every (point, attack, defense, seed) once, with the sweep values as given
    got = sorted((*c["sweep"].values(), c["attack"], c["defense"], c["seed"]) for c in docs)
    assert got == sorted(itertools.product(BYZ, ASSUMED, ATTACKS, DEFENSES, SEEDS))
    assert all(list(c["sweep"]) == ["threat.byzantine", "threat.assumed_byzantine"] for c in docs)
    assert all(c["status"] == "ok" for c in docs)
    # only Krum at f-hat = 4 runs outside its guarantee
    outside = {(c["defense"], *c["sweep"].values()) for c in docs if c.get("outside_guarantee")}
    assert outside == {("krum", b, 0.4) for b in BYZ}

    hand = _hand_worst(docs)
    cells = [Cell.from_json(c) for c in docs]
    wc = report.worst_case(cells)
    assert len(wc) == len(BYZ) * len(ASSUMED) * len(DEFENSES)
    for (b, f, d), (mean, attack) in hand.items():
        entry = wc[(f"threat.byzantine={b}, threat.assumed_byzantine={f}", d)]
        assert entry["attack"] == attack and entry["mean"] == pytest.approx(mean, rel=1e-15, abs=0)
        kappa = _hand_kappa(docs, b, f, d, attack)
        assert entry["kappa"] == pytest.approx(kappa, rel=1e-12)
        assert entry["text"] == f"{report.format_value(mean)} ({attack}) κ̂ {kappa:.3g}"

    views = report.axis_views(cells)
    assert list(views) == ["threat.byzantine", "threat.assumed_byzantine"]
    axes = [("threat.byzantine", BYZ, ASSUMED), ("threat.assumed_byzantine", ASSUMED, BYZ)]
    for key, values, others in axes:
        view = views[key]
        assert view["values"] == [str(v) for v in values] and view["defenses"] == DEFENSES
        for v, d in itertools.product(values, DEFENSES):
            worsts = [hand[(v, o, d) if key == "threat.byzantine" else (o, v, d)][0] for o in others]
            row = view["rows"][(str(v), d)]
            assert row["points"] == len(others)
            assert row["mean"] == pytest.approx(sum(worsts) / len(worsts), rel=1e-15, abs=0)
            assert row["worst"] == max(worsts)
            avg_t, worst_t = report.format_value(sum(worsts) / len(worsts)), report.format_value(max(worsts))
            assert row["text"] == (avg_t if avg_t == worst_t else f"{avg_t} (worst {worst_t})")
        for d in DEFENSES:  # the "worst case" row: over every sweep point
            every = [hand[(b, f, d)][0] for b in BYZ for f in ASSUMED]
            assert view["worst"][d]["worst"] == max(every)
            assert view["worst"][d]["mean"] == pytest.approx(statistics.fmean(every), rel=1e-15, abs=0)

    # the printed views carry those numbers: per-axis tables and the worst-case rows
    assert "by threat.byzantine" in out and "by threat.assumed_byzantine" in out
    assert out.count("worst case") == len(BYZ) * len(ASSUMED) + 2
    flat = " ".join(out.split())
    for d in DEFENSES:
        assert views["threat.byzantine"]["worst"][d]["text"] in flat

    # robustfl report: the Markdown has the same per-axis numbers and the time per cell
    md_path = tmp_path / "r.md"
    assert main(["report", str(store), "--format", "markdown", "--output", str(md_path)]) == 0
    md = md_path.read_text(encoding="utf-8")
    assert "**by threat.byzantine**" in md
    assert "| threat.byzantine \\\\ defense | fedavg | median | krum | fltrust |" in md
    for v in BYZ:
        row = views["threat.byzantine"]["rows"]
        assert f"| {v} | " + " | ".join(row[(str(v), d)]["text"] for d in DEFENSES) + " |" in md
    with Store(store) as st:
        stored = st.cells()
    assert {c.key for c in stored} == {c["key"] for c in docs}
    b, f, a, d = BYZ[0], ASSUMED[0], ATTACKS[0], DEFENSES[0]
    times = [x.elapsed_s for x in stored if (*x.sweep.values(), x.attack, x.defense) == (b, f, a, d)]
    assert len(times) == 2 and all(t > 0 for t in times)
    per_cell = report.format_seconds(sum(times) / 2)
    block = md.split(f"**compute time per cell, threat.byzantine={b}, threat.assumed_byzantine={f}**")[1]
    assert block.split("\n\n")[1].splitlines()[2].startswith(f"| {a} | {per_cell} | ")

    # robustfl report STORE (the table): the same time as a second line under the cell's value
    assert main(["report", str(store)]) == 0
    table = capsys.readouterr().out
    assert per_cell in table and "compute time" in table and "by threat.assumed_byzantine" in table


# -- the views on hand-made cells -------------------------------------------------------------------


def c(attack: str, defense: str, seed: int, drift: float | None, status: str = "ok", **kw: Any) -> Cell:
    return factories.cell(attack, defense, seed, drift, status, metrics={"accuracy": drift}, error=None, **kw)


def test_worst_case_diverged_failed_and_direction() -> None:
    cells = [
        c("none", "fedavg", 0, 0.1), c("none", "fedavg", 1, 0.3),  # mean 0.2
        c("alie", "fedavg", 0, 0.5), c("alie", "fedavg", 1, 0.7),  # mean 0.6: the worst
        c("none", "krum", 0, 0.4), c("alie", "krum", 0, None, "diverged"),  # diverged beats any value
        c("none", "median", 0, 0.4), c("alie", "median", 0, None, "failed"),  # failed: left out, counted
        c("none", "cc", 0, None, "failed"), c("alie", "cc", 0, None, "failed"),
        c("none", "tie", 0, 0.3), c("alie", "tie", 0, 0.3),  # a tie: the first attack
    ]  # fmt: skip
    wc = report.worst_case(cells)
    assert list(wc) == [("", "fedavg"), ("", "krum"), ("", "median"), ("", "cc"), ("", "tie")]
    e = wc[("", "fedavg")]
    assert (e["attack"], e["status"], e["text"]) == ("alie", "ok", "0.6 (alie)")
    assert e["mean"] == pytest.approx(0.6) and e["by_attack"] == pytest.approx({"none": 0.2, "alie": 0.6})
    assert e["severity"] == "poor"
    e = wc[("", "krum")]
    assert (e["attack"], e["status"], e["mean"]) == ("alie", "diverged", math.inf)
    assert e["text"] == "diverged (alie)"
    e = wc[("", "median")]
    assert (e["attack"], e["mean"], e["missing"]) == ("none", 0.4, ["alie"])
    assert e["text"] == "0.4 (none; 1 without a value)"
    e = wc[("", "cc")]
    assert e["status"] == "failed" and e["attack"] is None and math.isnan(e["mean"]) and e["text"] == "failed"
    assert wc[("", "tie")]["attack"] == "none"
    # accuracy: larger is better, so the worst attack is the smallest
    acc = report.worst_case(cells[:4], metric="accuracy")[("", "fedavg")]
    assert acc["attack"] == "none" and acc["mean"] == pytest.approx(0.2) and acc["severity"] is None


def test_axis_views_one_and_two_keys() -> None:
    def point(b: float, f: float) -> dict[str, Any]:
        return {"threat.byzantine": b, "threat.assumed_byzantine": f}

    # (byzantine, assumed) -> (sign_flip's drift, alie's drift); None: sign_flip diverged
    drifts = {
        (0.1, 0.1): (0.1, 0.2), (0.1, 0.2): (0.3, 0.05), (0.2, 0.1): (0.4, 0.9), (0.2, 0.2): (None, 0.5),
    }  # fmt: skip
    cells = []
    for (b, f), (x, y) in drifts.items():
        cells.append(c("sign_flip", "median", 0, x, "ok" if x is not None else "diverged", sweep=point(b, f)))
        cells.append(c("alie", "median", 0, y, sweep=point(b, f), outside_guarantee=(f == 0.2)))
    views = report.axis_views(cells)
    # worst over attacks per point: (0.1,0.1) 0.2, (0.1,0.2) 0.3, (0.2,0.1) 0.9, (0.2,0.2) diverged
    byz = views["threat.byzantine"]
    assert byz["values"] == ["0.1", "0.2"] and byz["defenses"] == ["median"]
    r = byz["rows"][("0.1", "median")]
    assert r["mean"] == pytest.approx(0.25) and r["worst"] == 0.3 and r["worst_at"][1] == "sign_flip"
    assert r["worst_at"][0] == "threat.byzantine=0.1, threat.assumed_byzantine=0.2" and r["outside_guarantee"]
    assert r["text"] == "0.25 (worst 0.3)" and r["severity"] == "weak"
    r = byz["rows"][("0.2", "median")]
    assert r["status"] == "diverged" and r["mean"] == math.inf and r["text"] == "diverged (1/2)"
    assert r["severity"] == "diverged"
    assert byz["worst"]["median"]["text"] == "diverged (1/4)"
    f = views["threat.assumed_byzantine"]["rows"][("0.1", "median")]
    assert f["mean"] == pytest.approx(0.55) and f["worst"] == 0.9 and not f["outside_guarantee"]

    one = report.axis_views([x for x in cells if x.sweep["threat.assumed_byzantine"] == 0.1])
    assert list(one) == ["threat.byzantine", "threat.assumed_byzantine"]
    plain = [Cell(x.attack, x.defense, x.seed, x.status, final=x.final, sweep={"threat.byzantine": b})
             for x in cells if x.sweep["threat.assumed_byzantine"] == 0.1
             for b in [x.sweep["threat.byzantine"]]]  # fmt: skip
    only = report.axis_views(plain)["threat.byzantine"]
    assert [only["rows"][(v, "median")]["text"] for v in ("0.1", "0.2")] == ["0.2", "0.9"]  # one point a row
    assert only["worst"]["median"]["text"] == "0.55 (worst 0.9)"
    assert report.axis_views([c("a", "d", 0, 0.1)]) == {}  # no sweep, no axes
    # the worst shown only where it differs from the mean (here a rule that ignores the second axis)
    same = [c("a", "d", 0, 0.2, sweep={"x": 1, "y": y}) for y in (1, 2)]
    row = report.axis_views(same)["x"]["rows"][("1", "d")]
    assert row["points"] == 2 and row["mean"] == row["worst"] == 0.2 and row["text"] == "0.2"
    assert "diverged (k/n)" in report.axis_caption(byz, "relative_drift")
    assert "diverged" not in report.axis_caption(report.axis_views(same)["x"], "relative_drift")


def test_mean_elapsed_and_markdown_time_table() -> None:
    cells = [c("a", "d", 0, 0.1, elapsed_s=1.0), c("a", "d", 1, 0.2, elapsed_s=2.0),
             c("a", "d", 2, None, "failed"), c("b", "d", 0, 0.1, elapsed_s=0.5)]  # fmt: skip
    assert report.mean_elapsed(cells) == {("", "a", "d"): 1.5, ("", "b", "d"): 0.5}
    md = report.to_markdown(cells)
    table = "| attack \\\\ defense | d |\n|---|---:|\n| a | 1.5 s |\n| b | 0.5 s |"
    assert "**compute time per cell**\n\n" + table in md
    assert "| **worst case** | 0.15 (a) |" in md  # a group with a failed seed still has its value
    assert "compute time" not in report.to_markdown(cells, show_time=False)
    untimed = [c("a", "d", 0, 0.1)]
    assert "compute time" not in report.to_markdown(untimed)


def test_render_worst_case_footer_and_axis_tables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {  # (x, attack, defense) -> drift
        (1, "none", "fedavg"): 0.05, (1, "alie", "fedavg"): 0.7, (1, "none", "krum"): 0.2,
        (1, "alie", "krum"): 2.0, (2, "none", "fedavg"): 0.06, (2, "alie", "fedavg"): 0.8,
        (2, "none", "krum"): 0.3, (2, "alie", "krum"): 0.4,
    }  # fmt: skip
    cells = [c(a, d, 0, v, sweep={"x": x}) for (x, a, d), v in values.items()]
    tables = render.matrix_tables(cells)
    assert [len(t.rows) for t in tables] == [2, 2] and all(t.show_footer for t in tables)
    footers = [[str(col.footer) for col in t.columns] for t in tables]
    assert footers == [["worst case", "0.7 (alie)", "2 (alie)"], ["worst case", "0.8 (alie)", "0.4 (alie)"]]
    assert [str(col.footer.style) for col in tables[0].columns[1:]] == ["dark_orange", "red"]  # type: ignore[union-attr]

    [axis] = render.sweep_tables(cells)
    assert axis.title == "by x" and str(axis.columns[0].header) == "x \\ defense"
    columns = [[str(cell) for cell in col.cells] for col in axis.columns]
    assert columns == [["1", "2"], ["0.7", "0.8"], ["2", "0.4"]]
    assert [str(col.footer) for col in axis.columns] == ["worst case", "0.75 (worst 0.8)", "1.2 (worst 2)"]

    monkeypatch.setenv("COLUMNS", "200")
    render.print_matrix(cells)  # to stdout
    out = capsys.readouterr().out
    assert out.count("attack \\ defense") == 2 and out.index("x=2") < out.index("by x")
    assert "1.2 (worst 2)" in out
    render.print_matrix(cells, sweep=False)
    assert "by x" not in capsys.readouterr().out
    # one attack: no worst-case row
    assert not render.matrix_tables([c("a", "d", 0, 0.1)])[0].show_footer
    # the Markdown report: the same worst-case rows, and the axis view
    md = report.to_markdown(cells)
    assert "| **worst case** | 0.7 (alie) | 2 (alie) |" in md
    assert "| 1 | 0.7 | 2 |" in md and "| **worst case** | 0.75 (worst 0.8) | 1.2 (worst 2) |" in md


def test_cells_whose_attack_calls_the_oracle_are_dispatched_first() -> None:
    """LPT-style dispatch: the oracle-searching cells (optimal, worst_case) go to the workers
    before the others, each group in plan order; the matrix's output keeps plan order."""
    from robustfl.scenario import load_scenario
    from robustfl.sweep.driver import longest_first
    from robustfl.sweep.plan import plan

    sc = load_scenario("defenses")
    jobs = plan(sc, ["none", "optimal", "alie", "worst_case"], ["fedavg", "median"], [0, 1])
    order = [(j.attack if isinstance(j.attack, str) else j.attack["name"]) for j in longest_first(jobs)]
    assert order[:8] == ["optimal"] * 4 + ["worst_case"] * 4
    assert order[8:] == ["none"] * 4 + ["alie"] * 4
    rest = [j for j in longest_first(jobs) if j.attack == "none"]
    assert [(j.defense, j.seed) for j in rest] == [("fedavg", 0), ("fedavg", 1), ("median", 0), ("median", 1)]


def test_a_sweep_key_an_entry_does_not_take_shows_its_one_run_at_every_point(tmp_path: Path) -> None:
    """``attack.z`` swept over ALIE and sign-flip: ALIE runs at each z, sign-flip (no z) has one cell
    key, so one run, which the result shows at both points under their own values (it came back
    twice labelled z = 1.0, and never at z = 2.0). Sweeping attack.name or .label changes nothing
    a matrix runs: refused."""
    import robustfl
    from robustfl.errors import ConfigError

    base = ["federation.rounds=2", "federation.clients=10"]
    sc = robustfl.load_scenario("quick", [*base, 'matrix.sweep={"attack.z" = [1.0, 2.0]}'])
    class Total:
        def start(self, total: int) -> None:
            self.total = total

        def cell_started(self, label: str) -> None: ...

        def cell_finished(self, cell: Cell) -> None: ...

    seen = Total()
    result = robustfl.run_matrix(sc, attacks=["alie", "sign_flip"], defenses=["median"], seeds=[0], workers=1,
                                 store=str(tmp_path / "m.db"), progress=seen)
    assert seen.total == 3  # the cells that run (it said 4 and ended at 3)
    got = sorted((c.attack, c.sweep["attack.z"]) for c in result.cells)
    assert got == [("alie", 1.0), ("alie", 2.0), ("sign_flip", 1.0), ("sign_flip", 2.0)]
    alie = {c.sweep["attack.z"]: c.final["relative_drift"] for c in result.cells if c.attack == "alie"}
    flips = [c for c in result.cells if c.attack == "sign_flip"]
    assert alie[1.0] != alie[2.0] and flips[0].final == flips[1].final and flips[0].key == flips[1].key
    with Store(tmp_path / "m.db", read_only=True) as st:
        assert len(st.cells()) == 3  # the sign-flip cell ran (and was stored) once
    for key in ("attack.name", "defense.label"):
        bad = robustfl.load_scenario("quick", [*base, f'matrix.sweep={{"{key}" = ["alie", "ipm"]}}'])
        with pytest.raises(ConfigError, match=f"matrix.sweep key '{key}' would change nothing"):
            robustfl.run_matrix(bad, attacks=["none"], defenses=["median"], seeds=[0], workers=1,
                                store=str(tmp_path / "n.db"))
