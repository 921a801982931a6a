"""Where the commands write: an output path that cannot be written, or that names a file the
command reads or keeps (the scenario, the store, another output), is refused before any work
(one line, exit 2) and nothing is overwritten; the views never write to the store they read."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from robustfl.cli import main

TINY = ["--set", "federation.rounds=2", "--set", "federation.clients=10", "--quiet"]
ONE = ["--seeds", "0", "--attacks", "none", "--defenses", "fedavg"]
KAPPA = ["kappa", "--rules", "median", "--n", "10", "--f", "2"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and needle in err, err


@pytest.fixture
def made(tmp_path: Path) -> dict[str, Path]:
    """A scenario file, a finished store and a plain file, in tmp_path."""
    scenario = tmp_path / "my.toml"
    shutil.copy(Path(__file__).parents[2] / "robustfl" / "scenarios" / "quick.toml", scenario)
    store = tmp_path / "s.db"
    assert main(["matrix", str(scenario), *ONE, *TINY, "--store", str(store)]) == 0
    plain = tmp_path / "notes.txt"
    plain.write_text("mine\n")
    return {"scenario": scenario, "store": store, "plain": plain}


def test_an_output_naming_an_input_or_another_output_is_refused_untouched(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {k: _digest(p) for k, p in made.items()}
    sc, store = str(made["scenario"]), str(made["store"])
    cases = [
        (["run", sc, *TINY, "--json", sc], "same file as the scenario"),
        (["matrix", sc, *ONE, *TINY, "--store", store, "--json", store], "same file as the store"),
        (["matrix", sc, *ONE, *TINY, "--store", store, "--plot", sc], "same file as the scenario"),
        (["matrix", sc, *ONE, *TINY, "--store", store, "--json", f"{tmp_path}/a", "--plot", f"{tmp_path}/a"],
         "--plot"),
        (["report", store, "--output", store], "same file as the store"),
        (["bound", sc, "--json", sc], "same file as the scenario"),
    ]
    for argv, needle in cases:
        _refused(capsys, argv, needle)
    assert {k: _digest(p) for k, p in made.items()} == before
    assert not (tmp_path / "a").exists()


def test_an_output_that_cannot_be_written_is_refused_before_any_work(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    under_a_file = str(made["plain"] / "x.json")  # a folder that is a file: nothing can be made there
    folder = str(tmp_path)
    store = str(made["store"])
    cases = [
        (["run", "quick", *TINY, "--json", under_a_file], "notes.txt' is a file, not a folder"),
        (["run", "quick", *TINY, "--json", folder], "it is a folder"),
        (["matrix", "quick", *ONE, *TINY, "--store", f"{tmp_path}/n.db", "--plot", under_a_file],
         "cannot write --plot"),
        (["report", store, "--output", under_a_file], "cannot write --output"),
        ([*KAPPA, "--json", under_a_file], "cannot write --json"),
        ([*KAPPA, "--dim", "0"], "--dim must be"),
        ([*KAPPA, "--save-dir", str(made["plain"])], "is a file"),
        (["bound", "--json", under_a_file], "cannot write --json"),
        (["plugin", "new", "my_atk", "--kind", "attack", "--dir", str(made["plain"])], "is a file"),
    ]
    for argv, needle in cases:
        _refused(capsys, argv, needle)
    assert not (tmp_path / "n.db").exists()  # refused before the store was made
    assert made["plain"].read_text() == "mine\n"


def test_the_views_never_write_to_what_they_read(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = made["store"]
    before = _digest(store)
    for fmt in ("table", "json", "csv"):
        assert main(["report", str(store), "--format", fmt]) == 0
    assert main(["compare", str(store), str(store)]) == 0
    capsys.readouterr()
    assert _digest(store) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my.toml", "notes.txt", "s.db"]  # no WAL left
    empty = tmp_path / "empty.db"
    empty.touch()
    _refused(capsys, ["report", str(empty)], "not a robustfl results store (an empty file)")
    _refused(capsys, ["compare", str(store), str(empty)], "an empty file")
    assert empty.stat().st_size == 0


def test_report_takes_its_format_from_the_output_suffix(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(made["store"])
    for name, start in (("r.html", "<!DOCTYPE html>"), ("r.csv", "attack,defense,seed"), ("r.json", "{")):
        assert main(["report", store, "--output", str(tmp_path / name), "--quiet"]) == 0
        assert (tmp_path / name).read_text().startswith(start)
    assert main(["report", store, "--output", str(tmp_path / "r.txt"), "--quiet"]) == 0  # the table
    assert "attack \\ defense" in (tmp_path / "r.txt").read_text()
    _refused(capsys, ["report", store, "--format", "csv", "--output", str(tmp_path / "x.html")],
             "--format csv does not match --output")
    assert not (tmp_path / "x.html").exists()


def test_a_command_refused_after_its_output_check_leaves_no_folder_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the matrix's default store, runs/quick.db, would be made here
    deep = ["--json", "new/deep/x.json"]
    _refused(capsys, ["run", "quick", *TINY, *deep, "--attack", "nope"], "unknown attack 'nope'")
    _refused(capsys, ["matrix", "quick", *TINY, *deep, "--plot", "new/p.png", "--attacks", "nope"],
             "unknown attack 'nope'")
    assert sorted(tmp_path.iterdir()) == []  # neither the outputs' folders nor runs/
    # written for real, the folders are made: by the writers and by the store
    assert main(["matrix", "quick", *ONE, *TINY, *deep, "--store", "s/t/m.db"]) == 0
    assert (tmp_path / "new" / "deep" / "x.json").is_file() and (tmp_path / "s" / "t" / "m.db").is_file()
