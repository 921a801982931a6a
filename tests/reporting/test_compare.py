"""`robustfl compare A B`: cell by cell, on hand-made stores whose differences are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustfl.cli import main
from robustfl.reporting.compare import compare, counts, differences_note, setting_differences
from robustfl.simulation.results import Cell

from .. import factories


def cell(
    attack: str,
    defense: str,
    seed: int,
    drift: float | None,
    status: str = "ok",
    acc: float | None = None,
    sweep: dict[str, object] | None = None,
    rounds: int = 3,
) -> Cell:
    metrics = {"round": rounds, "accuracy": acc}
    return factories.cell(
        attack, defense, seed, drift, status, metrics=metrics, history=rounds, sweep=dict(sweep or {})
    )


A = [
    cell("none", "fedavg", 0, 0.125, acc=0.75),  # same in B
    cell("sign_flip", "fedavg", 0, 0.5, acc=0.5),  # values change in B
    cell("sign_flip", "median", 0, None, status="failed"),  # status change: failed -> ok
    cell("alie", "krum", 0, 0.25),  # only in A
    cell("none", "fedavg", 0, 0.25, sweep={"threat.byzantine": 0.3}),  # same identity but another sweep point
    cell("ipm", "fltrust", 1, 0.5, rounds=3),  # same final values, one more round in B: changed
]
B = [
    cell("ipm", "fltrust", 1, 0.5, rounds=4),
    cell("sign_flip", "median", 0, 0.375),
    cell("none", "fedavg", 0, 0.125, acc=0.75),
    cell("sign_flip", "fedavg", 0, 0.25, acc=0.625),
    cell("scaling", "fedavg", 2, 1.5),  # only in B
    cell("none", "fedavg", 0, 0.75, sweep={"threat.byzantine": 0.3}, status="diverged"),
]


def _by(rows: list[dict[str, object]]) -> dict[tuple[object, ...], dict[str, object]]:
    return {(r["attack"], r["defense"], r["seed"], str(r["sweep"])): r for r in rows}


def test_compare_rows() -> None:
    rows = compare(A, B)
    # A's identities first in A's order, then B's own in B's order.
    assert [(r["attack"], r["defense"], r["seed"]) for r in rows] == [
        ("none", "fedavg", 0),
        ("sign_flip", "fedavg", 0),
        ("sign_flip", "median", 0),
        ("alie", "krum", 0),
        ("none", "fedavg", 0),
        ("ipm", "fltrust", 1),
        ("scaling", "fedavg", 2),
    ]
    by = _by(rows)
    same = by[("none", "fedavg", 0, "{}")]
    assert same["change"] == "same" and same["relative_drift_delta"] == 0.0 and same["accuracy_delta"] == 0.0
    vals = by[("sign_flip", "fedavg", 0, "{}")]
    assert vals["change"] == "changed"
    assert (vals["relative_drift_a"], vals["relative_drift_b"], vals["relative_drift_delta"]) == (
        0.5,
        0.25,
        -0.25,
    )
    assert (vals["accuracy_a"], vals["accuracy_b"], vals["accuracy_delta"]) == (0.5, 0.625, 0.125)
    st = by[("sign_flip", "median", 0, "{}")]
    assert (st["change"], st["status_a"], st["status_b"]) == ("status", "failed", "ok")
    assert st["error_a"] == "RuntimeError: boom" and st["error_b"] is None
    assert (
        st["relative_drift_a"] is None
        and st["relative_drift_b"] == 0.375
        and st["relative_drift_delta"] is None
    )
    only_a = by[("alie", "krum", 0, "{}")]
    assert (only_a["change"], only_a["status_a"], only_a["status_b"]) == ("only_a", "ok", None)
    only_b = by[("scaling", "fedavg", 2, "{}")]
    assert (only_b["change"], only_b["status_a"], only_b["relative_drift_b"]) == ("only_b", None, 1.5)
    swept = by[("none", "fedavg", 0, "{'threat.byzantine': 0.3}")]
    assert (swept["change"], swept["status_b"]) == ("status", "diverged")
    assert by[("ipm", "fltrust", 1, "{}")]["change"] == "changed"  # 3 rounds vs 4
    assert counts(rows) == {"status": 2, "changed": 2, "only_a": 1, "only_b": 1, "same": 1}


def test_compare_is_antisymmetric_and_self_is_same() -> None:
    ab, ba = _by(compare(A, B)), _by(compare(B, A))
    assert ab.keys() == ba.keys()
    swap = {"only_a": "only_b", "only_b": "only_a"}
    for k, r in ab.items():
        assert ba[k]["change"] == swap.get(str(r["change"]), r["change"])
        d = r["relative_drift_delta"]
        assert ba[k]["relative_drift_delta"] == (None if d is None else -d)  # type: ignore[operator]
    assert counts(compare(A, A))["same"] == len(A)


def test_duplicate_identity_last_written_counts() -> None:
    old, new = cell("none", "fedavg", 0, 0.5), cell("none", "fedavg", 0, 0.125)
    rows = compare([old, new], [cell("none", "fedavg", 0, 0.125)])
    assert len(rows) == 1 and rows[0]["change"] == "same"


def _store(path: Path, cells: list[Cell]) -> str:
    return str(factories.write_store(path, cells, key=f"{path.stem}-{{}}".format))


def test_cli_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich: a wide terminal, no wrapped cells
    a, b = _store(tmp_path / "a.db", A), _store(tmp_path / "b.db", B)
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "7 cells: 1 unchanged, 2 changed values, 2 changed status, 1 only in A, 1 only in B" in out
    for needle in (
        "failed -> ok",
        "only in A",
        "only in B",
        "-0.25",
        "+0.125",
        "alie",
        "scaling",
        "threat.byzantine=0.3",
    ):
        assert needle in out, needle
    assert main(["compare", a, a]) == 0
    assert "(no differences)" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["missing", "garbage", "foreign"])
def test_cli_compare_bad_store(tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    good = _store(tmp_path / "good.db", A)
    path = tmp_path / f"{bad}.db"
    if bad == "garbage":
        path.write_bytes(b"this is not a database at all" * 100)
    elif bad == "foreign":
        import sqlite3

        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (x INTEGER)")
        con.commit()
        con.close()
    assert main(["compare", good, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(path.name) in err


def _config(task: str, rounds: int, byz: float = 0.2) -> dict[str, object]:
    scenario = {"task": {"name": task}, "federation": {"rounds": rounds}, "threat": {"byzantine": byz},
                "matrix": {"seeds": [0]}}
    return {"scenario": scenario, "attack": "none", "defense": "fedavg"}


def test_setting_differences_name_each_key_whose_values_differ() -> None:
    a = [_config("ridge", 10), _config("ridge", 10, 0.4)]
    b = [_config("mnist", 10), _config("mnist", 10, 0.2)]
    assert setting_differences(a, a) == []
    want = [("task.name", ["ridge"], ["mnist"]), ("threat.byzantine", [0.2, 0.4], [0.2])]
    assert setting_differences(a, b) == want
    # a key set on one side only; the matrix section (which cells ran) is not a setting
    c = [{"scenario": {**_config("ridge", 10)["scenario"], "sharing": {"name": "psfed"}}}]  # type: ignore[dict-item]
    assert setting_differences(a[:1], c) == [("sharing.name", [], ["psfed"])]
    assert "sharing.name = (not recorded) in A, psfed in B" in differences_note(setting_differences(a[:1], c))
    note = differences_note(setting_differences(a, b))
    assert "task.name = ridge in A, mnist in B" in note
    assert "threat.byzantine = 0.2, 0.4 in A, 0.2 in B" in note
    assert differences_note([]) == ""


def test_cli_compare_says_when_the_stores_ran_different_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    cells = [cell("none", "fedavg", 0, 0.125)]
    a = factories.write_store(tmp_path / "a.db", cells, config=lambda i: _config("ridge", 10))
    b = factories.write_store(tmp_path / "b.db", cells, config=lambda i: _config("mnist", 20))
    assert main(["compare", str(a), str(b)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    want = "different settings (task.name = ridge in A, mnist in B; federation.rounds = 10 in A, 20 in B)"
    assert want in out
    assert main(["compare", str(a), str(a)]) == 0
    assert "different settings" not in capsys.readouterr().out


def test_cli_compare_in_a_narrow_terminal_shows_every_value_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 columns (a pipe): one table per metric, no value cut to "0.4…" and no column cropped."""
    monkeypatch.setenv("COLUMNS", "80")
    a, b = _store(tmp_path / "a.db", A), _store(tmp_path / "b.db", B)
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert rows and not any("…" in line for line in rows) and out.count("┏") == 2  # a table per metric
    for needle in ("-0.25", "+0.125", "0.625", "0.375"):  # (the status column may wrap)
        assert needle in out, needle
    assert max(len(line) for line in rows) <= 80
