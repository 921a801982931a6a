"""Flower's real simulation engine (Ray backend, ``flwr.simulation.run_simulation``) end to end:
the same apps reach the model the in-process run reaches. Slow (Ray starts); CI runs it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("ray")

from flwr.simulation import run_simulation  # noqa: E402

from robustfl.flower.federation import ScenarioFederation  # noqa: E402
from robustfl.scenario import load_scenario  # noqa: E402

RIDGE = {"task": {"name": "ridge"}, "federation": {"clients": 10, "rounds": 3}, "threat": {"byzantine": 2}}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_flowers_simulation_engine_matches_the_in_process_run() -> None:
    sc = load_scenario(RIDGE)
    local = ScenarioFederation(sc, "sign_flip", "median", 0).run()
    federation = ScenarioFederation(sc, "sign_flip", "median", 0)
    run_simulation(
        federation.server_app,
        federation.client_app,
        num_supernodes=10,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    assert federation.final is not None
    assert len(federation.strategy.history) == 3 and not federation.strategy.history[-1].dropped
    rel = torch.linalg.vector_norm(federation.final - local) / torch.linalg.vector_norm(local)
    assert float(rel) <= 1e-12
    clean = ScenarioFederation(sc, "none", "median", 0).run()
    assert float(torch.linalg.vector_norm(federation.final - clean)) > 1e-3  # the two Byzantine clients acted
