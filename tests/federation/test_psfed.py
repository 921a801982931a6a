"""PSFed (SPEC.md §3): the persistent-local-model protocol against a literal per-client loop,
masks (random / magnitude / gradient, determinism across processes, coverage, no freezing), the
byte accounting against hand-computed cases, p = 1 == FedAvg bit for bit, p = 0 a no-op, and
convergence (with the error floor that grows with the local learning rate)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch import Tensor

import robustfl
from robustfl.errors import ConfigError, ParameterError
from robustfl.federation import create_sharing
from robustfl.federation import feddyn as feddyn_module
from robustfl.federation.psfed import PSFed

from ..conftest import ROOT

F64 = torch.float64


def _psfed(dim: int, clients: int, w0: Tensor | None = None, **params: Any) -> PSFed:
    ps = PSFed(**params)
    ps.setup(num_clients=clients, w0=w0 if w0 is not None else torch.zeros(dim, dtype=F64),
             generator=torch.Generator().manual_seed(123))
    return ps


def _round(ps: PSFed, t: int, w: Tensor, ids: Tensor, targets: Tensor, lr: float = 0.3,
           received: int | None = None) -> tuple[Tensor, Tensor | None]:
    """One round of the runner's protocol with clients pulled towards their targets; returns (w_new, mask)."""
    coords = ps.begin_round(t, w, ids)
    start = ps.start_points(w, ids)
    theta = start - lr * (start - targets[ids])
    rows = ps.rows(theta, w, ids)
    w_new = w + ps.expand(rows.mean(0))
    ps.end_round(w, w_new, ids.numel() if received is None else received)
    return w_new, coords


def _scenario(sharing: dict[str, Any], **fed: Any) -> robustfl.Scenario:
    return robustfl.load_scenario({
        "task": {"name": "ridge", "dim": 12, "samples_per_client": 30},
        "federation": {"clients": 10, "rounds": 20, "local_steps": 2, "local_lr": 0.1, **fed},
        "sharing": sharing,
        "threat": {"byzantine": 0.2},
        "server": {"root_size": 40},
    })


# --- the protocol ----------------------------------------------------------------------------
def test_persistent_local_models_match_a_literal_client_loop() -> None:
    """x_k = w at first participation; x_k[M] <- w[M]; train from x_k; send x_k[M] - w[M]; keep x_k."""
    p_dim, clients = 7, 4
    g = torch.Generator().manual_seed(0)
    targets = torch.randn(clients, p_dim, generator=g, dtype=F64)
    w = torch.randn(p_dim, generator=g, dtype=F64)
    ps = _psfed(p_dim, clients, w, fraction=0.4, seed=3)
    assert ps.k == 3  # floor(0.4 * 7 + 0.5)
    local: dict[int, Tensor] = {}  # the reference: one model per client, updated in a Python loop
    schedule = [[0, 1], [1, 2, 3], [0, 3], [0, 1, 2, 3], [2]]
    for t, members in enumerate(schedule):
        ids = torch.tensor(members)
        coords = ps.begin_round(t, w, ids)
        assert coords is not None and coords.numel() == 3 and bool((coords[1:] > coords[:-1]).all())
        start = ps.start_points(w, ids)
        for j, k in enumerate(members):
            x = local.get(k, w.clone()).clone()
            x[coords] = w[coords]
            assert torch.equal(start[j], x)
        theta = start - 0.3 * (start - targets[ids])
        rows = ps.rows(theta, w, ids)
        for j, k in enumerate(members):
            local[k] = theta[j].clone()
            assert torch.equal(rows[j], theta[j][coords] - w[coords])
        agg = rows.mean(0)
        full = ps.expand(agg)
        assert torch.equal(full[coords], agg)
        unmasked = torch.ones(p_dim, dtype=torch.bool)
        unmasked[coords] = False
        assert not bool(full[unmasked].any())  # unmasked coordinates keep their value
        assert torch.equal(ps.restrict(w), w[coords])
        w_new = w + full
        ps.end_round(w, w_new, len(members))
        w = w_new
    for k, x in local.items():
        assert torch.equal(ps.x[k], x)


def test_p1_equals_fedavg_bit_for_bit() -> None:
    cases = [("none", "fedavg", "random", {}), ("sign_flip", "fedavg", "gradient", {"participation": 0.5}),
             ("alie", "median", "magnitude", {})]
    for attack, defense, mask, fed in cases:
        full = robustfl.run(_scenario({"name": "full"}, **fed), attack=attack, defense=defense, seed=0)
        ps = robustfl.run(_scenario({"name": "psfed", "fraction": 1.0, "mask": mask}, **fed),
                          attack=attack, defense=defense, seed=0)
        assert ps.status == full.status == "ok"
        assert [r["drift"] for r in ps.rounds] == [r["drift"] for r in full.rounds]
        assert ps.final["sharing"]["coverage"] == 1.0 and ps.final["sharing"]["max_staleness"] == 0.0


def test_p0_is_a_no_op_with_zero_upload() -> None:
    cell = robustfl.run(_scenario({"name": "psfed", "fraction": 0.0}), attack="sign_flip", defense="fedavg",
                        seed=0)
    assert cell.status == "ok"
    assert all(r["relative_drift"] == 1.0 for r in cell.rounds)  # w never moves
    assert all(r["sharing"]["bytes_up"] == 0.0 for r in cell.rounds)
    assert all(r["sharing"]["mask_size"] == 0.0 for r in cell.rounds)
    # only the first-time full downloads (10 clients x 12 values x 4 bytes) plus 8-byte seeds
    assert cell.rounds[0]["sharing"]["bytes_down"] == 10 * 12 * 4 + 10 * 8
    assert all(r["sharing"]["bytes_down"] == 10 * 8 for r in cell.rounds[1:])
    assert cell.final["sharing"]["coverage"] == 0.0 and cell.final["sharing"]["max_staleness"] == 20.0
    ps = _psfed(5, 2, fraction=0.0, mask="magnitude")
    coords = ps.begin_round(0, torch.ones(5, dtype=F64), torch.arange(2))
    assert coords is not None and coords.numel() == 0  # empty, never "all"
    assert torch.equal(ps.expand(torch.zeros(0, dtype=F64)), torch.zeros(5, dtype=F64))


# --- masks -----------------------------------------------------------------------------------
_MASK_SCRIPT = """
import json, torch
from robustfl.federation.psfed import PSFed
out = {}
for mask in ["random", "magnitude", "gradient"]:
    ps = PSFed(fraction=0.3, mask=mask, seed=11)
    w = torch.linspace(-1, 1, 40, dtype=torch.float64)
    ps.setup(num_clients=3, w0=w, generator=torch.Generator().manual_seed(99))
    masks = []
    for t in range(6):
        ids = torch.tensor([t % 3])
        c = ps.begin_round(t, w, ids)
        masks.append(c.tolist())
        start = ps.start_points(w, ids)
        rows = ps.rows(start * 0.9, w, ids)
        w_new = w + ps.expand(rows.mean(0))
        ps.end_round(w, w_new, 1)
        w = w_new
    out[mask] = masks
print(json.dumps(out))
"""


def test_masks_identical_across_processes() -> None:
    namespace: dict[str, Any] = {}
    exec_script = _MASK_SCRIPT.replace("print(json.dumps(out))", "")
    exec(compile(exec_script, "<masks>", "exec"), namespace)  # the same script, in this process
    here: dict[str, list[list[int]]] = namespace["out"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _MASK_SCRIPT], capture_output=True, text=True, env=env,
                          cwd=str(ROOT), timeout=120, check=True)
    there = json.loads(proc.stdout)
    assert there == here
    assert all(len(m) == 12 for masks in here.values() for m in masks)  # k = floor(0.3 * 40 + 0.5)
    assert len({tuple(m) for m in here["random"]}) == 6  # a new draw every round


def test_random_coverage_follows_one_minus_one_minus_p_to_the_t() -> None:
    p_dim, k = 2000, 100
    p = k / p_dim
    targets = torch.randn(3, p_dim, generator=torch.Generator().manual_seed(1), dtype=F64)
    ps = _psfed(p_dim, 3, fraction=p, mask="random", seed=5)
    w = torch.zeros(p_dim, dtype=F64)
    ids = torch.arange(3)
    for t in range(1, 301):
        w, _ = _round(ps, t - 1, w, ids, targets)
        cov = ps.stats()["coverage"]
        expected = 1 - (1 - p) ** t
        sd = math.sqrt(expected * (1 - expected) / p_dim)  # per-coordinate Bernoulli(expected)
        assert abs(cov - expected) <= 5 * sd + 1e-12, (t, cov, expected)
        # staleness is at most the rounds played so far, and 0 only when everything was just synced
        assert 0 <= ps.stats()["max_staleness"] <= t
    assert ps.stats()["coverage"] == 1.0  # (1 - p)^300 * P ~ 4e-4 expected misses


def _score_mask_run(mask: str, explore: float, rounds: int = 400) -> tuple[PSFed, int | None, list[Tensor]]:
    p_dim, clients, k = 60, 4, 6
    targets = torch.randn(clients, p_dim, generator=torch.Generator().manual_seed(2), dtype=F64) * 3
    w = torch.randn(p_dim, generator=torch.Generator().manual_seed(3), dtype=F64)
    ps = _psfed(p_dim, clients, w, fraction=k / p_dim, mask=mask, explore=explore, seed=0)
    ids = torch.arange(clients)
    reached_by, masks = None, []
    for t in range(rounds):
        w, coords = _round(ps, t, w, ids, targets)
        assert coords is not None and coords.numel() == k
        masks.append(coords)
        if reached_by is None and ps.stats()["coverage"] == 1.0:
            reached_by = t + 1
    return ps, reached_by, masks


@pytest.mark.parametrize(("mask", "explore"), [("gradient", 0.0), ("gradient", 0.5), ("magnitude", 0.5)])
def test_score_masks_reach_every_coordinate_and_keep_moving(mask: str, explore: float) -> None:
    ps, reached_by, masks = _score_mask_run(mask, explore)
    assert reached_by is not None
    if mask == "gradient":  # round 0 random, then never-synced coordinates score +inf and go first
        by_score = math.floor((1 - explore) * 6 + 0.5)
        assert reached_by <= 1 + math.ceil((60 - 6) / by_score)
    late = torch.zeros(60, dtype=torch.bool)
    for coords in masks[200:]:
        late[coords] = True
    assert bool(late.all())  # the mask keeps moving: every coordinate synced again in rounds 200..399
    assert ps.stats()["max_staleness"] < 200


def test_magnitude_mask_without_exploration_freezes() -> None:
    """The failure the two measures prevent: top-k by |w| with explore = 0 settles on one mask."""
    ps, reached_by, masks = _score_mask_run("magnitude", 0.0, rounds=150)
    assert reached_by is None and ps.stats()["coverage"] < 1.0
    assert all(torch.equal(m, masks[-1]) for m in masks[-50:])


def test_score_mask_ranks_by_score_with_ties_to_lower_index() -> None:
    w = torch.tensor([0.5, -3.0, 2.0, -2.0, 0.1, 2.0], dtype=F64)
    ps = _psfed(6, 1, w, fraction=0.5, mask="magnitude", explore=0.0, seed=0)
    # |w| = 3 (index 1), then 2 at indices 2, 3 and 5: the tie goes to the lower indices
    assert ps.select(1, w).tolist() == [1, 2, 3]
    gr = _psfed(6, 1, w, fraction=0.5, mask="gradient", explore=0.0, seed=0)
    gr.change[:] = torch.tensor([0.1, 0.7, 0.0, 0.7, 0.2, 0.7], dtype=F64)
    assert gr.select(1, w).tolist() == [1, 3, 5]
    gr.change[4] = math.inf  # never synced: +inf, first in line
    assert gr.select(1, w).tolist() == [1, 3, 4]
    ex = _psfed(6, 1, w, fraction=0.5, mask="magnitude", explore=0.5, seed=0)
    for t in range(5):  # floor(0.5 * 3 + 0.5) = 2 by score, 1 drawn from the other 4
        c = ex.select(t, w).tolist()
        assert len(c) == 3 and 1 in c and 2 in c


# --- communication -----------------------------------------------------------------------------
def test_bytes_match_hand_computed_random_case() -> None:
    """P = 10, k = 3, 4 clients, full_sync_every = 3 (round index 2 is a full sync), random mask."""
    ps = _psfed(10, 4, fraction=0.3, mask="random", full_sync_every=3, seed=0)
    targets = torch.randn(4, 10, generator=torch.Generator().manual_seed(0), dtype=F64)
    w = torch.zeros(10, dtype=F64)
    # (ids, received) -> (down, up, FedAvg down + up), by hand:
    # t0: 2 new: down = 2*10*4 + 2*8 = 96, up = 2*3*4 = 24, FedAvg = 2*40 + 2*40 = 160
    # t1: ids {1,2}, 1 new, 1 row received: down = 1*3*4 + 1*40 + 16 = 68, up = 12, FedAvg = 80 + 40 = 120
    # t2: full sync, ids {0,3}: down = 2*40 = 80, up = 2*40 = 80, FedAvg = 160
    # t3: all 4, none new: down = 4*12 + 4*8 = 80, up = 4*12 = 48, FedAvg = 160 + 160 = 320
    plan = [([0, 1], 2, 96, 24), ([1, 2], 1, 68, 12), ([0, 3], 2, 80, 80), ([0, 1, 2, 3], 4, 80, 48)]
    fedavg = [160, 120, 160, 320]
    for t, (members, received, down, up) in enumerate(plan):
        w, coords = _round(ps, t, w, torch.tensor(members), targets, received=received)
        assert (coords is None) == (t == 2)
        s = ps.stats()
        assert (s["bytes_down"], s["bytes_up"]) == (down, up)
        assert s["bytes_down_cumulative"] == sum(d for *_, d, _ in plan[: t + 1])
        assert s["bytes_up_cumulative"] == sum(u for *_, u in plan[: t + 1])
        psfed_total = sum(d + u for *_, d, u in plan[: t + 1])
        assert s["compression"] == pytest.approx(sum(fedavg[: t + 1]) / psfed_total, rel=1e-15)
    assert ps.stats()["compression"] == pytest.approx(760 / 488)
    # t2 synced every coordinate, t3 only 3 of them: the other 7 have gone 1 round unsynced
    assert ps.stats()["coverage"] == 1.0 and ps.stats()["max_staleness"] == 1.0


@pytest.mark.parametrize(("fraction", "per_client"), [(0.5, 3), (0.1, 2)])
def test_bytes_match_hand_computed_index_mask_case(fraction: float, per_client: int) -> None:
    """P = 20: a bitmap costs ceil(20/8) = 3 bytes, an index list ceil(k * ceil(log2 20) / 8) = ceil(5k/8)."""
    k = math.floor(fraction * 20 + 0.5)
    assert per_client == min(3, math.ceil(k * 5 / 8))
    targets = torch.randn(3, 20, generator=torch.Generator().manual_seed(0), dtype=F64)
    for mask in ["magnitude", "gradient"]:
        ps = _psfed(20, 3, fraction=fraction, mask=mask, seed=0)
        w = torch.zeros(20, dtype=F64)
        w, _ = _round(ps, 0, w, torch.tensor([0, 1, 2]), targets)
        seed_cost = 8 if mask == "gradient" else per_client  # round 0 of gradient is a seeded random mask
        assert ps.stats()["bytes_down"] == 3 * 20 * 4 + 3 * seed_cost
        assert ps.stats()["bytes_up"] == 3 * k * 4
        w, _ = _round(ps, 1, w, torch.tensor([1, 2]), targets)
        assert ps.stats()["bytes_down"] == 2 * k * 4 + 2 * per_client
        assert ps.stats()["bytes_up"] == 2 * k * 4


# --- convergence -----------------------------------------------------------------------------
@pytest.mark.slow
def test_ridge_half_sharing_converges() -> None:
    sc = robustfl.load_scenario({
        "task": {"name": "ridge"},
        "federation": {"rounds": 3000, "local_lr": 0.03, "local_steps": 1},
        "sharing": {"name": "psfed", "fraction": 0.5},
        "threat": {"byzantine": 0},
        "server": {"root_size": 0},
    })
    cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)
    assert cell.status == "ok" and cell.final["relative_drift"] < 1e-3
    assert cell.final["sharing"]["compression"] == pytest.approx(1.818, abs=2e-3)


@pytest.mark.slow
def test_error_floor_grows_with_local_lr() -> None:
    def tail(sharing: str, lr: float) -> float:
        sc = robustfl.load_scenario({
            "task": {"name": "ridge", "dim": 10, "samples_per_client": 50},
            "federation": {"clients": 10, "rounds": 300, "local_lr": lr},
            "sharing": {"name": sharing, **({"fraction": 0.5} if sharing == "psfed" else {})},
            "threat": {"byzantine": 0},
            "server": {"root_size": 0},
        })
        cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)
        return statistics.mean(r["relative_drift"] for r in cell.rounds[-100:])

    low, high = tail("psfed", 0.1), tail("psfed", 0.3)
    assert low > 1e-4 and high > 1.5 * low  # a floor, roughly proportional to the local lr
    assert tail("full", 0.3) < 1e-8  # full sharing (FedAvg, one local step) has none


# --- parameters and memory ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "name"),
    [({"fraction": 1.5}, "fraction"), ({"fraction": -0.1}, "fraction"), ({"mask": "topk"}, "mask"),
     ({"explore": 2}, "explore"), ({"full_sync_every": -1}, "full_sync_every"),
     ({"full_sync_every": 1.5}, "full_sync_every")],
)
def test_bad_parameters(params: dict[str, Any], name: str) -> None:
    with pytest.raises(ParameterError, match=f"psfed: parameter {name} must"):
        PSFed(**params)


def test_created_with_the_cell_seed() -> None:
    ps = create_sharing("psfed", {"fraction": 0.25, "mask": "gradient", "explore": 0.1, "full_sync_every": 5},
                        seed=42)
    assert isinstance(ps, PSFed) and (ps.seed, ps.fraction, ps.mask, ps.explore, ps.full_sync_every) == (
        42, 0.25, "gradient", 0.1, 5)


def test_local_model_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    ps = PSFed()
    assert ps.state_bytes(10, 7, 8) == 560
    with pytest.raises(ConfigError, match=r"psfed: persistent local models .* needs 0\.00 GB"):
        monkeypatch.setattr(feddyn_module, "memory_limit_bytes", lambda device: 559)
        ps.setup(num_clients=10, w0=torch.zeros(7, dtype=F64), generator=torch.Generator())
    monkeypatch.setattr(feddyn_module, "memory_limit_bytes", lambda device: 560)
    ps.setup(num_clients=10, w0=torch.zeros(7, dtype=F64), generator=torch.Generator())
    assert ps.x.shape == (10, 7)
