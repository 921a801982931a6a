"""FedProx's proximal term, through the real runner, against a literal transcription."""

from __future__ import annotations

import torch

import robustfl
from robustfl.simulation.runner import build_problem


def test_fedprox_round_matches_literal_local_sgd_with_prox() -> None:
    sc = robustfl.load_scenario({
        "task": {"name": "ridge", "dim": 4, "samples_per_client": 10},
        "federation": {"clients": 3, "rounds": 1, "local_steps": 4, "local_lr": 0.05},
        "algorithm": {"name": "fedprox", "mu": 0.7},
        "threat": {"byzantine": 0},
        "server": {"root_size": 20},
    })
    cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)
    p = build_problem(sc, 0)
    from robustfl.simulation.components import named_generator

    w0 = p.init(named_generator(0, "init"), 0.1)
    x, y = p.client_data
    thetas = []
    for k in range(3):  # literal: theta <- theta - lr (grad F_k(theta) + mu (theta - w0))
        th = w0.clone()
        for _ in range(4):
            th.requires_grad_(True)
            loss = 0.5 * ((x[k] @ th - y[k]) ** 2).mean() + 0.5 * p.extras["l2"] * (th * th).sum()
            (g,) = torch.autograd.grad(loss, th)
            th = (th - 0.05 * (g + 0.7 * (th - w0))).detach()
        thetas.append(th)
    w1 = torch.stack(thetas).mean(0)  # fedavg, equal sample counts
    assert p.optimum is not None
    drift = float((w1 - p.optimum).norm())
    assert abs(cell.final["drift"] - drift) <= 1e-12 * drift


def test_fedprox_with_merged_root_matches_separate_root() -> None:
    """Root set small enough to ride in the clients' vmap: FedProx unchanged by that path."""
    base = {
        "task": {"name": "ridge", "dim": 4, "samples_per_client": 10},
        "federation": {"clients": 3, "rounds": 3, "local_steps": 4, "local_lr": 0.05},
        "algorithm": {"name": "fedprox", "mu": 0.7},
        "threat": {"byzantine": 0},
    }
    merged = robustfl.run(robustfl.load_scenario({**base, "server": {"root_size": 10}}), "none", "fedavg")
    none = robustfl.run(robustfl.load_scenario({**base, "server": {"root_size": 0}}), "none", "fedavg")
    assert abs(merged.final["drift"] - none.final["drift"]) <= 1e-12 * none.final["drift"]
