"""Flower apps for the tests: clients that reply with prescribed models, and one-call runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Result, Strategy

from robustfl.flower import run_in_process

Reply = Callable[[int, int, Mapping[str, np.ndarray]], Any]
"""(partition id, server round, the global arrays) -> a dict of arrays (the reply's model), or a
(dict, num-examples) pair, or a whole RecordDict; raising makes the client fail."""


def scripted_client(reply: Reply, *, mods: list[Any] | None = None) -> ClientApp:
    """A ClientApp whose client i answers ``reply(i, round, global arrays)``."""
    app = ClientApp(mods=mods or [])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        i = int(context.node_config["partition-id"])
        t = int(msg.content["config"]["server-round"])  # type: ignore[arg-type]
        arrays = {k: v.numpy() for k, v in msg.content["arrays"].items()}  # type: ignore[union-attr]
        out = reply(i, t, arrays)
        if isinstance(out, RecordDict):
            return Message(out, reply_to=msg)
        values, n = out if isinstance(out, tuple) else (out, 10)
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in values.items()})
        return Message(
            RecordDict({"arrays": record, "metrics": MetricRecord({"num-examples": n})}), reply_to=msg
        )

    return app


def run_strategy(
    strategy: Strategy, client: ClientApp, nodes: int, initial: Mapping[str, np.ndarray], rounds: int = 1
) -> Result:
    """``strategy.start`` inside a ServerApp run in process with ``nodes`` clients."""
    server = ServerApp()
    out: dict[str, Result] = {}

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in initial.items()})
        out["result"] = strategy.start(grid=grid, initial_arrays=record, num_rounds=rounds)

    run_in_process(server, client, nodes)
    return out["result"]
