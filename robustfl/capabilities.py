"""What a component can do, declared on its class -- never guessed from its name or probed.

An attack is still any ``(AttackContext) -> (f, P)`` callable and a defense any
``(updates, DefenseContext) -> Aggregate`` callable (DESIGN.md's contract); the engine, though,
speaks to the declared form below. Built-ins subclass these bases; a plugin may too (then it is
used as is), and a plugin that does not is wrapped once, when the engine builds it, by the adapters
in :mod:`robustfl.registry.adapters` -- the one place that reads undeclared attributes.

Attacks (:class:`AttackBase`):

====================  =========================================================================
``knowledge``         what the attack needs (:class:`~robustfl.types.Knowledge`); OWN by default
``honest``            True for the no-attack baseline (``none``): no client counts as Byzantine
``poisons_data``      True: ``poison(x, y, generator) -> (x', y')`` rewrites its clients' data once
``backdoor``          True: ``trigger(x)`` stamps inputs and ``target_label`` is the class they are
                      pushed to (the engine measures the attack success rate)
``sybil``             True: ``sybil_rows(f)`` marks which of the f rows are copies of one identity
``per_client``        True: each Byzantine row is a function of its own client's honest row alone
                      (and the round's public facts), so the attack can run inside one client
                      (``robustfl.flower.byzantine_mod``); False by default (the rows need each
                      other -- ALIE's statistics, a Sybil's shared row -- or more knowledge)
``last_stats``        the last call's diagnostics (a mapping of floats; empty by default)
``along(ctx, name)``  the rows as a function of one numeric parameter, the work that does not
                      depend on it done once (line searches: ``optimal``); None by default
``setup(info)``       called once with the task's :class:`~robustfl.types.TaskInfo` (no-op)
====================  =========================================================================

Defenses (:class:`DefenseBase`):

====================  =========================================================================
``name``              the rule's registered name
``properties``        rule properties the conformance suite checks (``robustfl.testing``)
``needs_reference``   True: reads ``DefenseContext.reference`` (the server's root-data update)
``tolerates_byzantine`` False: its guarantee covers no f > 0 at all (FedAvg)
``min_clients(f)``    rows needed for f-hat = f to be inside the guarantee (1 by default)
``admits(K, f)``      K >= min_clients(f) by default
``reset()``           forget state between runs (no-op by default)
====================  =========================================================================

Pre-aggregators (:class:`PreAggregatorBase`, ``robustfl.defenses.pre.Pre``) declare ``name``,
``preserves``, ``fresh_output``, ``transform_counts``, ``reset`` and an in-place ``apply_``;
algorithms declare ``has_extra_grad`` and sharing schemes ``common_start`` on
:mod:`robustfl.federation`'s bases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from torch import Tensor

from .types import Aggregate, AttackContext, DefenseContext, Knowledge, TaskInfo

_EMPTY: Mapping[str, float] = MappingProxyType({})

Pullback = Callable[[Tensor], Tensor]
"""Maps the next stage's weights (K',) back to weights over a pre-aggregator's K input rows."""


class AttackBase:
    """Declared optional behaviour of an attack; every capability is off until a class says so.

    The flags are read-only properties here so that a subclass may declare them as plain class
    attributes (``poisons_data = True``), dataclass fields, or properties of its own (a composite
    attack answers for its base)."""

    knowledge: Knowledge = Knowledge.OWN
    last_stats: Mapping[str, float] = _EMPTY

    @property
    def poisons_data(self) -> bool:
        return False

    @property
    def backdoor(self) -> bool:
        return False

    @property
    def sybil(self) -> bool:
        return False

    @property
    def target_label(self) -> int:
        return 0

    @property
    def per_client(self) -> bool:
        """True when row i of the output depends on ``own[i]`` alone (plus ``round``,
        ``global_model``, ``num_clients`` and the generator), never on the other Byzantine rows nor
        on knowledge beyond OWN: the attack then runs on one client (a Flower ClientApp mod). False
        by default, the safe answer: such an attack runs where all the Byzantine rows meet."""
        return False

    @property
    def honest(self) -> bool:
        """True for the no-attack baseline: its designated clients behave honestly and are not
        counted as Byzantine (no poisoning, no Byzantine rows in the metrics)."""
        return False

    def __call__(self, ctx: AttackContext) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define __call__")

    def setup(self, info: TaskInfo) -> None:
        """Called once per run with the task; raise ConfigError when the attack cannot apply."""
        return None

    def poison(self, x: Tensor, y: Tensor, generator: Any) -> tuple[Tensor, Tensor]:
        raise NotImplementedError(f"{type(self).__name__} does not poison data (poisons_data is False)")

    def trigger(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no backdoor trigger (backdoor is False)")

    def sybil_rows(self, f: int) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no Sybil identities (sybil is False)")

    def along(self, ctx: AttackContext, parameter: str) -> Callable[[float], Tensor] | None:
        """``x -> rows``: exactly what this attack with ``parameter = x`` (every other parameter as
        here) returns for ``ctx``, the work that does not depend on x done once here, for line
        searches over x. The function draws nothing from ``ctx.generator``. None (the default):
        not offered for this parameter; the search then builds the attack for each value."""
        return None


class DefenseBase:
    """Declared optional behaviour of an aggregation rule (stateless, no guarantee by default).

    ``name``, ``properties`` and ``needs_reference`` are read-only properties here so that a
    subclass declares them as plain class attributes (``name = "krum"``) or properties."""

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    @property
    def properties(self) -> frozenset[str]:
        return frozenset()

    @property
    def needs_reference(self) -> bool:
        return False

    @property
    def tolerates_byzantine(self) -> bool:
        """False for a rule with no robustness guarantee at all (FedAvg): its guarantee covers only
        f = 0, whatever ``admits`` says about the number of rows."""
        return True

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        raise NotImplementedError(f"{type(self).__name__} does not define __call__")

    def min_clients(self, f_hat: int) -> int:
        return 1

    def admits(self, k: int, f_hat: int) -> bool:
        return k >= self.min_clients(f_hat)

    def refusal(self, k: int, f_hat: int) -> str | None:
        """Why the rule will not aggregate ``k`` rows with ``f_hat`` assumed Byzantine, or None.
        A cost it refuses (MDA's and SMEA's exact subset searches), not a guarantee, so
        ``--allow-outside-guarantee`` does not lift it; read when a cell is set up, so that a
        matrix (and ``validate``) refuses before anything runs rather than failing every cell."""
        return None

    def reset(self) -> None:
        return None

    @property
    def stateful(self) -> bool:
        """True when the rule keeps state across calls, declared by overriding ``reset`` (which a
        rule with state must, so that each run starts clean). The attack's oracle calls a
        stateless rule as it is and a stateful one on a copy, so that a trial never changes it."""
        return _overrides(type(self), "reset", DefenseBase)


def _overrides(cls: type, name: str, base: type) -> bool:
    return any(name in vars(c) for c in cls.__mro__ if c not in (base, object))


class PreAggregatorBase:
    """Base of the pre-aggregators: the declared optional behaviour (counts unchanged, stateless,
    no in-place form, nothing preserved) that a pre-aggregator overrides where it does more.

    ``name``, ``preserves`` and ``fresh_output`` are read-only properties here so that a subclass
    declares them as plain class attributes (``fresh_output = True``)."""

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    @property
    def preserves(self) -> frozenset[str]:
        return frozenset()

    @property
    def fresh_output(self) -> bool:
        return False

    def __call__(
        self, updates: Tensor, ctx: DefenseContext
    ) -> tuple[Tensor, DefenseContext, Pullback | None]:
        raise NotImplementedError(f"{type(self).__name__} does not define __call__")

    def apply_(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback | None]:
        """The map done in place on ``updates`` where the stage can; by default the plain call."""
        return self(updates, ctx)

    def transform_counts(self, k: int, f_hat: int) -> tuple[int, int]:
        return k, f_hat

    def reset(self) -> None:
        return None
