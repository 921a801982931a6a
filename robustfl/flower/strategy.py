"""RobustStrategy: Flower's Message-API FedAvg with a robustfl defense in place of the mean.

Each round (``aggregate_train``):

1. every reply is checked against the global model (:class:`~robustfl.flower.layout.ModelLayout`):
   an error reply, a missing or extra array, a shape or dtype that differs, non-finite values, a
   missing or absurd ``num-examples`` (not a finite number in ``[1, max_num_examples]``) -- each is
   dropped, its reason kept in :attr:`RobustStrategy.history`, and the round goes on;
2. the rest become float64 update rows ``w_k - w`` (floating arrays flattened in the global
   model's key order), one per client, in the order of a client-id map that is stable across
   rounds (a node gets the next index the first time it replies; within a round, new nodes in
   increasing node id): row order and ``DefenseContext.client_ids`` never depend on reply order;
3. a :class:`~robustfl.flower.adversary.ServerAdversary`, when given, replaces its clients' rows;
4. the defense aggregates the rows; the new model is ``w + server_lr * vector`` in float64, cast
   back array by array to the global model's dtypes; integer arrays follow ``integer_rule``.
   A round without a valid reply, or one the rule cannot take, returns the global model unchanged
   (so Flower's ``Result.arrays`` is always the last model) and says why in the history.

f-hat per round: ``assumed_byzantine`` as an int is a count used as is every round (the worst case:
every Byzantine client sampled and replying); as a float in [0, 1) it is a fraction of the rows
received that round, ``floor(x K + 0.5)`` (robustfl's scenario rule). A round whose rows the rule
cannot take (``defense.admits(K, f-hat)`` false) keeps the model and says why, unless
``allow_outside_guarantee``.

Self-reported ``num-examples`` buy no influence by default (``weights = "equal"``: the defense sees
``num_samples = None``); ``weights = "num-examples"`` passes them on, each capped at
``max_num_examples``. FLTrust's reference update comes from ``reference_fn(arrays, server_round)``,
which returns the model the server trains on its root data with the clients' recipe.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
import operator
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log
from torch import Tensor

from ..capabilities import DefenseBase
from ..errors import ConfigError
from ..scenario import count_of
from ..simulation import components as C
from ..types import Aggregate, DefenseContext, layers_error
from . import _checks as check
from ._flwr import require
from .adversary import MARK, ServerAdversary
from .layout import INTEGER_RULES, ModelLayout, integer_arrays

require()

WEIGHTS = ("equal", "num-examples")
MAX_NUM_EXAMPLES = 10_000_000  # above any one client's share of today's federated benchmarks
OWNER = "RobustStrategy"
FEDAVG_ARGS = tuple(p for p in inspect.signature(FedAvg.__init__).parameters if p != "self")


@dataclass
class RoundRecord:
    """What a round did: the node ids behind the rows (row order), the rows' client indices, each
    row's weight (None for coordinate-wise rules), the dropped replies with their reasons, f-hat,
    the defense's stats and the integer-array rule; ``skipped`` says why no step was taken."""

    round: int
    nodes: list[int] = field(default_factory=list)
    client_ids: list[int] = field(default_factory=list)
    weights: list[float] | None = None
    dropped: dict[int, str] = field(default_factory=dict)
    byzantine: list[int] = field(default_factory=list)
    f_hat: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    integer_rule: dict[str, str] = field(default_factory=dict)
    skipped: str | None = None


class RobustStrategy(FedAvg):  # type: ignore[misc]
    """FedAvg's protocol with a robustfl defense (see the module's docstring for the round).

    ``defense``: any spec a scenario file accepts (``"median"``, ``{"name": "krum", "pre":
    [{"name": "nnm"}]}``, a plugin's name). ``seed`` seeds the defense's and the sampler's streams
    (no global RNG: unlike FedAvg's ``random.sample``, the nodes sampled are a function of the
    seed). Other keyword arguments go to Flower's ``FedAvg``. Every argument is checked here: a bad
    one is a ConfigError naming it, the value given and what was expected."""

    def __init__(
        self,
        defense: C.Spec = "fedavg",
        *,
        assumed_byzantine: int | float = 0,
        server_lr: float = 1.0,
        weights: str = "equal",
        max_num_examples: int = MAX_NUM_EXAMPLES,
        reference_fn: Callable[[ArrayRecord, int], ArrayRecord] | None = None,
        adversary: ServerAdversary | None = None,
        integer_rule: str = "median",
        allow_outside_guarantee: bool = False,
        seed: int = 0,
        layers: tuple[int, ...] | None = None,
        **fedavg: Any,
    ) -> None:
        check.spec(OWNER, "defense", defense)
        assumed_byzantine = _assumed_byzantine(assumed_byzantine)
        server_lr = check.positive(OWNER, "server_lr", server_lr)
        check.choice(OWNER, "weights", weights, WEIGHTS)
        max_num_examples = check.count(OWNER, "max_num_examples", max_num_examples, least=1)
        check.function(OWNER, "reference_fn", reference_fn, "(arrays, server_round) -> ArrayRecord")
        if adversary is not None and not isinstance(adversary, ServerAdversary):
            check.fail(OWNER, "adversary", adversary, "a ServerAdversary or None")
        check.choice(OWNER, "integer_rule", integer_rule, INTEGER_RULES)
        allow_outside_guarantee = check.flag(OWNER, "allow_outside_guarantee", allow_outside_guarantee)
        seed = check.seed(OWNER, seed)
        if layers is not None and (why := layers_error(layers, None)) is not None:
            raise ConfigError(f"{OWNER}: {why}")
        super().__init__(**_fedavg_args(fedavg))
        self.defense_spec = defense
        self.defense: DefenseBase = C.build_defense(defense)
        self.label = C.defense_label(defense)
        needs_ref = self.defense.needs_reference or (adversary is not None and adversary.needs_reference)
        if needs_ref and reference_fn is None:
            raise ConfigError(
                f"defense {self.label!r} (or the adversary's attack) needs the server's reference update: "
                "pass reference_fn(arrays, server_round) -> the model trained on the server's root data"
            )
        self.assumed_byzantine, self.server_lr, self.weights = assumed_byzantine, server_lr, weights
        self.max_num_examples, self.reference_fn, self.adversary = max_num_examples, reference_fn, adversary
        self.integer_rule, self.seed = integer_rule, seed
        self.allow_outside_guarantee = allow_outside_guarantee
        self.layers = layers
        self.needs_reference = needs_ref
        self.reset()

    def reset(self) -> None:
        """Forget every run-dependent state: the defense's, the client-id map, the history, the
        random streams, the adversary's. Call it when a run restarts."""
        self.defense.reset()
        self.client_index: dict[int, int] = {}
        self.history: list[RoundRecord] = []
        self.last_aggregate: Aggregate | None = None
        self._g_defense = C.named_generator(self.seed, "defense")
        self._g_sample = C.named_generator(self.seed, "participation")
        self._global: ArrayRecord | None = None
        if self.adversary is not None:
            self.adversary.reset()

    # -- configure: deterministic sampling -------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._global = arrays
        if self.fraction_train == 0.0:
            return []
        nodes = sorted(grid.get_node_ids())
        want = max(int(len(nodes) * self.fraction_train), self.min_train_nodes)
        while len(nodes) < (need := max(want, self.min_available_nodes)):  # as FedAvg: wait for them
            log(INFO, "waiting for nodes: %d connected, %d needed", len(nodes), need)
            time.sleep(1.0)
            nodes = sorted(grid.get_node_ids())
            want = max(int(len(nodes) * self.fraction_train), self.min_train_nodes)
        if want < len(nodes):
            pick = torch.randperm(len(nodes), generator=self._g_sample)[:want].sort().values.tolist()
            nodes = [nodes[i] for i in pick]
        config["server-round"] = server_round
        config["num-clients"] = len(nodes)
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, nodes, "train")

    # -- aggregate -------------------------------------------------------------------------------
    def _row(self, msg: Message, layout: ModelLayout) -> tuple[str | None, dict[str, np.ndarray], float]:
        """(why the reply is dropped or None, its arrays, its num-examples)."""
        if msg.has_error():
            return f"error reply: {msg.error.reason}", {}, 0.0
        content = msg.content
        records = list(content.array_records.values())
        if len(records) != 1:
            return f"expected one ArrayRecord, got {len(records)}", {}, 0.0
        why = layout.check(records[0])
        if why is not None:
            return why, {}, 0.0
        metrics = [m for m in content.metric_records.values() if self.weighted_by_key in m]
        if len(metrics) != 1:
            return f"expected one MetricRecord with {self.weighted_by_key!r}, got {len(metrics)}", {}, 0.0
        n = metrics[0][self.weighted_by_key]
        if isinstance(n, list) or not math.isfinite(float(n)) or not 1 <= float(n) <= self.max_num_examples:
            return f"{self.weighted_by_key} = {n!r} outside [1, {self.max_num_examples}]", {}, 0.0
        values = layout.numpy(records[0])
        why = layout.nonfinite(values)
        return why, values, float(n)

    def _indices(self, nodes: list[int]) -> list[int]:
        for node in sorted(n for n in nodes if n not in self.client_index):
            self.client_index[node] = len(self.client_index)
        return [self.client_index[n] for n in nodes]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self._global is None:
            raise ConfigError("aggregate_train before configure_train: the strategy has no global model")
        layout = ModelLayout.of(self._global)
        current = layout.numpy(self._global)
        rec = RoundRecord(server_round, integer_rule={k: self.integer_rule for k in layout.integer_keys})
        self.history.append(rec)
        kept: list[tuple[int, dict[str, np.ndarray], float, bool, Message]] = []
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            why, values, n = self._row(msg, layout)
            if why is not None:
                rec.dropped[node] = why
            else:
                marked = any(MARK in c for c in msg.content.config_records.values())
                kept.append((node, values, n, marked, msg))
        if not kept:
            rec.skipped = "no valid reply: model kept"
            return self._global, self._metrics(rec, [])
        idx = self._indices([k[0] for k in kept])
        order = sorted(range(len(kept)), key=lambda i: idx[i])
        kept = [kept[i] for i in order]
        rec.nodes, rec.client_ids = [k[0] for k in kept], sorted(idx)
        w = layout.flatten(current)
        rows = torch.stack([layout.flatten(k[1]) for k in kept]) - w
        k_rows = rows.shape[0]
        f_hat = count_of(self.assumed_byzantine, k_rows)
        rec.f_hat = f_hat
        if not self.defense.admits(k_rows, f_hat) and not self.allow_outside_guarantee:
            rec.skipped = (
                f"defense {self.label!r} needs at least {self.defense.min_clients(f_hat)} rows for "
                f"assumed_byzantine = {f_hat}, got {k_rows}: model kept"
            )
            return self._global, self._metrics(rec, [k[4] for k in kept])
        reference = self._reference(server_round, layout, w) if self.needs_reference else None
        layers = layout.layers if self.layers is None else self.layers
        if (why := layers_error(layers, int(w.shape[0]))) is not None:
            raise ConfigError(f"{why} (the model's floating values)")
        weighted = self.weights == "num-examples"
        ctx = DefenseContext(
            round=server_round - 1,
            global_model=w.clone(),
            assumed_byzantine=f_hat,
            client_ids=torch.tensor(rec.client_ids, dtype=torch.long),
            num_samples=torch.tensor([k[2] for k in kept], dtype=torch.float64) if weighted else None,
            reference=reference,
            generator=self._g_defense,
            layers=layers,
        )
        if self.adversary is not None:
            byz = torch.tensor([k[3] or self.adversary.owns(k[0]) for k in kept], dtype=torch.bool)
            rec.byzantine = [k[0] for k, b in zip(kept, byz.tolist(), strict=True) if b]
            rows = self.adversary.replace_rows(rows, byz, ctx, self.defense)
        agg = self.defense(rows, ctx)
        self.last_aggregate = agg
        rec.weights = None if agg.weights is None else [float(x) for x in agg.weights]
        rec.stats = {str(k): float(v) for k, v in agg.stats.items()}
        new = w + self.server_lr * agg.vector.to(torch.float64)
        ints = integer_arrays(layout, current, [k[1] for k in kept], self.integer_rule)
        out = layout.unflatten(new, ints)
        arrays = ArrayRecord({key: Array(out[key]) for key in layout.keys})
        return arrays, self._metrics(rec, [k[4] for k in kept])

    def _reference(self, server_round: int, layout: ModelLayout, w: Tensor) -> Tensor:
        assert self.reference_fn is not None and self._global is not None
        ref = self.reference_fn(self._global, server_round)
        why = layout.check(ref)
        values = layout.numpy(ref) if why is None else {}
        why = why or layout.nonfinite(values)
        if why is not None:
            raise ConfigError(f"reference_fn returned a model that does not match the global model: {why}")
        return layout.flatten(values) - w

    def _metrics(self, rec: RoundRecord, accepted: list[Message]) -> MetricRecord:
        """The clients' own metrics (FedAvg's aggregate of the accepted replies) with the round's
        facts: rows received and dropped, f-hat, and the defense's stats as ``defense.<name>``."""
        out = MetricRecord()
        if accepted:
            try:
                out = self.train_metrics_aggr_fn([m.content for m in accepted], self.weighted_by_key)
            except (KeyError, TypeError, ValueError):  # clients' metrics that do not average
                out = MetricRecord()
        out["rows"] = len(rec.nodes)
        out["dropped"] = len(rec.dropped)
        out["f_hat"] = rec.f_hat
        for k, v in rec.stats.items():
            if math.isfinite(v):
                out[f"defense.{k}"] = v
        return out

    # -- evaluation: faulty replies never stop the run -------------------------------------------
    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        key, cap = self.weighted_by_key, self.max_num_examples
        ok = [
            m.content
            for m in replies
            if not m.has_error()
            and len(m.content.metric_records) == 1
            and _usable(next(iter(m.content.metric_records.values())), key, cap)
        ]
        if not ok:
            return None
        return self.evaluate_metrics_aggr_fn(ok, self.weighted_by_key)


def _usable(metrics: Mapping[str, Any], key: str, cap: int) -> bool:
    n = metrics.get(key)
    return isinstance(n, int | float) and math.isfinite(float(n)) and 1 <= float(n) <= cap


def _assumed_byzantine(value: Any) -> int | float:
    """A count (an integer >= 0, as an int) or a fraction (a finite number in [0, 1), as a float)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if (count := operator.index(value)) >= 0:
            return count
    elif check.is_real(value) and 0 <= float(value) < 1:
        return float(value)
    check.fail(OWNER, "assumed_byzantine", value, "a count (an integer >= 0) or a fraction in [0, 1)")


def _fedavg_args(fedavg: dict[str, Any]) -> dict[str, Any]:
    """FedAvg's keyword arguments, checked: fractions in [0, 1], node counts integers >= 0 (as int),
    record keys non-empty strings, metric aggregators functions or None."""
    out = dict(fedavg)
    for name, value in fedavg.items():
        if name not in FEDAVG_ARGS:
            close = difflib.get_close_matches(name, FEDAVG_ARGS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{OWNER}: unknown argument {name!r}{hint}; FedAvg's are {', '.join(FEDAVG_ARGS)}"
            )
        if name.startswith("fraction_"):
            check.unit(OWNER, name, value)
        elif name.startswith("min_") and name.endswith("_nodes"):
            out[name] = check.count(OWNER, name, value)
        elif name.endswith("_key"):
            check.key(OWNER, name, value)
        elif name.endswith("_aggr_fn"):
            check.function(OWNER, name, value, "(list[RecordDict], str) -> MetricRecord")
    return out
