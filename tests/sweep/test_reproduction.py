"""The paper-style MNIST reproduction (scenarios/fltrust-mnist.toml, docs/reproduction.md).

The first test pins the scenario to the papers' set-up (FoundationFL Table I(a) / FLTrust's
MNIST-0.5: CNN, 100 clients, 20% malicious, bias 0.5, one local step of batch 32, root set 100;
the attack x rule lists, labelled as the published-table file maps them); it needs no data. The
MLP variant keeps its own list. The second runs a smoke version of the whole matrix (20 clients,
2 rounds) on the real t10k files and checks that every cell runs, carries its label, and reports
the metrics the papers report (test error rate = 1 - accuracy; attack success rate for the
backdoor). It skips when the real MNIST files are absent.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

import robustfl
from robustfl.defenses.fedavg import FedAvg
from robustfl.simulation.runner import Simulation
from robustfl.sweep.driver import run_matrix
from robustfl.types import Aggregate, DefenseContext

ATTACKS = [
    "none",
    "label_flip",
    "gaussian",
    "fang_trim",
    "fang_krum",
    *(f"{a}_{p}" for a in ("min_max", "min_sum") for p in ("unit", "std", "sign")),
    "backdoor",
]
RULES = ["fedavg", "trimmed_mean", "median", "krum", "fltrust", "fedsim"]
MLP_ATTACKS = [
    "none",
    "label_flip",
    "gaussian",
    "fang_trim",
    "fang_krum",
    "min_max",
    "min_sum",
    "backdoor",
    "fltrust_adaptive",
]
SMOKE = [
    "federation.clients=20",
    "federation.rounds=2",
    "metrics.every=1",
    "matrix.seeds=[0]",
]


def label(spec: object) -> str:
    if isinstance(spec, str):
        return spec
    assert isinstance(spec, dict)
    return str(spec.get("label", spec["name"]))


def test_scenario_is_the_papers_setup() -> None:
    sc = robustfl.load_scenario("fltrust-mnist")
    d = sc.to_dict()
    assert d["task"]["name"] == "mnist"
    assert "data_dir" not in d["task"]  # users' data: $ROBUSTFL_DATA_DIR/mnist or ~/.cache/robustfl/mnist
    assert (d["partition"]["name"], d["partition"]["q"]) == ("bias", 0.5)
    assert d["federation"]["clients"] == 100
    assert d["federation"]["local_steps"] == 1
    assert d["federation"]["batch_size"] == 32
    assert d["task"]["model"] == "cnn"
    assert sc.byzantine_count() == 20
    assert d["server"]["root_size"] == 100
    assert d["threat"]["knowledge"] == "full"
    assert [label(a) for a in d["matrix"]["attacks"]] == ATTACKS
    assert [label(r) for r in d["matrix"]["defenses"]] == RULES
    # "backdoor" is the FLTrust paper's Scaling attack: backdoor data, rows boosted by scaling
    backdoor = d["matrix"]["attacks"][ATTACKS.index("backdoor")]
    assert backdoor == {"name": "scaling", "base": "backdoor", "label": "backdoor"}
    # FoundationFL section VI-A: Gaussian noise of variance 200
    gaussian = d["matrix"]["attacks"][ATTACKS.index("gaussian")]
    assert gaussian["std"] ** 2 == pytest.approx(200.0, rel=1e-15)
    for i, spec in enumerate(d["matrix"]["attacks"][5:11]):
        assert (spec["name"], spec["perturbation"]) == (ATTACKS[5 + i][:7], ATTACKS[5 + i][8:])
    # every label the published table maps to exists in the scenario
    from robustfl.reporting import published

    table = next(t for t in published.load_tables() if t.name == "foundationfl-mnist")
    assert table.scenario == "fltrust-mnist"
    mapped = {label for labels in table.attack_labels.values() for label in labels}
    assert mapped - {"min_max", "min_sum"} <= set(ATTACKS)
    assert set(table.rule_labels.values()) <= set(RULES)


def test_mlp_variant_keeps_the_previous_scenario() -> None:
    d = robustfl.load_scenario("fltrust-mnist-mlp").to_dict()
    assert (d["task"]["model"], d["task"]["hidden"], d["federation"]["local_lr"]) == ("mlp", 64, 1.0)
    assert [label(a) for a in d["matrix"]["attacks"]] == MLP_ATTACKS


def test_smoke_matrix_runs_and_is_labelled(real_mnist: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTFL_DATA_DIR", str(real_mnist.parent))
    sc = robustfl.load_scenario("fltrust-mnist", overrides=SMOKE)
    result = run_matrix(sc, workers=1)
    cells = {(c.attack, c.defense): c for c in result.cells}
    assert len(result.cells) == len(ATTACKS) * len(RULES)
    assert set(cells) == set(itertools.product(ATTACKS, RULES))
    assert sc.byzantine_count() == 4  # 20% of the smoke's 20 clients
    for (attack, rule), cell in cells.items():
        assert cell.status == "ok", (attack, rule, cell.error)
        assert cell.seed == 0 and cell.reference == "clean_run"
        assert len(cell.rounds) == 2
        acc = cell.final["accuracy"]
        assert 0.0 <= acc <= 1.0
        error_rate = 1.0 - acc
        assert 0.0 <= error_rate <= 1.0 and math.isfinite(error_rate)
        asr = cell.final.get("attack_success_rate")
        if attack == "backdoor":
            assert asr is not None and 0.0 <= asr <= 1.0
        else:
            assert asr is None


def test_backdoor_cell_is_the_scaling_attack(real_mnist: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "backdoor" cell sends the backdoor-trained rows boosted by K (FLTrust's Scaling attack):
    against the plain backdoor on the same seed, exactly the f Byzantine rows differ, by the factor K."""
    monkeypatch.setenv("ROBUSTFL_DATA_DIR", str(real_mnist.parent))
    sc = robustfl.load_scenario("fltrust-mnist", overrides=[*SMOKE, "federation.rounds=1"])
    seen: list[torch.Tensor] = []
    original = FedAvg.__call__

    def recording(self: FedAvg, updates: torch.Tensor, ctx: DefenseContext) -> Aggregate:
        seen.append(updates.detach().clone())
        return original(self, updates, ctx)

    monkeypatch.setattr(FedAvg, "__call__", recording)
    spec = dict(sc.to_dict()["matrix"]["attacks"][ATTACKS.index("backdoor")])
    for attack in (spec, "backdoor"):
        sim = Simulation(sc, attack, "fedavg", 0)
        sim.run(reference_model=torch.zeros(sim.problem.dim, dtype=sim.problem.dtype))
    scaled, plain = (u.double() for u in seen)
    changed = (scaled != plain).any(1)
    assert int(changed.sum()) == sc.byzantine_count() == 4
    torch.testing.assert_close(scaled[changed], 20.0 * plain[changed], rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(scaled[~changed], plain[~changed], rtol=0, atol=0)
