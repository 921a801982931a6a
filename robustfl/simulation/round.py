"""The round, written once: named stages over one state.

    select -> share -> train -> reference -> attack -> aggregate -> server step -> measure

:func:`run_rounds` is the only loop over rounds in robustfl. What a stage does is the
configuration's (:class:`RoundStages`): the scenario runner's federated setting
(:mod:`robustfl.simulation.federated`: sampled participants, sharing schemes, local SGD on the
clients' data, the server's root update, the algorithm's server step, per-round metrics) and
``robustfl bound``'s exact setting (:mod:`robustfl.theory.trajectory`: every client, one
full-batch gradient step, the root gradient, ``w <- w - alpha g``, the iterates) are two
configurations of the same stages. The attack stage and the oracle are shared
(:func:`attack_stage`, :func:`oracle_for`): an attack sees the same :class:`AttackContext`, granted
the same way, in both.

The state (:class:`Round`) is created by the loop for round ``t`` with the global model ``w``; each
stage fills in its fields, and the server step sets ``w_next``, which the next round starts from.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from ..capabilities import AttackBase, DefenseBase
from ..types import Aggregate, AttackContext, DefenseContext, Knowledge


@dataclass
class Round:
    """One round's state, filled in stage by stage (rows: this round's participants, in order)."""

    t: int
    w: Tensor  # the global model the round starts from (P,)
    ids: Tensor | None = None  # select: the participants' client ids (K,)
    byz: Tensor | None = None  # select: which of the K rows are Byzantine (bool)
    coords: Tensor | None = None  # share: the coordinates shared this round (None = all)
    rows: Tensor | None = None  # train: the participants' honest updates (K, P'); attack: replaced
    reference: Tensor | None = None  # reference: the server's own update (P',) or None
    ctx: DefenseContext | None = None  # reference: what the server knows this round
    attack_stats: dict[str, float] = field(default_factory=dict)  # attack: its last_stats
    agg: Aggregate | None = None  # aggregate: the defense's output
    w_next: Tensor | None = None  # server step: the next global model
    extra: dict[str, Any] = field(default_factory=dict)  # a configuration's own per-round values


class RoundStages(Protocol):
    """A configuration of the round: what each named stage does. Each stage reads and fills ``r``."""

    def select(self, r: Round) -> None: ...

    def share(self, r: Round) -> None: ...

    def train(self, r: Round) -> None: ...

    def reference(self, r: Round) -> None: ...

    def attack(self, r: Round) -> None: ...

    def aggregate(self, r: Round) -> None: ...

    def server_step(self, r: Round) -> None: ...

    def measure(self, r: Round) -> bool:
        """Record what the configuration keeps of round ``r``; True stops the run (diverged)."""
        ...


def run_rounds(stages: RoundStages, w: Tensor, rounds: int) -> tuple[Tensor, int]:
    """Run up to ``rounds`` rounds from ``w``: ``(the last global model, rounds run)``."""
    done = 0
    for t in range(rounds):
        r = Round(t=t, w=w)
        stages.select(r)
        stages.share(r)
        stages.train(r)
        stages.reference(r)
        stages.attack(r)
        stages.aggregate(r)
        stages.server_step(r)
        assert r.w_next is not None, "the server step sets w_next"
        w, done = r.w_next, t + 1
        if stages.measure(r):
            break
    return w, done


Rule = Callable[[Tensor, DefenseContext], Aggregate]  # a defense, as a trial calls it


def dry_run(defense: Rule, ctx: DefenseContext) -> Callable[[Tensor], Aggregate]:
    """The defense as the attack's oracle may call it: on a copy of the defense, with a copy of
    ``ctx``'s random stream as it stands now, so that a trial never changes the real round.

    A rule that declares no state (``DefenseBase.stateful`` False) is called as it is; any other
    callable on a deep copy made for each trial."""
    gen_state = ctx.generator.get_state() if ctx.generator is not None else None
    trial_ctx: list[DefenseContext] = []  # one context and generator for every trial, made at the first

    def run(trial: Tensor) -> Aggregate:
        if not trial_ctx:  # without a generator the rule seeds its own, as in the real call
            g = ctx.generator
            copy = None if g is None else torch.Generator(device=g.device)  # on the stream's own device
            trial_ctx.append(ctx if copy is None else dataclasses.replace(ctx, generator=copy))
        if gen_state is not None:
            trial_ctx[0].generator.set_state(gen_state)  # every trial: the round's stream as it stands
        return trial_rule(defense)(trial, trial_ctx[0])

    return run


def trial_rule(defense: Rule) -> Rule:
    """What one oracle trial calls: the rule itself when it declares no state
    (``DefenseBase.stateful`` False), else a deep copy, so that no trial changes the rule."""
    stateless = isinstance(defense, DefenseBase) and not defense.stateful
    return defense if stateless else copy.deepcopy(defense)


def oracle_for(r: Round, aggregate: Callable[[Tensor], Aggregate]) -> Callable[[Tensor], Aggregate]:
    """The attack's oracle: the Aggregate ``aggregate`` gives with ``candidate`` as the Byzantine
    rows of this round (the rows as trained; ``aggregate`` must leave the defense's state as is)."""
    assert r.rows is not None and r.byz is not None
    rows, byz = r.rows, r.byz
    at: list[Tensor] = []  # the Byzantine rows' indices, found at the first call

    def oracle(candidate: Tensor) -> Aggregate:
        if not at:
            at.append(byz.nonzero().squeeze(1))
        trial = rows.clone()
        trial.index_copy_(0, at[0], candidate.to(dtype=trial.dtype, device=trial.device))
        return aggregate(trial)

    return oracle


def attack_stage(
    attack: AttackBase,
    label: str,
    r: Round,
    *,
    granted: Knowledge,
    generator: torch.Generator,
    global_model: Tensor,
    reference: Tensor | None,
    oracle: Callable[[Tensor], Aggregate] | None,
) -> None:
    """Replace the Byzantine rows of ``r.rows`` (in place) with the attack's, granted ``granted``.

    The attack sees copies (``own`` by boolean indexing, ``honest`` likewise, ``reference`` and the
    global model cloned): it cannot touch the round's rows. A wrong shape is an error naming it."""
    assert r.rows is not None and r.byz is not None
    rows, byz = r.rows, r.byz
    own = rows[byz]
    ctx = AttackContext(
        own=own,
        round=r.t,
        num_clients=int(rows.shape[0]),
        global_model=global_model.clone(),
        generator=generator,
        honest=rows[~byz] if Knowledge.HONEST in granted else None,
        reference=reference.clone() if reference is not None and Knowledge.REFERENCE in granted else None,
        oracle=oracle if Knowledge.ORACLE in granted else None,
    )
    mal = attack(ctx)
    if not isinstance(mal, Tensor) or tuple(mal.shape) != tuple(own.shape):
        shape = tuple(mal.shape) if isinstance(mal, Tensor) else type(mal).__name__
        raise RuntimeError(f"attack {label!r} returned {shape}, expected {tuple(own.shape)}")
    rows[byz] = mal.to(rows.dtype)
    r.attack_stats = dict(attack.last_stats)
