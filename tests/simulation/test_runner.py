"""End-to-end runs: convergence to the exact optimum, FLTrust under heavy attack, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import robustfl
from robustfl.cli import main
from robustfl.simulation.runner import build_problem

from ..conftest import PLUGINS


def _strip(cell: dict) -> dict:
    return {k: v for k, v in cell.items() if k != "elapsed_s"}


@pytest.mark.parametrize("task", ["quadratic", "ridge"])
def test_fedavg_converges_to_exact_optimum(task: str) -> None:
    sc = robustfl.load_scenario(
        {
            "task": {"name": task},
            "federation": {"clients": 20, "rounds": 1000, "local_lr": 0.1},
            "threat": {"byzantine": 0},
            "server": {"root_size": 0},
        }
    )
    problem = build_problem(sc, 0)
    assert problem.optimum is not None
    w = problem.optimum.clone().requires_grad_(True)
    # ||grad F(w*)|| from autograd on the task's own objective pieces
    x = torch.func.vmap(torch.func.grad(problem.loss), in_dims=(None, 0, 0))(
        problem.optimum, problem.client_data, problem.client_mask
    )
    n = problem.num_samples.to(x.dtype)
    grad_f = (n[:, None] * x).sum(0) / n.sum()
    assert float(grad_f.norm()) <= 1e-8
    del w
    cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)
    assert cell.status == "ok" and cell.reference == "exact"
    assert cell.final["relative_drift"] < 1e-4


def test_fltrust_survives_sixty_percent_sign_flip() -> None:
    sc = robustfl.load_scenario(
        {
            "task": {"name": "ridge", "dim": 20, "samples_per_client": 100, "noise": 0.5},
            "federation": {"clients": 50, "rounds": 200, "local_lr": 0.1, "server_lr": 1.0},
            "threat": {"byzantine": 0.6},
            "server": {"root_size": 100},
        }
    )
    flt = robustfl.run(sc, attack="sign_flip", defense="fltrust", seed=0)
    avg = robustfl.run(sc, attack="sign_flip", defense="fedavg", seed=0)
    assert flt.status == "ok" and flt.final["relative_drift"] < 0.15
    assert avg.status == "diverged" or avg.final["relative_drift"] > 1
    # far from the optimum the sign-flipped rows oppose g0: FLTrust gives them zero trust
    first = flt.rounds[0]
    assert first["byzantine_weight"] == 0.0 and first["detection_recall"] == 1.0


def test_same_cell_twice_bit_identical() -> None:
    sc = robustfl.load_scenario("quick", ["federation.rounds=15", "federation.clients=20"])
    a = robustfl.run(sc, attack="scaling", defense="fedsim", seed=3).to_json()
    b = robustfl.run(sc, attack="scaling", defense="fedsim", seed=3).to_json()
    assert _strip(a) == _strip(b)


def test_matrix_workers_1_and_2_identical(tmp_path: Path) -> None:
    args = [
        "matrix",
        "quick",
        "--set",
        "federation.rounds=10",
        "--set",
        "federation.clients=20",
        "--attacks",
        "none,sign_flip",
        "--defenses",
        "fedavg,fltrust",
        "--seeds",
        "0,1",
        "--quiet",
    ]
    assert (
        main([*args, "--workers", "1", "--store", str(tmp_path / "a.db"), "--json", str(tmp_path / "a.json")])
        == 0
    )
    assert (
        main([*args, "--workers", "2", "--store", str(tmp_path / "b.db"), "--json", str(tmp_path / "b.json")])
        == 0
    )
    ca = [_strip(c) for c in json.loads((tmp_path / "a.json").read_text())["cells"]]
    cb = [_strip(c) for c in json.loads((tmp_path / "b.json").read_text())["cells"]]
    assert len(ca) == 8 and ca == cb


def test_rerun_skips_finished_cells(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    args = [
        "matrix",
        "quick",
        "--set",
        "federation.rounds=5",
        "--set",
        "federation.clients=10",
        "--attacks",
        "none",
        "--defenses",
        "fedavg,fedsim",
        "--seeds",
        "0",
        "--workers",
        "1",
        "--store",
        str(store),
        "--quiet",
    ]
    assert main([*args, "--json", str(tmp_path / "1.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "2.json")]) == 0
    one = json.loads((tmp_path / "1.json").read_text())["cells"]
    two = json.loads((tmp_path / "2.json").read_text())["cells"]
    assert one == two  # elapsed_s too: the second run read them from the store


def test_fedsim_random_model_client_gets_tiny_weight(tmp_path: Path) -> None:
    """IID digits, K = 10, one client sending a random model: its FedSim weight < 0.05."""
    js = tmp_path / "c.json"
    code = main(
        [
            "run",
            "quick",
            "--set",
            "task.name=digits",
            "--set",
            "federation.clients=10",
            "--set",
            "threat.byzantine=1",
            "--set",
            "federation.rounds=20",
            "--set",
            "federation.local_lr=0.1",
            "--set",
            "server.root_size=0",
            "--plugin",
            str(PLUGINS / "random_model.py"),
            "--attack",
            "random_model",
            "--defense",
            "fedsim",
            "--json",
            str(js),
            "--quiet",
        ]
    )
    assert code == 0
    cell = json.loads(js.read_text())
    weights = [r["byzantine_weight"] for r in cell["rounds"]]
    assert max(weights) < 0.05, weights
    assert cell["reference"] == "clean_run"


def test_metrics_every_measures_fewer_rounds_same_training() -> None:
    """metrics.every = 4 over 10 rounds: rounds 4, 8 and the final 10 are measured, with exactly the
    values of the every-round run (metrics never touch training); the other rounds are absent."""
    base = ["federation.rounds=10", "federation.clients=20"]
    every = robustfl.run(robustfl.load_scenario("quick", base), attack="sign_flip", defense="median", seed=1)
    some = robustfl.run(
        robustfl.load_scenario("quick", [*base, "metrics.every=4"]),
        attack="sign_flip",
        defense="median",
        seed=1,
    )
    assert [r["round"] for r in every.rounds] == list(range(1, 11))
    assert [r["round"] for r in some.rounds] == [4, 8, 10]
    by_round = {r["round"]: r for r in every.rounds}
    for r in some.rounds:
        assert r == by_round[r["round"]]
    assert some.final == every.final


def test_metrics_every_default_keeps_cell_keys() -> None:
    """The default (every round, as before the key existed) leaves every cell key as it was; another
    value is part of the key."""
    from robustfl.simulation.runner import cell_key

    plain = robustfl.load_scenario("quick")
    explicit = robustfl.load_scenario("quick", ["metrics.every=1"])
    other = robustfl.load_scenario("quick", ["metrics.every=5"])
    assert cell_key(plain, "alie", "krum", 0) == cell_key(explicit, "alie", "krum", 0)
    assert cell_key(plain, "alie", "krum", 0) != cell_key(other, "alie", "krum", 0)
    skip = ("matrix", "bound", "attack", "defense", "metrics")
    data = {k: v for k, v in plain.data.items() if k not in skip}
    want = robustfl.scenario.config_hash(
        {"scenario": data, "attack": "alie", "defense": "krum", "seed": 0, "schema": 1}
    )
    assert cell_key(plain, "alie", "krum", 0) == want  # the previous release's key, computed independently
