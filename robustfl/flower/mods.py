"""Byzantine clients in a Flower federation: ClientApp mods and a data-poisoning helper.

* :func:`byzantine_mod` -- a mod for ``ClientApp(mods=[...])`` that lets the client train honestly,
  then replaces its reply's model with ``w + a``, where ``a`` is the attack's row for the client's
  own update ``u = w_k - w`` (float64, the global model's key order), cast back to each array's
  dtype. Only attacks that declare ``per_client`` (each row a function of its own client's update:
  sign flipping, scaling, Gaussian noise, the data-poisoning attacks' honest rows) run there; the
  others are refused when the mod is built, naming what they need -- run them through
  :class:`~robustfl.flower.adversary.ServerAdversary`.
* :func:`mark_byzantine_mod` -- a mod that marks the chosen clients' replies for a
  ServerAdversary (they train honestly; the server replaces their rows).
* :func:`poison_batch` -- a data-poisoning attack (label flipping, backdoor) applied to a batch
  ``(x, y)`` inside the user's training loop.

Which clients: ``clients`` is a collection of partition ids (``context.node_config
["partition-id"]``, which Flower's simulation engine sets; the node id where there is none) or a
predicate ``(Context) -> bool``. The mod's random stream for round t on partition i is
``named_generator(seed, f"attack:{i}:{t}")``: reproducible, independent across clients and rounds.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Collection, Iterable

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from torch import Tensor

from ..capabilities import AttackBase
from ..errors import ConfigError
from ..simulation import components as C
from ..types import AttackContext, Knowledge, TaskInfo
from . import _checks as check
from ._flwr import require
from .adversary import MARK
from .layout import ModelLayout

require()

Mod = Callable[[Message, Context, Callable[[Message, Context], Message]], Message]
Chooser = Collection[int] | Callable[[Context], bool]


def client_attack(attack: C.Spec) -> AttackBase:
    """The attack a client can run on its own update, or ConfigError naming what it needs."""
    check.spec("client_attack", "attack", attack)
    label = C.attack_label(attack)
    built = C.build_attack(attack)
    extra = built.knowledge & ~Knowledge.OWN
    if extra:
        raise ConfigError(
            f"attack {label!r} needs {built.knowledge.describe()} knowledge, more than one client has: "
            "run it on the server with robustfl.flower.ServerAdversary"
        )
    if not built.per_client:
        raise ConfigError(
            f"attack {label!r} needs the other Byzantine clients' rows (it does not declare per_client): "
            "run it on the server with robustfl.flower.ServerAdversary"
        )
    return built


def partition_of(context: Context) -> int:
    """The client's partition id (Flower's simulation sets it), else its node id."""
    pid = context.node_config.get("partition-id")
    return int(pid) if isinstance(pid, int | float) else int(context.node_id)


def _chosen(owner: str, clients: Chooser) -> Callable[[Context], bool]:
    """``clients`` as a predicate; ConfigError unless a predicate or a collection of ids."""
    ids = check.clients(owner, clients)
    if callable(ids):
        return ids
    return lambda ctx: partition_of(ctx) in ids


def byzantine_mod(attack: C.Spec, clients: Chooser, *, seed: int = 0) -> Mod:
    """A mod that turns ``clients`` Byzantine with ``attack`` (a spec; it must be ``per_client``):
    ``clients`` a collection of partition ids (empty: none) or a predicate, ``seed`` a seed."""
    check.spec("byzantine_mod", "attack", attack)
    chosen = _chosen("byzantine_mod", clients)
    seed = check.seed("byzantine_mod", seed)
    built = client_attack(attack)
    label = C.attack_label(attack)

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        reply = call_next(msg, context)
        if msg.metadata.message_type.split(".")[0] != "train" or reply.has_error() or not chosen(context):
            return reply
        sent = list(msg.content.array_records.items())
        got = list(reply.content.array_records.items())
        if len(sent) != 1 or len(got) != 1:
            return reply  # not a model exchange this mod understands: left as is
        layout = ModelLayout.of(sent[0][1])
        if layout.check(got[0][1]) is not None:
            return reply  # the honest reply is already malformed: the server drops it anyway
        w_values, k_values = layout.numpy(sent[0][1]), layout.numpy(got[0][1])
        w = layout.flatten(w_values)
        own = (layout.flatten(k_values) - w)[None]
        config = next(iter(msg.content.config_records.values()), ConfigRecord())
        t = int(config.get("server-round", 1)) - 1  # type: ignore[arg-type]
        k = config.get("num-clients")
        ctx = AttackContext(
            own=own,
            round=t,
            num_clients=int(k) if isinstance(k, int | float) else None,  # type: ignore[arg-type]
            global_model=w.clone(),
            generator=C.named_generator(seed, f"attack:{partition_of(context)}:{t}"),
        )
        row = built(ctx)
        if not isinstance(row, Tensor) or tuple(row.shape) != tuple(own.shape):
            got_shape = getattr(row, "shape", row)
            raise ConfigError(f"attack {label!r} returned {got_shape!r}, expected {tuple(own.shape)}")
        ints = {key: k_values[key] for key in layout.integer_keys}
        values = layout.unflatten(w + row[0].to(torch.float64), ints)
        content = RecordDict()
        for name, record in reply.content.items():
            if name == got[0][0]:
                content[name] = ArrayRecord({key: Array(values[key]) for key in layout.keys})
            else:
                content[name] = record
        return Message(content, reply_to=msg)

    return mod


def mark_byzantine_mod(clients: Chooser) -> Mod:
    """A mod that marks ``clients``' train replies for a :class:`ServerAdversary`
    (a ConfigRecord ``robustfl`` holding ``robustfl-byzantine = 1``; the strategy strips nothing
    else and the defense never sees it); ``clients`` as :func:`byzantine_mod`'s."""
    chosen = _chosen("mark_byzantine_mod", clients)

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        reply = call_next(msg, context)
        if msg.metadata.message_type.split(".")[0] == "train" and not reply.has_error() and chosen(context):
            reply.content["robustfl"] = ConfigRecord({MARK: 1})
        return reply

    return mod


def data_poisoner(
    attack: C.Spec | AttackBase,
    *,
    num_classes: int,
    input_shape: tuple[int, ...],
    is_image: bool | None = None,
) -> Callable[[Tensor, Tensor, torch.Generator | None], tuple[Tensor, Tensor]]:
    """A data-poisoning attack (label flipping, a backdoor) set up once for a client's task, as a
    function ``(x, y, generator) -> (x', y')`` its training loop calls on each batch: ``num_classes``
    an integer >= 2, ``input_shape`` one sample's shape (integers >= 1), ``is_image`` a bool or None
    (None: an image when the shape has two dimensions or more)."""
    owner = "data_poisoner"
    if not isinstance(attack, AttackBase):
        check.spec(owner, "attack", attack)
    num_classes = check.count(owner, "num_classes", num_classes, least=2)
    iterable = isinstance(input_shape, Iterable) and not isinstance(input_shape, str)
    dims = tuple(input_shape) if iterable else None
    if dims is None or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in dims):
        check.fail(owner, "input_shape", input_shape, "a tuple of integers >= 1 (one sample's shape)")
    if is_image is not None:
        is_image = check.flag(owner, "is_image", is_image)
    built = attack if isinstance(attack, AttackBase) else C.build_attack(attack)
    label = type(attack).__name__ if isinstance(attack, AttackBase) else C.attack_label(attack)
    if not built.poisons_data:
        raise ConfigError(f"attack {label!r} does not poison data; use byzantine_mod or ServerAdversary")
    shape = tuple(int(d) for d in dims)
    image = len(shape) >= 2 if is_image is None else is_image
    built.setup(TaskInfo("flower", int(num_classes), shape, image))

    def poison(x: Tensor, y: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        px, py = built.poison(x, y, g)
        return px, py

    return poison


def poison_batch(
    attack: C.Spec | AttackBase,
    x: Tensor,
    y: Tensor,
    *,
    num_classes: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`data_poisoner` for one batch ``(x, y)``: tensors with the same first dimension
    (the samples), ``generator`` a ``torch.Generator`` or None."""
    if not (isinstance(x, Tensor) and x.dim() >= 1):
        check.fail("poison_batch", "x", x, "a tensor of samples (at least one dimension)")
    if not (isinstance(y, Tensor) and y.dim() >= 1 and y.shape[0] == x.shape[0]):
        check.fail("poison_batch", "y", y, f"a tensor of {x.shape[0]} labels (x's first dimension)")
    if generator is not None and not isinstance(generator, torch.Generator):
        check.fail("poison_batch", "generator", generator, "a torch.Generator or None")
    return data_poisoner(attack, num_classes=num_classes, input_shape=tuple(x.shape[1:]))(x, y, generator)
