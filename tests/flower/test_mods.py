"""Byzantine clients in Flower: the ClientApp mod, the refusals, the marks, data poisoning."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from robustfl.errors import ConfigError  # noqa: E402
from robustfl.flower import (  # noqa: E402
    RobustStrategy,
    ServerAdversary,
    byzantine_mod,
    client_attack,
    data_poisoner,
    mark_byzantine_mod,
)
from tests.flower._apps import run_strategy, scripted_client  # noqa: E402


def _honest(i: int, t: int, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"w": (g["w"] + np.float32(0.5) * (i + 1)).astype(np.float32), "n": g["n"] + 1}


def test_the_mod_replaces_a_chosen_clients_model_with_the_attacks_row() -> None:
    w = {"w": np.arange(4, dtype=np.float32), "n": np.array([3], dtype=np.int64)}
    mods = [byzantine_mod({"name": "scaling", "base": "sign_flip", "factor": 3.0}, clients={1})]
    strategy = RobustStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=3)
    run_strategy(strategy, scripted_client(_honest, mods=mods), 3, w)
    assert strategy.last_aggregate is not None
    # rows: client 0 +0.5, client 1 3 * -1.0 (its own update flipped, scaled), client 2 +1.5; the mean
    np.testing.assert_allclose(strategy.last_aggregate.vector.numpy(), np.full(4, (0.5 - 3.0 + 1.5) / 3))


def test_an_empty_client_set_is_the_f_0_baseline() -> None:
    """No client Byzantine (a sweep's f = 0 point): both mods leave every reply as it was."""
    w = {"w": np.arange(4, dtype=np.float32), "n": np.array([3], dtype=np.int64)}
    for mod in (byzantine_mod("sign_flip", clients=set()), mark_byzantine_mod(clients=[])):
        strategy = RobustStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=3)
        run_strategy(strategy, scripted_client(_honest, mods=[mod]), 3, w)
        assert strategy.last_aggregate is not None  # rows +0.5, +1.0, +1.5: the mean
        np.testing.assert_allclose(strategy.last_aggregate.vector.numpy(), np.full(4, 1.0))


def test_the_mod_leaves_other_clients_and_the_integer_arrays_alone() -> None:
    w = {"w": np.zeros(2, dtype=np.float32), "n": np.array([3], dtype=np.int64)}
    mods = [byzantine_mod("sign_flip", clients=lambda ctx: ctx.node_config["partition-id"] == 0)]
    strategy = RobustStrategy("median", fraction_evaluate=0.0, min_available_nodes=3)
    result = run_strategy(strategy, scripted_client(_honest, mods=mods), 3, w)
    assert strategy.last_aggregate is not None
    # rows -0.5 (client 0 flipped), +1.0, +1.5: the lower-median rule's middle value is 1.0
    np.testing.assert_allclose(strategy.last_aggregate.vector.numpy(), [1.0, 1.0])
    assert result.arrays["n"].numpy().tolist() == [4]


@pytest.mark.parametrize(
    ("attack", "need"),
    [
        ("alie", "other Byzantine clients' rows"),
        ("min_max", "other Byzantine clients' rows"),
        ({"name": "sign_flip", "source": "mean"}, "other Byzantine clients' rows"),
        ("fang_trim", "own|honest knowledge"),
        ("fltrust_adaptive", "knowledge"),
        ("optimal", "oracle"),
    ],
)
def test_attacks_that_need_more_than_the_own_update_are_refused_on_the_client(attack: Any, need: str) -> None:
    with pytest.raises(ConfigError, match="ServerAdversary") as err:
        byzantine_mod(attack, clients={0})
    assert need in str(err.value) and "\n" not in str(err.value)


def test_per_client_attacks_are_accepted() -> None:
    for attack in [
        "sign_flip",
        "gaussian",
        "scaling",
        "none",
        "label_flip",
        {"name": "scaling", "base": "sign_flip"},
    ]:
        assert client_attack(attack).per_client


def test_marked_replies_are_the_server_adversarys_rows() -> None:
    w = {"w": np.zeros(3), "n": np.array([0])}
    adversary = ServerAdversary({"name": "sign_flip", "source": "mean"}, knowledge="own")
    mods = [mark_byzantine_mod({0, 2})]
    strategy = RobustStrategy("fedavg", adversary=adversary, fraction_evaluate=0.0, min_available_nodes=4)
    run_strategy(strategy, scripted_client(lambda i, t, g: {"w": g["w"] + i, "n": g["n"]}, mods=mods), 4, w)
    assert strategy.history[0].byzantine == [1, 3]  # node ids of partitions 0 and 2
    assert strategy.last_aggregate is not None
    # own rows 0 and 2 -> both become -mean(0, 2) = -1; honest 1 and 3: the mean of (-1, 1, -1, 3) = 0.5
    np.testing.assert_allclose(strategy.last_aggregate.vector.numpy(), np.full(3, 0.5))


def test_data_poisoning_comes_as_a_helper_for_the_training_loop() -> None:
    flip = data_poisoner("label_flip", num_classes=10, input_shape=(1, 8, 8))
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 3, 9, 5])
    px, py = flip(x, y, None)
    assert torch.equal(px, x) and py.tolist() == [9, 6, 0, 4]
    with pytest.raises(ConfigError, match="does not poison data"):
        data_poisoner("sign_flip", num_classes=10, input_shape=(4,))


def test_import_robustfl_never_imports_flower() -> None:
    code = (
        "import sys, robustfl, robustfl.cli.main, robustfl.flower; assert 'flwr' not in sys.modules, 'flwr'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
