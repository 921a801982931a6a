"""A robustfl scenario as a Flower federation: the same clients, data, recipe, attack and defense,
run through a Flower ServerApp and ClientApp instead of robustfl's engine.

:class:`ScenarioFederation` builds, from a scenario, an attack, a defense and a seed, what the
engine would (:mod:`robustfl.simulation.runner`): the task's clients and root data, the initial
model ``w0`` (stream ``init``), the Byzantine clients (stream ``byzantine``, the data-poisoning
attacks' data poisoned once with stream ``poison``), and then

* a ClientApp whose client i trains the task's model on its own data with the scenario's recipe
  (``local_steps`` steps of ``local_lr``, ``batch_size``; :func:`~robustfl.simulation.engine.local_train`)
  and reports ``num-examples`` = its sample count -- with :func:`~robustfl.flower.mods.byzantine_mod`
  when the attack is ``per_client``, else :func:`~robustfl.flower.mods.mark_byzantine_mod`;
* a :class:`~robustfl.flower.strategy.RobustStrategy` with the defense, f-hat, ``server_lr``,
  weights by num-examples (as the engine's ``DefenseContext.num_samples``), the server's root
  update as ``reference_fn``, and a :class:`~robustfl.flower.adversary.ServerAdversary` for the
  attacks that are not ``per_client``;
* a ServerApp that runs ``federation.rounds`` rounds and evaluates every round (relative drift to
  the exact optimum where the task has one, test accuracy where it has test data).

With full-batch training (``batch_size = 0``, the default) the two runs are the same computation
and end at the same model up to float rounding; with mini-batches each client draws its own
batches (stream ``train:<i>``), so they agree in distribution only. The mirror covers FedAvg with
full sharing and every client every round (``participation = 1``); anything else is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from torch import Tensor

from ..errors import ConfigError
from ..scenario import Scenario, load_scenario
from ..simulation import components as C
from ..simulation.engine import local_train
from ..simulation.runner import build_problem, byzantine_clients
from ..types import Knowledge
from . import _checks as check
from .adversary import ServerAdversary
from .grid import run_in_process
from .mods import Mod, byzantine_mod, mark_byzantine_mod
from .strategy import RobustStrategy

KEY = "w"  # the model's one array: robustfl's flat parameter vector


@dataclass
class History:
    """Per round (1-based): the relative drift to w* (exact-optimum tasks) and the test accuracy."""

    relative_drift: dict[int, float] = field(default_factory=dict)
    accuracy: dict[int, float] = field(default_factory=dict)


class ScenarioFederation:
    """The Flower apps of one cell (see the module's docstring): ``scenario`` a Scenario, a name, a
    path or a mapping; ``attack`` and ``defense`` specs; ``seed`` a seed; ``on_round(t, metrics)``
    called after each evaluated round, or None."""

    def __init__(
        self,
        scenario: Scenario | str | dict[str, Any],
        attack: C.Spec = "none",
        defense: C.Spec = "fedavg",
        seed: int = 0,
        *,
        on_round: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        owner = "ScenarioFederation"
        if not isinstance(scenario, Scenario | str | os.PathLike | Mapping):
            check.fail(owner, "scenario", scenario, "a Scenario, a scenario name, a path or a mapping")
        check.spec(owner, "attack", attack)
        check.spec(owner, "defense", defense)
        seed = check.seed(owner, seed)
        check.function(owner, "on_round", on_round, "(round, metrics) -> None")
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        fed = sc.section("federation")
        if sc.section("algorithm")["name"] != "fedavg" or sc.section("sharing")["name"] != "full":
            raise ConfigError("the Flower mirror runs algorithm fedavg with sharing full only")
        if fed["participation"] != 1.0:
            raise ConfigError(
                f"federation.participation = {fed['participation']}: the Flower mirror needs 1.0"
            )
        self.scenario, self.seed, self.fed, self.on_round = sc, seed, fed, on_round
        self.problem = p = build_problem(sc, seed)
        self.attack = C.build_attack(attack)
        C.check_knowledge(self.attack, C.attack_label(attack), sc.section("threat")["knowledge"])
        self.attack.setup(p.info)
        k = self.num_clients = fed["clients"]
        f = 0 if self.attack.honest else sc.byzantine_count()
        self.byzantine = byzantine_clients(k, f, seed).tolist()
        self.data = tuple(t.clone() for t in p.client_data)
        if self.attack.poisons_data and f > 0:
            g = C.named_generator(seed, "poison")
            x, y = self.data[0], self.data[1]
            for i in self.byzantine:  # setup only, as the engine does it: once, in that order
                n = int(p.client_mask[i].sum())
                px, py = self.attack.poison(x[i, :n], y[i, :n], g)
                x[i, :n], y[i, :n] = px.to(x.dtype), py.to(y.dtype)
        self.w0 = p.init(C.named_generator(seed, "init"), fed["init_scale"])
        per_client = self.attack.per_client or not self.byzantine
        mods: list[Mod] = []
        adversary = None
        if self.byzantine and not self.attack.honest:
            if per_client:
                mods.append(byzantine_mod(attack, set(self.byzantine), seed=seed))
            else:
                mods.append(mark_byzantine_mod(set(self.byzantine)))
                adversary = ServerAdversary(attack, knowledge=sc.section("threat")["knowledge"], seed=seed)
        needs_root = C.build_defense(defense).needs_reference or (
            adversary is not None and adversary.needs_reference
        )
        quiet_flwr = logging.getLogger("flwr")
        level = quiet_flwr.level
        quiet_flwr.setLevel(logging.ERROR)  # FedAvg's warning that fraction_evaluate = 0: by design here
        try:
            self.strategy = self._strategy(defense, adversary, needs_root)
        finally:
            quiet_flwr.setLevel(level)
        self.client_app = ClientApp(mods=mods)
        self.client_app.train()(self._train)
        self.server_app = ServerApp()
        self.server_app.main()(self._main)
        self.history = History()
        self.final: Tensor | None = None

    def _strategy(
        self, defense: C.Spec, adversary: ServerAdversary | None, needs_root: bool
    ) -> RobustStrategy:
        k, fed = self.num_clients, self.fed
        return RobustStrategy(
            defense,
            assumed_byzantine=self.scenario.assumed_count(k),
            server_lr=fed["server_lr"],
            weights="num-examples",
            reference_fn=self._reference if needs_root else None,
            adversary=adversary,
            seed=self.seed,
            fraction_evaluate=0.0,
            min_train_nodes=k,
            min_available_nodes=k,
            layers=self.problem.layers,  # the model's layers, as the engine's contexts say them
        )

    # -- the client: the engine's local training of client i -------------------------------------
    def _local(self, w: Tensor, data: tuple[Tensor, ...], mask: Tensor, stream: str) -> Tensor:
        fed = self.fed
        g = C.named_generator(self.seed, stream)
        return local_train(
            self.problem.loss, w[None].clone(), data, mask, steps=fed["local_steps"], lr=fed["local_lr"],
            batch_size=fed["batch_size"], generator=g, inplace=True, point=w,
            shared_grad=self.problem.shared_grad,  # the engine's closed form too (same bits)
        )[0]

    def _train(self, msg: Message, context: Context) -> Message:
        i = int(context.node_config["partition-id"])
        w = _model(msg.content.array_records["arrays"]).to(self.problem.dtype)
        data = tuple(t[i : i + 1] for t in self.data)
        theta = self._local(w, data, self.problem.client_mask[i : i + 1], f"train:{i}")
        n = int(self.problem.num_samples[i])
        return Message(
            RecordDict({"arrays": _record(theta), "metrics": MetricRecord({"num-examples": n})}), reply_to=msg
        )

    def _reference(self, arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        p = self.problem
        assert p.root_data is not None and p.root_mask is not None
        w = _model(arrays).to(p.dtype)
        root = tuple(t[None] for t in p.root_data)
        return _record(self._local(w, root, p.root_mask[None], f"root:{server_round}"))

    # -- the server ------------------------------------------------------------------------------
    def _evaluate(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        p, w = self.problem, _model(arrays).to(self.problem.dtype)
        out: dict[str, int | float | list[int] | list[float]] = {}
        if p.optimum is not None:
            d0 = float(torch.linalg.vector_norm(self.w0.double() - p.optimum.double()))
            drift = float(torch.linalg.vector_norm(w.double() - p.optimum.double())) / d0
            out["relative_drift"] = self.history.relative_drift[server_round] = drift
        acc = p.accuracy(w)
        if acc is not None:
            out["accuracy"] = self.history.accuracy[server_round] = float(acc)
        if self.on_round is not None and server_round > 0:
            self.on_round(server_round, {k: float(v) for k, v in out.items() if isinstance(v, int | float)})
        return MetricRecord(out)

    def _main(self, grid: Grid, context: Context) -> None:
        result = self.strategy.start(
            grid=grid, initial_arrays=_record(self.w0), num_rounds=self.fed["rounds"],
            evaluate_fn=self._evaluate,
        )
        self.final = _model(result.arrays).clone()

    def run(self) -> Tensor:
        """Run the federation in this process (:func:`~robustfl.flower.grid.run_in_process`):
        the final global model."""
        self.strategy.reset()
        self.history = History()
        run_in_process(self.server_app, self.client_app, self.num_clients)
        assert self.final is not None
        return self.final

    @property
    def granted(self) -> Knowledge:
        return Knowledge.grant(self.scenario.section("threat")["knowledge"])


def _model(arrays: ArrayRecord) -> Tensor:
    return torch.from_numpy(np.array(arrays[KEY].numpy()))


def _record(w: Tensor) -> ArrayRecord:
    return ArrayRecord({KEY: Array(np.ascontiguousarray(w.detach().cpu().numpy()))})
