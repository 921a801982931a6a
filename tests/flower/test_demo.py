"""The demo (``python -m robustfl.flower.demo``) and the example Flower app (examples/flower)."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from robustfl.flower import run_in_process  # noqa: E402
from robustfl.flower.demo import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flower"


def test_demo_defaults_reach_085_clean_accuracy_on_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo.json"
    assert main(["--clients", "20", "--rounds", "20", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["final_accuracy"] >= 0.85
    assert [r["round"] for r in data["rounds"]] == list(range(1, 21))
    assert data["flwr_version"].startswith("1.") and data["byzantine_clients"] == []
    printed = capsys.readouterr().out
    assert "round  20/20" in printed and f"wrote {out}" in printed


def test_demo_attacks_through_the_mod_or_the_server(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    spec = '{"name": "krum", "pre": ["nnm"]}'
    assert (
        main(["--defense", spec, "--attack", "alie", "--byzantine", "4", "--rounds", "3", "--json", str(out)])
        == 0
    )
    data = json.loads(out.read_text())
    assert data["attack_runs_on"] == "server adversary" and len(data["byzantine_clients"]) == 4
    assert data["defense"] == {"name": "krum", "pre": ["nnm"]} and all(
        r["f_hat"] == 4 for r in data["rounds"]
    )
    assert main(["--attack", "sign_flip", "--byzantine", "4", "--rounds", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["attack_runs_on"] == "client mod"


def test_demo_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--defense", "medain", "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown defense 'medain'") and "\n" not in err


def test_demo_refuses_a_bad_json_path_or_seed_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = ((["--json", str(tmp_path)], "it is a folder"), (["--seed", "-1"], "a seed must be"),
             (["--attack", "alie"], "--attack 'alie' needs clients to run on: give --byzantine N"))
    for argv, needle in cases:
        assert main([*argv, "--rounds", "1", "--clients", "5"]) == 2
        captured = capsys.readouterr()
        assert "round" not in captured.out  # refused before the federation ran a round
        assert captured.err.startswith("error: ") and needle in captured.err and captured.err.count("\n") == 1


def test_the_example_app_runs_through_flowers_apps(capsys: pytest.CaptureFixture[str]) -> None:
    config = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    sys.path.insert(0, str(EXAMPLE))
    try:
        from robustfl_flower_example.client_app import app as client
        from robustfl_flower_example.server_app import app as server

        run_in_process(server, client, 20, run_config={**config, "num-server-rounds": 5})
        run_in_process(server, client, 20, run_config={**config, "num-server-rounds": 2, "attack": "alie"})
    finally:
        sys.path.remove(str(EXAMPLE))
    printed = capsys.readouterr().out
    first = float(printed.split("final test accuracy: ")[1].split()[0])
    assert first >= 0.85  # 5 rounds, 4 sign-flippers, median
    assert printed.count("final test accuracy") == 2
