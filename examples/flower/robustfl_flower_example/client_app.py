"""The ClientApp: honest local training; the run config's Byzantine partitions attack.

A per-client attack (sign flipping, scaling, Gaussian noise) runs right here, in robustfl's
``byzantine_mod``; an attack that needs the other clients' rows (ALIE, Min-Max, Fang's attacks)
cannot run on one client: the mod only marks these clients' replies and the server's
``ServerAdversary`` crafts their rows (a simulation device: there is no such server in a deployment).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from robustfl.errors import ConfigError
from robustfl.flower import byzantine_mod, mark_byzantine_mod

from .task import load, model, partition, train


def spec(text: Any) -> Any:
    return json.loads(text) if isinstance(text, str) and text.strip().startswith("{") else text


_MODS: dict[tuple[str, int], Callable[..., Message]] = {}


def attack_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """The run config's attack for partitions 0 .. byzantine - 1, built once per process."""
    cfg = context.run_config
    key = (str(cfg["attack"]), int(cfg["byzantine"]))  # type: ignore[arg-type]
    if key not in _MODS:
        chosen = set(range(key[1]))
        try:
            _MODS[key] = byzantine_mod(spec(key[0]), clients=chosen, seed=int(cfg["seed"]))  # type: ignore[arg-type]
        except ConfigError:  # needs the other clients' rows: the server's adversary plays it
            _MODS[key] = mark_byzantine_mod(chosen)
    return _MODS[key](msg, context, call_next)


app = ClientApp(mods=[attack_mod])


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    i, n = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    x, y = partition(i, n, int(cfg["root-size"]), int(cfg["seed"]))  # type: ignore[arg-type]
    net = load(model(), msg.content["arrays"])  # type: ignore[arg-type]
    loss = train(net, x, y, int(cfg["local-epochs"]), float(cfg["local-lr"]))  # type: ignore[arg-type]
    content = RecordDict(
        {
            "arrays": ArrayRecord(net.state_dict()),
            "metrics": MetricRecord({"num-examples": len(y), "train-loss": loss}),
        }
    )
    return Message(content, reply_to=msg)
