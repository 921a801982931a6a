"""robustfl's engine and the same federation run through Flower end at the same model.

Ridge regression, 10 clients, 2 Byzantine, 5 rounds, full-batch local training. Sign flipping
runs inside the two clients (the ClientApp mod); ALIE, Min-Max, FLTrust's adaptive attack and
Fang's trim attack run on the server (ServerAdversary), given the engine's AttackContext."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("flwr")

from robustfl.errors import ConfigError  # noqa: E402
from robustfl.flower.federation import ScenarioFederation  # noqa: E402
from robustfl.scenario import load_scenario  # noqa: E402
from robustfl.simulation.runner import simulate  # noqa: E402

RIDGE = {"task": {"name": "ridge"}, "federation": {"clients": 10, "rounds": 5}, "threat": {"byzantine": 2}}
NNM_KRUM = {"name": "krum", "pre": ["nnm"]}
CASES: list[tuple[str, Any, str]] = [
    ("sign_flip", "fltrust", "mod"),
    ("sign_flip", "median", "mod"),
    ("sign_flip", NNM_KRUM, "mod"),
    ("alie", "median", "server"),
    ("min_max", NNM_KRUM, "server"),
    ("fltrust_adaptive", "fltrust", "server"),
    ("fang_trim", "trimmed_mean", "server"),
]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a.double() - b.double()) / torch.linalg.vector_norm(b.double()))


@pytest.mark.parametrize(("attack", "defense", "where"), CASES, ids=lambda v: str(v))
def test_engine_and_flower_end_at_the_same_model(attack: str, defense: Any, where: str) -> None:
    sc = load_scenario(RIDGE)
    engine = simulate(sc, attack, defense, 0)
    clean = simulate(sc, "none", defense, 0).final_model
    federation = ScenarioFederation(sc, attack, defense, 0)
    assert (federation.strategy.adversary is not None) == (where == "server")
    flower = federation.run()
    assert _rel(flower, engine.final_model) <= 1e-12
    assert _rel(engine.final_model, clean) > 1e-3  # the attack did move the model: not a vacuous match
    assert len(federation.strategy.history) == 5
    if where == "server":
        assert sorted(federation.strategy.history[0].byzantine) == sorted(n + 1 for n in federation.byzantine)
    # the per-round drift the Flower run reports is the engine's
    assert federation.history.relative_drift[5] == pytest.approx(
        engine.cell.final["relative_drift"], rel=1e-9
    )


def test_the_mirror_tells_the_strategy_the_models_layers() -> None:
    """The mirror sends one flat array, so it passes the task's layers on: a layer-wise rule (LASA)
    on logistic regression (W then b) sees in Flower the contexts it sees in the engine."""
    sc = load_scenario({**RIDGE, "task": {"name": "logreg", "dim": 4, "classes": 3},
                        "federation": {"clients": 10, "rounds": 3}})
    engine = simulate(sc, "sign_flip", "lasa", 0)
    federation = ScenarioFederation(sc, "sign_flip", "lasa", 0)
    assert federation.strategy.layers == (12, 15)
    assert _rel(federation.run(), engine.final_model) <= 1e-12
    assert federation.strategy.history[-1].stats["layers"] == 2.0


def test_a_mirror_it_cannot_make_exact_is_refused() -> None:
    with pytest.raises(ConfigError, match="participation"):
        ScenarioFederation(load_scenario({**RIDGE, "federation": {"clients": 10, "participation": 0.5}}))
    with pytest.raises(ConfigError, match="fedavg"):
        ScenarioFederation(load_scenario({**RIDGE, "algorithm": {"name": "feddyn"}}))
