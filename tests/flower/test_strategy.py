"""RobustStrategy through real Flower rounds (Flower's ServerApp/ClientApp machinery, in process).

The reference is always the defense itself, called on rows formed here independently of the
strategy: ``float64(reply) - float64(global)`` in the global model's key order."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict  # noqa: E402

from robustfl import defenses  # noqa: E402
from robustfl.capabilities import DefenseBase  # noqa: E402
from robustfl.errors import ConfigError  # noqa: E402
from robustfl.flower import RobustStrategy  # noqa: E402
from robustfl.simulation import components as C  # noqa: E402
from robustfl.types import DefenseContext  # noqa: E402
from tests.factories import builtins, create_builtin  # noqa: E402
from tests.flower._apps import run_strategy, scripted_client  # noqa: E402

K, F = 15, 2
COMPOSED: list[dict[str, Any]] = [
    {"name": "krum", "pre": ["nnm"]},
    {"name": "trimmed_mean", "pre": [{"name": "bucketing", "size": 2}]},
    {"name": "median", "pre": [{"name": "clipping", "tau": 1.0}, "nnm"]},
]


def _model(dtype: str) -> dict[str, np.ndarray]:
    """Two float arrays (a realistic norm: ~1e2) in a deliberate non-alphabetical key order."""
    g = np.random.default_rng(1)
    return {
        "layer2.weight": (g.normal(size=(4, 6)) * 20).astype(dtype),
        "layer1.bias": (g.normal(size=(5,)) * 20).astype(dtype),
    }


def _updates(dtype: str) -> list[dict[str, np.ndarray]]:
    g = np.random.default_rng(2)
    out = []
    for i in range(K):
        scale = 50.0 if i < F else 0.1  # two outliers
        out.append({k: (g.normal(size=v.shape) * scale).astype(dtype) for k, v in _model(dtype).items()})
    return out


def _flat(values: dict[str, np.ndarray], keys: list[str]) -> torch.Tensor:
    return torch.from_numpy(np.concatenate([np.asarray(values[k], dtype=np.float64).ravel() for k in keys]))


def _spec_id(spec: Any) -> str:
    return C.defense_label(spec)


SPECS: list[Any] = [*builtins(defenses.registry), *COMPOSED]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_one_round_is_the_defense_on_the_same_rows_bit_for_bit(spec: Any, dtype: str) -> None:
    w = _model(dtype)
    keys = list(w)
    replies = [{k: (w[k] + u[k]).astype(dtype) for k in keys} for u in _updates(dtype)]
    root = {k: (w[k] + 0.05).astype(dtype) for k in keys}
    strategy = RobustStrategy(
        spec,
        assumed_byzantine=F,
        reference_fn=lambda arrays, t: ArrayRecord({k: Array(v) for k, v in root.items()}),
        fraction_evaluate=0.0,
        min_available_nodes=K,
        min_train_nodes=K,
    )
    result = run_strategy(strategy, scripted_client(lambda i, t, g: replies[i]), K, w)

    w64 = _flat(w, keys)
    rows = torch.stack([_flat(r, keys) for r in replies]) - w64
    ctx = DefenseContext(
        round=0,
        global_model=w64.clone(),
        assumed_byzantine=F,
        client_ids=torch.arange(K),
        reference=_flat(root, keys) - w64,
        generator=C.named_generator(0, "defense"),
        layers=(24, 29),  # the model's arrays in key order: layer2.weight (4, 6), layer1.bias (5,)
    )
    rule = create_builtin(defenses.registry, spec) if isinstance(spec, str) else C.build_defense(spec)
    want = rule(rows, ctx)
    got = strategy.last_aggregate
    assert got is not None
    assert torch.equal(got.vector.to(torch.float64), want.vector.to(torch.float64))
    new = w64 + want.vector.to(torch.float64)
    at = 0
    for k in keys:  # the new model, cast back per array, bit for bit
        n = w[k].size
        expect = new[at : at + n].numpy().reshape(w[k].shape).astype(dtype)
        at += n
        got_arr = result.arrays[k].numpy()
        assert got_arr.dtype == np.dtype(dtype)
        assert got_arr.tobytes() == expect.tobytes(), k


def _good(i: int, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Client i's honest model: floats moved by 0.01 (i + 1), its step counter at 7 + i."""
    return {k: v + 0.01 * (i + 1) if v.dtype.kind == "f" else v + i for k, v in w.items()}


def _faulty(i: int, t: int, w: dict[str, np.ndarray]) -> Any:
    good = _good(i, w)
    if i == 0:
        return {k: v for k, v in good.items() if k != "b"}  # a missing key
    if i == 1:
        return {**good, "a": np.zeros(4)}  # a wrong shape
    if i == 2:
        return {**good, "a": np.full(3, np.nan)}  # NaN values
    if i == 3:
        return good, 1_000_000_000  # absurd num-examples
    if i == 4:
        raise RuntimeError("disk full")  # a client that raises
    if i == 5:
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in good.items()})
        return RecordDict({"arrays": record, "metrics": MetricRecord({"loss": 1.0})})  # no num-examples
    return good


def test_faulty_replies_are_dropped_with_reasons_and_the_round_goes_on() -> None:
    w = {"a": np.arange(3.0), "b": np.ones((2, 2)), "steps": np.array([7, 7], dtype=np.int64)}
    k = 12
    strategy = RobustStrategy("median", assumed_byzantine=1, fraction_evaluate=0.0, min_available_nodes=k)
    result = run_strategy(strategy, scripted_client(_faulty), k, w, rounds=3)
    assert len(strategy.history) == 3  # the run completed
    rec = strategy.history[0]
    reasons = {node - 1: why for node, why in rec.dropped.items()}  # node id = partition id + 1
    assert sorted(reasons) == [0, 1, 2, 3, 4, 5]
    assert "missing arrays ['b']" in reasons[0]
    assert "shape (4,), expected (3,)" in reasons[1]
    assert "non-finite" in reasons[2]
    assert "num-examples = 1000000000" in reasons[3]
    assert "error reply" in reasons[4] and "disk full" in reasons[4]
    assert "num-examples" in reasons[5]
    assert rec.nodes == list(range(7, k + 1))
    # the aggregate is the defense on the remaining rows (round 1 from w)
    rows = torch.stack([_flat(_good(i, w), ["a", "b"]) for i in range(6, k)]) - _flat(w, ["a", "b"])
    want = defenses.create("median")(rows, DefenseContext(assumed_byzantine=1))
    first = RobustStrategy("median", assumed_byzantine=1, fraction_evaluate=0.0, min_available_nodes=k)
    one = run_strategy(first, scripted_client(_faulty), k, w, rounds=1)
    assert first.last_aggregate is not None and torch.equal(first.last_aggregate.vector, want.vector)
    np.testing.assert_array_equal(one.arrays["a"].numpy(), w["a"] + want.vector[:3].numpy())
    # integer arrays: not rows; their own rule (the lower median of the accepted replies)
    assert rec.integer_rule == {"steps": "median"}
    kept = [7 + i for i in range(6, k)]  # the lower median of 13..18 (6 values) is 15
    np.testing.assert_array_equal(one.arrays["steps"].numpy(), [sorted(kept)[(len(kept) - 1) // 2]] * 2)
    assert int(result.arrays["steps"].numpy()[0]) == 7 + 3 * 8  # each round adds the median step, 8
    assert strategy.history[-1].dropped and math.isfinite(float(result.arrays["a"].numpy().sum()))


def test_rows_follow_a_stable_client_map_not_the_reply_order() -> None:
    w = {"a": np.zeros(2)}
    strategy = RobustStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=4)

    def reply(i: int, t: int, g: dict[str, np.ndarray]) -> Any:
        if t == 1 and i == 0:
            raise RuntimeError("offline")  # joins in round 2
        return {"a": g["a"] + i}

    run_strategy(strategy, scripted_client(reply), 4, w, rounds=2)
    first, second = strategy.history
    assert first.nodes == [2, 3, 4] and first.client_ids == [0, 1, 2]
    assert second.nodes == [2, 3, 4, 1] and second.client_ids == [0, 1, 2, 3]  # node 1 got the next index


def test_num_examples_buy_no_influence_by_default() -> None:
    w = {"a": np.zeros(1)}

    def reply(i: int, t: int, g: dict[str, np.ndarray]) -> Any:
        return {"a": np.array([float(i)])}, (1000 if i == 0 else 1)

    equal = RobustStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=3)
    run_strategy(equal, scripted_client(reply), 3, w)
    assert equal.last_aggregate is not None and float(equal.last_aggregate.vector[0]) == pytest.approx(1.0)
    weighted = RobustStrategy("fedavg", weights="num-examples", fraction_evaluate=0.0, min_available_nodes=3)
    run_strategy(weighted, scripted_client(reply), 3, w)
    assert weighted.last_aggregate is not None
    assert float(weighted.last_aggregate.vector[0]) == pytest.approx((0 * 1000 + 1 + 2) / 1002)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"defense": "fltrust"}, "reference_fn"),
        (
            {"defense": "median", "assumed_byzantine": -1},
            "assumed_byzantine must be a count (an integer >= 0) or a fraction in [0, 1), got -1",
        ),
        ({"defense": "median", "assumed_byzantine": 1.5}, "fraction in [0, 1)"),
        ({"weights": "size"}, "weights must be one of 'equal', 'num-examples', got 'size'"),
        ({"defense": "median", "server_lr": 0}, "server_lr must be a finite number > 0, got 0"),
        (
            {"defense": "median", "integer_rule": "mean"},
            "integer_rule must be one of 'median', 'keep', got 'mean'",
        ),
        ({"defense": "medain"}, "medain"),
        ({"defense": "lasa", "layers": (3, 3)}, "layers must be strictly increasing end offsets > 0"),
        ({"defense": "lasa", "layers": [3]}, "layers must be a tuple of integers"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        RobustStrategy(**kwargs)
    assert "\n" not in str(err.value)


def test_a_round_the_rule_cannot_take_keeps_the_model_and_says_why() -> None:
    w = {"a": np.zeros(2)}
    strategy = RobustStrategy("krum", assumed_byzantine=2, fraction_evaluate=0.0, min_available_nodes=5)
    result = run_strategy(strategy, scripted_client(lambda i, t, g: {"a": g["a"] + i}), 5, w)
    assert strategy.history[0].skipped is not None and "needs at least 7 rows" in strategy.history[0].skipped
    np.testing.assert_array_equal(result.arrays["a"].numpy(), w["a"])


def test_layers_are_the_floating_arrays_unless_given() -> None:
    """One layer per floating array in key order (the integer counter is no coordinate); a given
    ``layers`` replaces them and must end at the model's floating values."""
    w = {"b": np.zeros(3), "steps": np.zeros(1, dtype=np.int64), "a": np.zeros((2, 2))}
    seen: list[Any] = []

    class Spy(DefenseBase):
        def __call__(self, updates: torch.Tensor, ctx: DefenseContext) -> Any:
            seen.append(ctx.layers)
            return defenses.create("fedavg")(updates, ctx)

    def reply(i: int, t: int, g: Any) -> dict[str, np.ndarray]:
        return {k: v + i if v.dtype.kind == "f" else v for k, v in g.items()}

    for given, want in ((None, (3, 7)), ((1, 7), (1, 7))):
        strategy = RobustStrategy("fedavg", fraction_evaluate=0.0, min_available_nodes=3, layers=given)
        strategy.defense = Spy()
        run_strategy(strategy, scripted_client(reply), 3, w)
        assert seen.pop() == want
    strategy = RobustStrategy("lasa", fraction_evaluate=0.0, min_available_nodes=3, layers=(1, 6))
    with pytest.raises(Exception, match="layers must end at the rows' width 7"):
        run_strategy(strategy, scripted_client(reply), 3, w)
