"""A task's closed forms: the per-client gradient at one shared point (``Problem.shared_grad``)
is bit for bit what ``vmap(grad(loss), in_dims=(None, 0, 0))`` gives, and the objective from
the batched loss is the vmapped loss's. The engine uses them in their place, so every result
must stay the same to the last bit; a run with them equals a run without them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.func import grad, vmap

from robustfl.scenario import load_scenario
from robustfl.simulation import runner
from robustfl.tasks import create
from robustfl.tasks._data import weighted_objective
from robustfl.tasks.base import Partition


def _problem(partition: Partition, seed: int, **task: object):
    t = create("logreg", **task)
    return t.build(
        clients=12, partition=partition, root_size=30, root_bias=0.5,
        generator=torch.Generator().manual_seed(seed),
    )


CASES = [
    (Partition(), 0, {}),
    (Partition("dirichlet", alpha=0.3), 1, {"samples_per_client": 37}),  # unequal sizes: padding
    (Partition("bias", q=0.8), 2, {"classes": 3, "dim": 7, "l2": 0.5}),
    (Partition("shards"), 3, {"classes": 10, "dim": 50, "l2": 0.0, "samples_per_client": 5}),
]


@pytest.mark.parametrize(("partition", "seed", "task"), CASES)
@pytest.mark.parametrize("scale", [1e-6, 1.0, 30.0])
def test_logreg_shared_grad_is_vmap_grad_bit_for_bit(
    partition: Partition, seed: int, task: dict, scale: float
) -> None:
    p = _problem(partition, seed, **task)
    assert p.shared_grad is not None
    w = torch.randn(p.dim, dtype=p.dtype, generator=torch.Generator().manual_seed(seed + 10)) * scale
    reference = vmap(grad(p.loss), in_dims=(None, 0, 0))
    for data, mask in [
        (p.client_data, p.client_mask),
        (tuple(t[:, :3] for t in p.client_data), p.client_mask[:, :3]),  # a minibatch
        (tuple(t[None] for t in p.root_data), p.root_mask[None]),  # the server's root set
    ]:
        expected = reference(w, data, mask)
        got = p.shared_grad(w, data, mask)
        assert got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize(("partition", "seed", "task"), CASES)
def test_logreg_objective_is_the_vmapped_loss_bit_for_bit(
    partition: Partition, seed: int, task: dict
) -> None:
    """The objective (F(w), every round's loss_gap) uses the batched loss: the same float."""
    p = _problem(partition, seed, **task)
    slow = weighted_objective(p.loss, p.client_data, p.client_mask, p.num_samples)
    for s in range(3):
        w = torch.randn(p.dim, dtype=p.dtype, generator=torch.Generator().manual_seed(s)) * 10.0 ** (s - 1)
        assert p.objective(w) == slow(w)


def test_a_run_with_the_closed_form_equals_a_run_without_it() -> None:
    sc = load_scenario("defenses")
    fast = runner.Simulation(sc, "alie", "median", 0)
    slow = runner.Simulation(sc, "alie", "median", 0)
    p = slow.problem
    slow.problem = dataclasses.replace(
        p, shared_grad=None, objective=weighted_objective(p.loss, p.client_data, p.client_mask, p.num_samples)
    )
    a, b = fast.run(), slow.run()
    assert torch.equal(a.final_model, b.final_model)
    assert a.cell.rounds == b.cell.rounds
