"""robustfl.flower's public constructors and factories check their arguments up front: a bad value is
a one-line ConfigError naming the callable, the argument and the value given; valid values (numpy
integers for counts included) work as before."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402

from robustfl.errors import ConfigError, InputError  # noqa: E402
from robustfl.flower import (  # noqa: E402
    InProcessGrid,
    ModelLayout,
    RobustStrategy,
    ServerAdversary,
    byzantine_mod,
    client_attack,
    data_poisoner,
    mark_byzantine_mod,
    poison_batch,
    run_in_process,
)
from robustfl.flower._checks import show  # noqa: E402
from robustfl.flower.federation import ScenarioFederation  # noqa: E402
from tests.flower._apps import run_strategy, scripted_client  # noqa: E402

NAN = float("nan")
BAD_SEEDS = [-1, 2**63, 1.5, True, "0", None]
BAD_CLIENTS = [[-1], [1.5], [True], [None], "01", b"\x01", 3, None, [np.bool_(True)]]


def _refused(build: Callable[[], Any], owner: str, arg: str, value: Any) -> str:
    """``build()`` raises one line of ConfigError that names ``owner``, ``arg`` and ``value``."""
    with pytest.raises(ConfigError) as err:
        build()
    msg = str(err.value)
    assert msg.startswith(owner), msg
    assert arg in msg and show(value) in msg and "\n" not in msg, msg
    return msg


# -- RobustStrategy --------------------------------------------------------------------------------
STRATEGY: list[tuple[str, Any]] = [
    *[("defense", v) for v in (3, None, ["median"], {}, {"name": 3}, {"name": "median", "label": 5})],
    *[("assumed_byzantine", v) for v in (NAN, math.inf, -1, -0.5, 1.0, 1.5, True, "2", None, np.int64(-1))],
    *[("server_lr", v) for v in (0, -1.0, NAN, math.inf, True, "1", None)],
    *[("weights", v) for v in ("size", None, ["equal"])],
    *[("max_num_examples", v) for v in (0, -5, 1.5, True, "10", None)],
    *[("reference_fn", v) for v in (3, "fn")],
    *[("adversary", v) for v in ("alie", 3)],
    *[("integer_rule", v) for v in ("mean", None)],
    *[("allow_outside_guarantee", v) for v in (1, "yes", None)],
    *[("seed", v) for v in BAD_SEEDS],
    *[("layers", v) for v in ([3], (3, 3), (0,))],
    *[("fraction_train", v) for v in (2.0, -0.1, NAN, True, "1", None)],
    *[("fraction_evaluate", v) for v in (1.5, math.inf)],
    *[("min_train_nodes", v) for v in (-1, 2.5, True, "2")],
    *[("min_evaluate_nodes", v) for v in (-2, None)],
    *[("min_available_nodes", v) for v in (-1, np.float64(3.0))],
    *[("weighted_by_key", v) for v in ("", 3)],
    *[("arrayrecord_key", v) for v in (None, b"arrays")],
    *[("configrecord_key", v) for v in ("",)],
    *[("train_metrics_aggr_fn", v) for v in (3, "mean")],
    *[("evaluate_metrics_aggr_fn", v) for v in (3,)],
]


@pytest.mark.parametrize(("arg", "value"), STRATEGY, ids=lambda x: repr(x)[:30])
def test_robust_strategy_refuses_each_bad_argument(arg: str, value: Any) -> None:
    kwargs = {"defense": value} if arg == "defense" else {"defense": "median", arg: value}
    shown = value["label"] if arg == "defense" and isinstance(value, dict) and "label" in value else value
    _refused(lambda: RobustStrategy(**kwargs), "RobustStrategy", arg, shown)


def test_robust_strategy_refuses_an_unknown_fedavg_argument_with_a_hint() -> None:
    with pytest.raises(ConfigError) as err:
        RobustStrategy("median", fraction_fit=0.5)
    msg = str(err.value)
    assert msg.startswith("RobustStrategy: unknown argument 'fraction_fit'") and "'fraction_train'" in msg


def test_messages_read_argument_rule_value() -> None:
    want = r"^RobustStrategy: fraction_train must be a number in \[0, 1\], got 2\.0$"
    with pytest.raises(ConfigError, match=want):
        RobustStrategy(fraction_train=2.0)
    with pytest.raises(ConfigError, match=r"^RobustStrategy: assumed_byzantine must be .* got nan$"):
        RobustStrategy(assumed_byzantine=NAN)
    with pytest.raises(ConfigError, match=r"^RobustStrategy seed: a seed must be an integer .* got -1$"):
        RobustStrategy(seed=-1)
    with pytest.raises(ConfigError, match=r"^byzantine_mod: clients must hold integer ids >= 0, got -1 in"):
        byzantine_mod("sign_flip", [-1])


def test_numpy_counts_are_counts_and_give_the_same_run_bit_for_bit() -> None:
    """Numpy integers are taken as the counts they are (f-hat 2 of 6 rows, not a fraction 2 x 6),
    with the same result as Python ints; a fraction stays a fraction; 0.0 still skips evaluation."""
    w = {"a": np.linspace(0.0, 1.0, 4)}

    def reply(i: int, t: int, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"a": g["a"] + np.sin(np.arange(4.0) * (i + 1) + t)}

    runs = []
    for ints in (int, np.int64, np.int32):
        strategy = RobustStrategy(
            "trimmed_mean",
            assumed_byzantine=ints(2),
            max_num_examples=ints(100),
            seed=ints(7),
            fraction_train=0.75,
            fraction_evaluate=0.0,
            min_train_nodes=ints(4),
            min_available_nodes=ints(8),
        )
        assert type(strategy.assumed_byzantine) is int and type(strategy.seed) is int
        assert type(strategy.min_train_nodes) is int and type(strategy.max_num_examples) is int
        result = run_strategy(strategy, scripted_client(reply), 8, w, rounds=2)
        assert [r.f_hat for r in strategy.history] == [2, 2] and len(strategy.history[0].nodes) == 6
        assert strategy.history[0].skipped is None
        runs.append(result.arrays["a"].numpy().tobytes())
    assert runs[0] == runs[1] == runs[2]
    fraction = RobustStrategy("median", assumed_byzantine=np.float32(0.25), fraction_evaluate=0.0)
    run_strategy(fraction, scripted_client(reply), 6, w)
    assert fraction.history[0].f_hat == 2  # floor(0.25 * 6 + 0.5)
    assert RobustStrategy(fraction_train=0.0).fraction_train == 0.0  # FedAvg's "skip training"


# -- the mods --------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", BAD_CLIENTS, ids=repr)
def test_the_mods_refuse_bad_client_sets(value: Any) -> None:
    shown = value if not isinstance(value, list) or not value else value[0]
    _refused(lambda: byzantine_mod("sign_flip", value), "byzantine_mod", "clients", shown)
    _refused(lambda: mark_byzantine_mod(value), "mark_byzantine_mod", "clients", shown)


@pytest.mark.parametrize("value", BAD_SEEDS, ids=repr)
def test_byzantine_mod_refuses_a_bad_seed(value: Any) -> None:
    _refused(lambda: byzantine_mod("sign_flip", {0}, seed=value), "byzantine_mod", "seed", value)


@pytest.mark.parametrize("value", [3, None, ["sign_flip"], {"label": "x"}], ids=repr)
def test_attack_specs_must_be_a_name_or_a_table(value: Any) -> None:
    _refused(lambda: byzantine_mod(value, {0}), "byzantine_mod", "attack", value)
    _refused(lambda: client_attack(value), "client_attack", "attack", value)
    _refused(lambda: ServerAdversary(value), "ServerAdversary", "attack", value)


def test_the_mods_take_ids_in_any_integer_form() -> None:
    """A numpy array, a range, a one-shot iterator of ids: the same clients as the set."""
    w = {"w": np.zeros(2)}

    def honest(i: int, t: int, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"w": g["w"] + i + 1}

    vectors = []
    for clients in ({1, 2}, np.array([1, 2]), range(1, 3), iter([np.int64(1), 2]), torch.tensor([1, 2])):
        strategy = RobustStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=4)
        run_strategy(strategy, scripted_client(honest, mods=[byzantine_mod("sign_flip", clients)]), 4, w)
        assert strategy.last_aggregate is not None
        vectors.append(strategy.last_aggregate.vector.tolist())
    assert vectors[0] == [(1 - 2 - 3 + 4) / 4] * 2 and all(v == vectors[0] for v in vectors)


# -- ServerAdversary -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arg", "value"),
    [
        *[("nodes", v) for v in ([-1], [1.5], "12", 3, None)],
        *[("knowledge", v) for v in ("all", None)],
        *[("seed", v) for v in BAD_SEEDS],
    ],
    ids=repr,
)
def test_server_adversary_refuses_each_bad_argument(arg: str, value: Any) -> None:
    shown = value[0] if isinstance(value, list) else value
    _refused(lambda: ServerAdversary("alie", **{arg: value}), "ServerAdversary", arg, shown)


def test_server_adversary_takes_no_nodes_or_numpy_ones() -> None:
    assert ServerAdversary("alie").nodes == frozenset()
    assert ServerAdversary("alie", nodes=np.array([3, 1]), seed=np.int64(2)).nodes == {1, 3}


# -- data poisoning --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arg", "value"),
    [
        *[("num_classes", v) for v in (1, 0, 2.5, True, "10", None)],
        *[("input_shape", v) for v in ("1x8", (1, 0, 8), (1.5,), 5, None, (True,))],
        *[("is_image", v) for v in ("yes", 1)],
    ],
    ids=repr,
)
def test_data_poisoner_refuses_each_bad_argument(arg: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"num_classes": 10, "input_shape": (1, 8, 8), arg: value}
    _refused(lambda: data_poisoner("label_flip", **kwargs), "data_poisoner", arg, value)


def test_poison_batch_refuses_mismatched_batches() -> None:
    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 3, 9, 5])
    _refused(lambda: poison_batch("label_flip", [[0.5]], y, num_classes=10), "poison_batch", "x", [[0.5]])
    msg = _refused(lambda: poison_batch("label_flip", x, y[:3], num_classes=10), "poison_batch", "y", y[:3])
    assert "shape (3,)" in msg
    bad_generator = lambda: poison_batch("label_flip", x, y, num_classes=10, generator=0)  # noqa: E731
    _refused(bad_generator, "poison_batch", "generator", 0)
    _, flipped = poison_batch("label_flip", x, y, num_classes=np.int64(10))
    assert flipped.tolist() == [9, 6, 0, 4]


# -- the in-process grid, the scenario mirror, the layout ------------------------------------------
@pytest.mark.parametrize(
    ("arg", "value"),
    [
        *[("num_nodes", v) for v in (0, -1, 2.5, True, "3", None)],
        *[("run_id", v) for v in (-1, 1.5, True)],
        ("run_config", [("seed", 0)]),
        ("client_app", None),
    ],
    ids=repr,
)
def test_the_grid_refuses_each_bad_argument(arg: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"client_app": ClientApp(), "num_nodes": 2, arg: value}
    _refused(lambda: InProcessGrid(**kwargs), "InProcessGrid", arg, value)
    _refused(lambda: run_in_process(ServerApp(), **kwargs), "run_in_process", arg, value)


def test_run_in_process_refuses_a_server_app_that_is_none_and_takes_numpy_counts() -> None:
    _refused(lambda: run_in_process(None, ClientApp(), 2), "run_in_process", "server_app", None)
    grid = InProcessGrid(ClientApp(), np.int64(3))
    assert sorted(grid.get_node_ids()) == [1, 2, 3]
    assert type(grid.contexts[1].node_config["num-partitions"]) is int


@pytest.mark.parametrize(
    ("arg", "value"),
    [("scenario", 3), ("scenario", None), ("attack", 3), ("defense", None), ("on_round", 3)]
    + [("seed", v) for v in BAD_SEEDS],
    ids=repr,
)
def test_scenario_federation_refuses_each_bad_argument(arg: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"scenario": "quick", arg: value}
    _refused(lambda: ScenarioFederation(**kwargs), "ScenarioFederation", arg, value)


def test_model_layout_of_refuses_what_is_not_an_array_record() -> None:
    for value in ([1, 2], {"w": [1.0, 2.0]}, None):
        with pytest.raises(InputError, match=r"^ModelLayout\.of: arrays must be an ArrayRecord"):
            ModelLayout.of(value)  # type: ignore[arg-type]
