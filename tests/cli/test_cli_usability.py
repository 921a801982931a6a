"""A new user's first hour (issue 12, items 2-4): the Python API from a script, ``--set`` on
attacks and defenses, ``--attacks`` by label, and browsing the catalogue from the CLI."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from robustfl.cli import main
from robustfl.cli.main import build_parser
from robustfl.simulation.store import Store

from ..conftest import PLUGINS, ROOT

TINY = ["--set", "federation.rounds=3", "--set", "federation.clients=10"]
GUARD = 'if __name__ == "__main__":'


def _script(tmp_path: Path, text: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "example.py"
    path.write_text(text)
    env = {**os.environ, "ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def _readme_python_block() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert blocks, "README.md has no ```python block"
    return str(blocks[0])


# -- item 2: the Python API from a script ----------------------------------------------------------
def test_script_without_main_guard_gets_one_clear_error(tmp_path: Path) -> None:
    out = _script(
        tmp_path,
        "import robustfl\n"
        'sc = robustfl.load_scenario("quick", overrides=["federation.rounds=3", "federation.clients=10"])\n'
        'cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)\n'
        'result = robustfl.run_matrix(sc, attacks=["none", "sign_flip"], defenses=["fedavg"], seeds=[0],\n'
        "                             workers=2)\n"
        'print("failed cells:", len(result.failed))\n',
    )
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode != 0, out.stdout + out.stderr
    assert GUARD in out.stderr, out.stderr
    assert len(lines) < 20, "\n".join(lines)
    assert out.stderr.count(GUARD) == 1, out.stderr  # one error, not one per worker


def test_a_script_read_from_standard_input_gets_one_clear_error(tmp_path: Path) -> None:
    """``python - <<EOF``: workers cannot import '<stdin>' again (every cell died with a fork-server
    traceback); one line says so, and workers=1 runs."""
    code = (
        "import robustfl\n"
        'sc = robustfl.load_scenario("quick", overrides=["federation.rounds=2", "federation.clients=10"])\n'
        "try:\n"
        '    robustfl.run_matrix(sc, attacks=["none"], defenses=["fedavg"], seeds=[0], workers=2)\n'
        "except robustfl.RobustFLError as e:\n"
        '    print("refused:", e)\n'
        'r = robustfl.run_matrix(sc, attacks=["none"], defenses=["fedavg"], seeds=[0], workers=1)\n'
        'print("cells:", len(r.cells), r.cells[0].status)\n'
    )
    env = {**os.environ, "ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-"], input=code, cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "refused: this script is read from '<stdin>', which worker processes cannot import" in out.stdout
    assert "cells: 1 ok" in out.stdout and "Traceback" not in out.stderr


def test_readme_python_example_runs_as_a_script(tmp_path: Path) -> None:
    block = _readme_python_block()
    assert GUARD in block
    out = _script(tmp_path, block)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    stores = list(tmp_path.rglob("*.db"))
    assert len(stores) == 1
    with Store(stores[0]) as st:
        cells = st.cells()
    assert cells and all(c.status == "ok" for c in cells), [(c.attack, c.defense, c.error) for c in cells]


def test_matrix_with_failed_cells_never_looks_like_success(tmp_path: Path) -> None:
    import robustfl

    marker = tmp_path / "marker"
    marker.write_text("")
    sc = robustfl.load_scenario(
        "quick", overrides=["federation.rounds=3", "federation.clients=10", "matrix.seeds=[0]"]
    )
    faulty = {"name": "faulty", "marker": str(marker)}
    with pytest.warns(RuntimeWarning, match=r"1 of 2 cells failed: RuntimeError: injected fault") as got:
        result = robustfl.run_matrix(
            sc,
            attacks=["none", faulty],
            defenses=["fedavg"],
            workers=1,
            plugins=[str(PLUGINS / "faulty_attack.py")],
        )
    assert got[0].filename == __file__  # the warning points at the caller's line
    assert [c.attack for c in result.failed] == ["faulty"]
    assert "injected fault" in (result.failed[0].error or "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing failed: no warning
        assert not robustfl.run_matrix(sc, attacks=["none"], defenses=["fedavg"], workers=1).failed


# -- item 3: --set attack.* / defense.* ------------------------------------------------------------
def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_run_set_misspelled_attack_parameter_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "quick", "--attack", "scaling", "--set", "attack.scael=2", *TINY, "--quiet"])
    assert rc == 2
    assert "scael" in _err(capsys)


def test_run_set_invalid_attack_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "quick", "--attack", "scaling", "--set", "attack.factor=-1", *TINY, "--quiet"])
    assert rc == 2
    assert "factor" in _err(capsys)


def test_run_set_attack_parameter_is_used(tmp_path: Path) -> None:
    base = ["run", "quick", "--attack", "scaling", "--defense", "fedavg", *TINY, "--quiet"]
    assert main([*base, "--json", str(tmp_path / "a.json")]) == 0
    assert main([*base, "--set", "attack.factor=0.5", "--json", str(tmp_path / "b.json")]) == 0
    a = json.loads((tmp_path / "a.json").read_text())["final"]["relative_drift"]
    b = json.loads((tmp_path / "b.json").read_text())["final"]["relative_drift"]
    assert a != b


def test_run_quiet_still_prints_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--quiet: only errors and the final table; for run the table is the cell's result block."""
    path = tmp_path / "a.json"
    argv = ["run", "quick", "--attack", "scaling", "--defense", "fedavg", *TINY, "--json", str(path)]
    assert main([*argv, "--quiet"]) == 0
    quiet = capsys.readouterr().out
    final = json.loads(path.read_text())["final"]
    assert quiet.startswith("scaling vs fedavg, seed 0: ok")
    line = next(x for x in quiet.splitlines() if x.startswith("relative_drift"))
    assert float(line.split()[1]) == pytest.approx(final["relative_drift"], rel=1e-2)
    assert str(path) not in quiet  # the note on where it went is left out
    assert main(argv) == 0
    loud = capsys.readouterr().out
    timeless = [x for x in quiet.splitlines() if not x.startswith("elapsed")]
    assert [x for x in loud.splitlines() if not x.startswith("elapsed")][: len(timeless)] == timeless
    assert str(path) in loud


def _matrix_config(store: Path) -> list[dict[str, object]]:
    with Store(store) as st:
        keys = [c.key for c in st.cells()]
        return [st.get_config(k) or {} for k in keys]


def test_matrix_set_attack_parameter_applies_or_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "m.db"
    argv = ["matrix", "quick", "--attacks", "none,alie", "--defenses", "median", "--seeds", "0", *TINY]
    assert main([*argv, "--set", "attack.z=3", "--store", str(store), "--workers", "1", "--quiet"]) == 0
    attacks = sorted(json.dumps(c["attack"], sort_keys=True) for c in _matrix_config(store))
    assert attacks == ['"none"', '{"name": "alie", "z": 3}'], attacks
    capsys.readouterr()
    bad = ["matrix", "quick", "--attacks", "none,sign_flip", "--set", "attack.z=3", *TINY]
    assert main([*bad, "--store", str(tmp_path / "n.db")]) == 2
    assert "attack.z" in _err(capsys)


def test_matrix_attacks_pick_the_scenario_entry_by_label(tmp_path: Path) -> None:
    scenario = tmp_path / "labelled.toml"
    scenario.write_text(
        '[task]\nname = "ridge"\ndim = 5\n[federation]\nclients = 10\nrounds = 3\n'
        '[matrix]\nattacks = [{ name = "alie", z = 4.0 },'
        ' { name = "ipm", epsilon = 100, label = "ipm-100" }]\n'
        'defenses = ["median"]\nseeds = [0]\n'
    )
    store = tmp_path / "l.db"
    argv = ["matrix", str(scenario), "--attacks", "alie,ipm-100", "--store", str(store), "--workers", "1"]
    assert main([*argv, "--quiet"]) == 0
    attacks = sorted(json.dumps(c["attack"], sort_keys=True) for c in _matrix_config(store))
    assert attacks == [
        '{"epsilon": 100, "label": "ipm-100", "name": "ipm"}',
        '{"name": "alie", "z": 4.0}',
    ], attacks


# -- item 4: the catalogue from the CLI ------------------------------------------------------------
def test_list_json_has_description_paper_and_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    attacks = {e["name"]: e for e in out["attacks"]}
    assert "Baruch" in attacks["alie"]["paper"]
    assert all(e["description"] and e["kind"] == "attack" and e["origin"] for e in out["attacks"])
    defenses = {e["name"]: e for e in out["defenses"]}
    assert defenses["krum"]["kind"] == "defense" and "Blanchard" in defenses["krum"]["paper"]
    assert defenses["nnm"]["kind"] == "pre-aggregator"
    assert {e["kind"] for e in out["tasks"]} == {"task"}
    assert {e["name"] for e in out["algorithms"]} == {"fedavg", "fedprox", "feddyn"}
    assert {e["kind"] for e in out["sharing"]} == {"sharing scheme"}


def test_show_prints_every_parameter_with_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "alie"]) == 0
    out = capsys.readouterr().out
    assert "Baruch" in out and "z" in out and "None" in out
    assert main(["show", "scaling", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    params = {p["name"]: p for p in info["parameters"]}
    assert set(params) == {"factor", "base"}
    assert params["factor"]["default"] is None and ">= 0" in params["factor"]["constraint"]
    assert info["kind"] == "attack" and info["knowledge"] == "own"
    assert main(["show", "alei"]) == 2
    assert "did you mean 'alie'" in capsys.readouterr().err


def test_show_tells_apart_components_sharing_a_name(capsys: pytest.CaptureFixture[str]) -> None:
    """fedavg is a defense and an algorithm: plain ``show`` gives the first kind in ``list``'s order
    and names the other; KIND:NAME picks one; a bad kind or a name of another kind exits 2."""
    assert main(["show", "fedavg"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fedavg  (defense, built-in)")
    assert out.rstrip().endswith("also named 'fedavg': robustfl show algorithm:fedavg")
    assert main(["show", "algorithm:fedavg", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "algorithm" and info["parameters"] == [] and "McMahan" in info["paper"]
    assert main(["show", "defense:fedavg", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "defense"
    assert main(["show", "sharing:psfed"]) == 0 and "also named" not in capsys.readouterr().out
    assert main(["show", "algo:fedavg"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown kind 'algo'" in err
    assert main(["show", "task:alie"]) == 2
    assert "unknown task 'alie'" in capsys.readouterr().err
    assert main(["show", "alei"]) == 2
    err = capsys.readouterr().err
    assert err.count("fedavg") == 1  # the known names listed once each


def _options(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            found.append((f"{path} {'/'.join(action.option_strings) or action.dest}", action.help))
    return found


def test_every_option_of_every_command_has_help() -> None:
    options = _options(build_parser(), "robustfl")
    assert len(options) > 40
    missing = [name for name, text in options if not text or not text.strip()]
    assert missing == []


def test_a_reader_that_left_is_a_broken_pipe_not_rich_exit_1() -> None:
    """``robustfl report S | head -1``: rich's console turns a broken pipe into SystemExit(1), which
    the exit codes keep for a failed cell; ours raises BrokenPipeError, which ``entry`` ends with 0."""
    from rich.console import Console

    from robustfl.cli.tables import StdoutConsole, get_console

    class Gone(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError

    with pytest.raises(SystemExit):  # what rich itself does
        Console(file=Gone()).print("x")
    with pytest.raises(BrokenPipeError):
        StdoutConsole(file=Gone()).print("x")
    assert isinstance(get_console(None), StdoutConsole)
