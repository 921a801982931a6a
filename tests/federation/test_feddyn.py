"""FedDyn (SPEC.md §3): the server/client state updates against hand-computed and literal
float64 references, state conservation through the real runner (with and without an attack),
joining/absent/empty rounds, and convergence to the exact optimum where FedAvg stays biased."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

import robustfl
from robustfl.cli import main
from robustfl.errors import ConfigError, ParameterError
from robustfl.federation import create_algorithm
from robustfl.federation import feddyn as feddyn_module
from robustfl.federation.feddyn import FedDyn
from robustfl.simulation.runner import Simulation

F64 = torch.float64
CPU = torch.device("cpu")


def _setup(alpha: float, k_total: int, dim: int) -> FedDyn:
    alg = FedDyn(alpha=alpha)
    alg.setup(num_clients=k_total, dim=dim, dtype=F64, device=CPU)
    return alg


def _rand(seed: int, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _scenario(**overrides: Any) -> robustfl.Scenario:
    data: dict[str, Any] = {
        "task": {"name": "ridge", "dim": 8, "samples_per_client": 30},
        "federation": {"clients": 10, "rounds": 25, "local_steps": 3, "local_lr": 0.1},
        "algorithm": {"name": "feddyn", "alpha": 0.1},
        "threat": {"byzantine": 0},
        "server": {"root_size": 0},
    }
    for section, values in overrides.items():
        data[section] = {**data.get(section, {}), **values}
    return robustfl.load_scenario(data)


def _spy_server_step(sim: Simulation, calls: list[dict[str, Tensor]]) -> None:
    """Record what the runner hands the server step each round (ids, rows after the attack, ...)."""
    alg = sim.algorithm
    original = alg.server_step

    def spy(w: Tensor, delta: Tensor, **kw: Any) -> Tensor:
        calls.append({"w": w.clone(), "delta": delta.clone(), **{k: v.clone() for k, v in kw.items()
                                                                  if isinstance(v, Tensor)}})
        return original(w, delta, **kw)

    alg.server_step = spy  # type: ignore[method-assign]


# --- the maths of one round ------------------------------------------------------------------
def test_first_round_sign_check() -> None:
    """Round 1 from h = 0, full participation: h = -alpha mean(Delta), w_new = mean(theta) + mean(Delta)."""
    alpha, k, p = 0.3, 4, 5
    alg = _setup(alpha, k, p)
    w, theta = _rand(0, p), _rand(1, k, p)
    rows = theta - w
    delta = rows.mean(0)
    ids = torch.arange(k)
    all_valid = torch.ones(k, dtype=torch.bool)
    w_new = alg.server_step(w, delta, rows=rows, ids=ids, valid=all_valid, server_lr=1.0)
    mean_delta = (theta - w).mean(0)
    torch.testing.assert_close(alg.h, -alpha * mean_delta, rtol=0, atol=1e-14)
    torch.testing.assert_close(w_new, theta.mean(0) + mean_delta, rtol=0, atol=1e-14)
    torch.testing.assert_close(alg.g, -alpha * (theta - w), rtol=0, atol=1e-14)
    stats = alg.stats()
    h_norm = float(torch.linalg.vector_norm(alpha * mean_delta))
    assert stats["state_norm"] == pytest.approx(h_norm, rel=1e-13)
    assert stats["correction_magnitude"] == pytest.approx(h_norm / alpha, rel=1e-13)
    assert stats["participation_fraction"] == 1.0


def test_robust_aggregate_uses_theta_bar() -> None:
    """A(U) = delta: h <- h - alpha |R|/K_total delta, w_new = w + delta - h/alpha (K_total = 6, |R| = 2)."""
    alpha, p = 0.5, 3
    alg = _setup(alpha, 6, p)
    w, rows = _rand(2, p), _rand(3, 3, p)
    valid = torch.tensor([True, False, True])
    ids = torch.tensor([1, 3, 4])
    delta = torch.tensor([0.25, -1.0, 2.0], dtype=F64)  # e.g. a median: not the mean of the rows
    w_new = alg.server_step(w, delta, rows=rows, ids=ids, valid=valid, server_lr=1.0)
    h = -alpha * (2 / 6) * delta
    torch.testing.assert_close(alg.h, h, rtol=0, atol=1e-15)
    torch.testing.assert_close(w_new, w + delta - h / alpha, rtol=0, atol=1e-15)
    expected_g = torch.zeros(6, p, dtype=F64)
    expected_g[1], expected_g[4] = -alpha * rows[0], -alpha * rows[2]  # the invalid row commits nothing
    torch.testing.assert_close(alg.g, expected_g, rtol=0, atol=0)
    assert alg.stats()["participation_fraction"] == pytest.approx(2 / 6)


def test_local_gradient_term_matches_autograd() -> None:
    """extra_grad = gradient of -<g_k, theta> + (alpha/2)||theta - w||^2 (the client objective minus F_k)."""
    alpha, p = 0.7, 4
    alg = _setup(alpha, 5, p)
    w = _rand(4, p)
    ids = torch.tensor([0, 2, 3])
    rows = _rand(5, 3, p)
    alg.server_step(w, rows.mean(0), rows=rows, ids=ids, valid=torch.ones(3, dtype=torch.bool), server_lr=1.0)
    start, theta = _rand(6, p).expand(3, p), _rand(7, 3, p)
    got = alg.extra_grad(theta, start, ids)
    for j, k in enumerate(ids.tolist()):
        gk = alg.g[k]

        def objective(th: Tensor, gk: Tensor = gk, j: int = j) -> Tensor:
            return -(gk * th).sum() + 0.5 * alpha * ((th - start[j]) ** 2).sum()

        assert got is not None
        torch.testing.assert_close(got[j], torch.func.grad(objective)(theta[j]), rtol=0, atol=1e-14)


def test_new_client_starts_at_zero_and_absent_state_is_frozen() -> None:
    alpha, p = 0.2, 3
    alg = _setup(alpha, 5, p)
    w0, rows0 = _rand(8, p), _rand(9, 2, p)
    ids0 = torch.tensor([0, 1])
    w1 = alg.server_step(w0, rows0.mean(0), rows=rows0, ids=ids0, valid=torch.ones(2, dtype=torch.bool),
                         server_lr=1.0)
    g_after_0 = alg.g.clone()
    assert torch.equal(alg.g[2:], torch.zeros(3, p, dtype=F64))
    # client 3 joins at round 1: its local term is alpha (theta - w) only (g_3 = 0)
    ids1 = torch.tensor([1, 3])
    theta = _rand(10, 2, p)
    term = alg.extra_grad(theta, w1.expand(2, p), ids1)
    assert term is not None
    torch.testing.assert_close(term[1], alpha * (theta[1] - w1), rtol=0, atol=0)
    torch.testing.assert_close(term[0], -g_after_0[1] + alpha * (theta[0] - w1), rtol=0, atol=1e-15)
    rows1 = _rand(11, 2, p)
    alg.server_step(w1, rows1.mean(0), rows=rows1, ids=ids1, valid=torch.ones(2, dtype=torch.bool),
                    server_lr=1.0)
    torch.testing.assert_close(alg.g[3], -alpha * rows1[1], rtol=0, atol=0)
    torch.testing.assert_close(alg.g[1], g_after_0[1] - alpha * rows1[0], rtol=0, atol=1e-15)
    assert torch.equal(alg.g[0], g_after_0[0])  # absent: frozen, never decayed
    assert torch.equal(alg.g[[2, 4]], torch.zeros(2, p, dtype=F64))


def test_empty_round_is_a_no_op() -> None:
    alpha, p = 0.1, 4
    alg = _setup(alpha, 3, p)
    w, rows = _rand(12, p), _rand(13, 3, p)
    alg.server_step(w, rows.mean(0), rows=rows, ids=torch.arange(3), valid=torch.ones(3, dtype=torch.bool),
                    server_lr=1.0)
    g, h = alg.g.clone(), alg.h.clone()
    nan_rows = torch.full((3, p), float("nan"), dtype=F64)
    out = alg.server_step(w, torch.zeros(p, dtype=F64), rows=nan_rows, ids=torch.arange(3),
                          valid=torch.zeros(3, dtype=torch.bool), server_lr=1.0)
    assert torch.equal(out, w) and torch.equal(alg.g, g) and torch.equal(alg.h, h)
    assert alg.stats()["participation_fraction"] == 0.0
    empty = torch.zeros(0, p, dtype=F64)
    out = alg.server_step(w, torch.zeros(p, dtype=F64), rows=empty, ids=torch.zeros(0, dtype=torch.long),
                          valid=torch.zeros(0, dtype=torch.bool), server_lr=1.0)
    assert torch.equal(out, w) and torch.equal(alg.g, g) and torch.equal(alg.h, h)


# --- state conservation through the real runner -----------------------------------------------
@pytest.mark.parametrize("participation", [1.0, 0.5])
@pytest.mark.parametrize("attack", ["none", "sign_flip", "alie"])
def test_state_conservation_with_unweighted_mean(attack: str, participation: float) -> None:
    """h = (1/K_total) sum_k g_k every round, and each g_k = -alpha * (sum of the rows it sent):
    a literal float64 replay of the runner's (ids, rows after the attack) as the reference."""
    sc = _scenario(federation={"participation": participation}, threat={"byzantine": 0.2})
    sim = Simulation(sc, attack, {"name": "fedavg", "weighted": False}, 0)
    calls: list[dict[str, Tensor]] = []
    _spy_server_step(sim, calls)
    alpha, k_total = 0.1, 10
    g_ref = torch.zeros(k_total, 8, dtype=F64)
    h_ref = torch.zeros(8, dtype=F64)
    checked: list[int] = []

    def on_round(t: int, total: int) -> None:
        alg = sim.algorithm
        assert isinstance(alg, FedDyn)
        c = calls[-1]
        for j, k in enumerate(c["ids"].tolist()):
            g_ref[k] -= alpha * c["rows"][j]
        h_ref.sub_(alpha / k_total * c["rows"].sum(0))
        torch.testing.assert_close(alg.g, g_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(alg.h, h_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(alg.h, alg.g.sum(0) / k_total, rtol=0, atol=1e-12)
        checked.append(t)

    out = sim.run(on_round=on_round)
    assert out.cell.status == "ok" and checked == list(range(1, 26))
    if attack != "none":  # Byzantine rows were among those replayed (fedavg gives them weight f/S)
        assert all(r["byzantine_weight"] > 0 for r in out.cell.rounds if participation == 1.0)
        assert sum(r["byzantine_weight"] for r in out.cell.rounds) > 0


def test_robust_rule_breaks_conservation() -> None:
    """With the coordinate-wise median the aggregate is not the mean: h != (1/K) sum g_k (by design)."""
    sim = Simulation(_scenario(threat={"byzantine": 0.2}), "sign_flip", "median", 0)
    sim.run()
    alg = sim.algorithm
    assert isinstance(alg, FedDyn)
    gap = float(torch.linalg.vector_norm(alg.h - alg.g.sum(0) / 10))
    assert gap > 1e-3 * float(torch.linalg.vector_norm(alg.h))


# --- convergence ------------------------------------------------------------------------------
def test_ridge_final_loss_within_1e6_of_optimum() -> None:
    sc = robustfl.load_scenario({
        "task": {"name": "ridge", "l2": 0.01},
        "federation": {"clients": 10, "rounds": 100, "local_steps": 5, "local_lr": 0.1},
        "algorithm": {"name": "feddyn", "alpha": 0.1},
        "threat": {"byzantine": 0},
        "server": {"root_size": 0},
    })
    cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)
    assert cell.status == "ok" and cell.reference == "exact"
    assert -1e-12 <= cell.final["loss_gap"] < 1e-6
    assert cell.final["algorithm"]["participation_fraction"] == 1.0
    # h -> mean_k grad F_k(w*) = 0 at the optimum
    assert cell.final["algorithm"]["state_norm"] < 1e-5 * cell.rounds[0]["algorithm"]["state_norm"]


def test_heterogeneous_quadratics_feddyn_unbiased_where_fedavg_is_biased() -> None:
    def run(alg: str, rounds: int) -> dict[str, Any]:
        sc = robustfl.load_scenario({
            # diagonal A_k with different spectra: heterogeneous, and cheap to differentiate
            "task": {"name": "quadratic", "dim": 5, "cond": 10, "spread": 1.0, "diagonal": True},
            "federation": {"clients": 10, "rounds": rounds, "local_steps": 20, "local_lr": 0.1},
            "algorithm": {"name": alg},
            "threat": {"byzantine": 0},
            "server": {"root_size": 0},
        })
        cell = robustfl.run(sc, attack="none", defense="fedavg", seed=0)
        assert cell.status == "ok"
        return cell.final

    dyn, avg = run("feddyn", 100), run("fedavg", 30)
    assert dyn["relative_drift"] < 1e-5
    assert avg["relative_drift"] > 1e-2  # FedAvg's fixed point with 20 local steps is not w*


def test_ten_percent_participation_converges_with_absent_states_frozen() -> None:
    sc = robustfl.load_scenario({
        "task": {"name": "ridge", "dim": 10, "samples_per_client": 20},
        "federation": {"clients": 100, "rounds": 200, "local_steps": 5, "local_lr": 0.1,
                       "participation": 0.1},
        "algorithm": {"name": "feddyn", "alpha": 1.0},
        "threat": {"byzantine": 0},
        "server": {"root_size": 0},
    })
    sim = Simulation(sc, "none", "fedavg", 0)
    calls: list[dict[str, Tensor]] = []
    _spy_server_step(sim, calls)
    alg = sim.algorithm
    assert isinstance(alg, FedDyn)
    prev: list[Tensor] = [torch.zeros(100, 10, dtype=F64)]
    joined = torch.zeros(100, dtype=torch.bool)

    def on_round(t: int, total: int) -> None:
        ids = calls[-1]["ids"]
        assert ids.numel() == 10
        absent = torch.ones(100, dtype=torch.bool)
        absent[ids] = False
        assert torch.equal(alg.g[absent], prev[0][absent])  # frozen, bit for bit
        assert bool((alg.g[ids] != prev[0][ids]).any(1).all())
        joined[ids] = True
        assert not bool(alg.g[~joined].any())  # never joined: still zero
        prev[0] = alg.g.clone()

    out = sim.run(on_round=on_round)
    assert out.cell.status == "ok"
    assert out.cell.final["relative_drift"] < 1e-3 and out.cell.final["loss_gap"] < 1e-6
    assert out.cell.final["algorithm"]["participation_fraction"] == pytest.approx(0.1)


# --- parameters, memory, refusals --------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0, -0.1, float("nan"), float("inf"), True, "0.1"])
def test_bad_alpha_is_a_parameter_error(alpha: Any) -> None:
    with pytest.raises(ParameterError, match="feddyn: parameter alpha must be"):
        FedDyn(alpha=alpha)


def test_created_from_scenario_parameters() -> None:
    alg = create_algorithm("feddyn", {"alpha": 0.05})
    assert isinstance(alg, FedDyn) and alg.alpha == 0.05
    with pytest.raises(ParameterError, match="algorithm 'feddyn' has no parameter 'mu'"):
        create_algorithm("feddyn", {"mu": 0.05})


def test_state_memory_is_refused_not_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    alg = FedDyn()
    assert alg.state_bytes(1000, 50, 8) == 1001 * 50 * 8
    with pytest.raises(ConfigError, match=r"needs 80000\.08 GB"):  # (10^6 + 1) x 10^7 x 8 bytes
        alg.setup(num_clients=10**6, dim=10**7, dtype=F64, device=CPU)
    needed = alg.state_bytes(10, 7, 4)
    monkeypatch.setattr(feddyn_module, "memory_limit_bytes", lambda device: needed - 1)
    with pytest.raises(ConfigError, match="reduce federation.clients"):
        alg.setup(num_clients=10, dim=7, dtype=torch.float32, device=CPU)
    monkeypatch.setattr(feddyn_module, "memory_limit_bytes", lambda device: needed)
    alg.setup(num_clients=10, dim=7, dtype=torch.float32, device=CPU)
    assert alg.g.shape == (10, 7) and alg.g.dtype == torch.float32 and not bool(alg.g.any())


def test_server_lr_other_than_one_is_refused() -> None:
    alg = _setup(0.1, 2, 2)
    with pytest.raises(ConfigError, match="server_lr must be 1"):
        zero = torch.zeros(2, dtype=F64)
        alg.server_step(zero, zero, rows=torch.zeros(2, 2, dtype=F64), ids=torch.arange(2),
                        valid=torch.ones(2, dtype=torch.bool), server_lr=0.5)
    with pytest.raises(ConfigError, match="server_lr"):
        _scenario(federation={"server_lr": 0.5})


def test_feddyn_with_psfed_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "feddyn", "--set", "sharing.name=psfed"]) == 2
    assert "feddyn" in capsys.readouterr().err
