"""The ServerApp: FedAvg's protocol, robustfl's defense (``RobustStrategy``)."""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from robustfl.errors import ConfigError
from robustfl.flower import RobustStrategy, ServerAdversary, client_attack

from .client_app import spec
from .task import accuracy, load, model, split, train

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    rounds, seed, root_size = int(cfg["num-server-rounds"]), int(cfg["seed"]), int(cfg["root-size"])  # type: ignore[arg-type]
    data = split(root_size, seed)
    epochs, lr = int(cfg["local-epochs"]), float(cfg["local-lr"])  # type: ignore[arg-type]

    def reference_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        """FLTrust's reference: the server trains on its root set with the clients' recipe."""
        net = load(model(), arrays)
        train(net, *data["root"], epochs, lr)
        return ArrayRecord(net.state_dict())

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        acc = accuracy(load(model(), arrays), *data["test"])
        print(f"round {server_round:>3}: test accuracy {acc:.4f}", flush=True)
        return MetricRecord({"accuracy": acc})

    attack, f = spec(cfg["attack"]), int(cfg["byzantine"])  # type: ignore[arg-type]
    try:
        client_attack(attack)  # runs in the clients' mod
        adversary = None
    except ConfigError:  # needs the other clients' rows: played by the server
        adversary = ServerAdversary(attack, seed=seed)
    strategy = RobustStrategy(
        spec(cfg["defense"]),
        assumed_byzantine=f,
        reference_fn=reference_fn,
        adversary=adversary if f > 0 else None,
        seed=seed,
        fraction_evaluate=0.0,
    )
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model().state_dict()),
        num_rounds=rounds,
        train_config=ConfigRecord({}),
        evaluate_fn=evaluate_fn,
    )
    final = result.evaluate_metrics_serverapp.get(rounds)
    print(f"final test accuracy: {final['accuracy'] if final else 'n/a'}", flush=True)
