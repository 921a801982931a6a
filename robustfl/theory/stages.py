"""``robustfl bound``'s configuration of the round (:mod:`robustfl.simulation.round`).

select: every client, the first f of the seed's permutation Byzantine -> share: everything ->
train: each client's row is one full-batch gradient step, ``-grad F_k(w)`` (local lr 1) ->
reference: the server's root gradient ``g0 = grad f_D0(w)``; the defense is told ``g0``, the
attack (update convention) ``-g0`` -> attack: the shared stage -> aggregate: the defense on the
negated rows (the theorem's gradient convention), ``g`` -> server step: ``w <- w - alpha g`` ->
measure: the iterate, ``g`` and ``g0`` kept for the lemma checks; a run diverges when ``||w||``
passes ``limit`` or is not finite.

The oracle answers in the update convention (``-defense(-rows)``) and is the scenario runner's
(:func:`robustfl.simulation.round.dry_run`): each trial runs on a copy of the round's defense
stream as it stands, so no trial moves the real aggregation's draws (a random rule's trajectory
does not depend on how many trials the attack made).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..capabilities import AttackBase, DefenseBase
from ..simulation.round import Round, attack_stage, dry_run, oracle_for
from ..types import Aggregate, DefenseContext, Knowledge
from .setting import Setting


class TheoremStages:
    """The stages of one trajectory; ``ws``, ``gs``, ``g0s`` are filled round by round."""

    def __init__(
        self,
        st: Setting,
        attack: AttackBase,
        defense: DefenseBase,
        *,
        f: int,
        f_hat: int,
        alpha: float,
        root: tuple[Tensor, Tensor],
        attack_gen: torch.Generator,
        defense_gen: torch.Generator,
        granted: Knowledge,
        rounds: int,
        limit: float,
        attack_label: str = "attack",
    ) -> None:
        self.st, self.attacker, self.defense, self.attack_label = st, attack, defense, attack_label
        self.f, self.f_hat, self.alpha, self.limit = f, f_hat, alpha, limit
        self.attack_gen, self.defense_gen, self.granted = attack_gen, defense_gen, granted
        k, dev = st.num_clients, st.device
        self.is_byz = torch.zeros(k, dtype=torch.bool, device=dev)
        self.is_byz[st.byz_order[:f]] = True
        self.ids = torch.arange(k, device=dev)
        x0, y0 = root
        self.a0, self.b0 = x0.T @ x0 / x0.shape[0], x0.T @ y0 / x0.shape[0]  # grad f_D0 = a0 w - b0 + l2 w
        self.ws = torch.empty(rounds + 1, st.w0.shape[0], dtype=torch.float64, device=dev)
        self.gs, self.g0s = torch.empty_like(self.ws[1:]), torch.empty_like(self.ws[1:])
        self.ws[0] = st.w0
        self.status = "ok"

    def select(self, r: Round) -> None:
        r.ids, r.byz = self.ids, self.is_byz

    def share(self, r: Round) -> None:
        return None  # every coordinate, every round

    def train(self, r: Round) -> None:
        r.rows = -self.st.client_grads(r.w)  # each client's update: one full-batch step, beta = 1

    def reference(self, r: Round) -> None:
        g0 = self.a0 @ r.w - self.b0 + self.st.l2 * r.w  # the server's gradient on D0
        r.reference = -g0  # its update (what an attack granted REFERENCE sees)
        r.extra["g0"] = g0
        r.ctx = DefenseContext(
            round=r.t,
            global_model=r.w,
            assumed_byzantine=self.f_hat,
            client_ids=self.ids,
            num_samples=self.st.num_samples,
            reference=g0,
            generator=self.defense_gen,
            layers=(int(r.w.shape[0]),),  # the ridge model: one parameter vector
        )

    def attack(self, r: Round) -> None:
        if self.f == 0:
            return
        assert r.ctx is not None
        oracle = None
        if Knowledge.ORACLE in self.granted:
            trial = dry_run(self.defense, r.ctx)  # the round's stream copied, a stateful rule on a copy

            def negated(rows: Tensor) -> Aggregate:  # the update convention: -defense(-rows)
                agg = trial(-rows)
                return Aggregate(vector=-agg.vector, weights=agg.weights, stats=agg.stats)

            oracle = oracle_for(r, negated)
        attack_stage(
            self.attacker, self.attack_label, r, granted=self.granted, generator=self.attack_gen,
            global_model=r.w, reference=r.reference, oracle=oracle,
        )

    def aggregate(self, r: Round) -> None:
        assert r.rows is not None and r.ctx is not None
        r.agg = self.defense(-r.rows, r.ctx)  # the aggregate of the negated rows: g

    def server_step(self, r: Round) -> None:
        assert r.agg is not None
        r.w_next = r.w - self.alpha * r.agg.vector

    def measure(self, r: Round) -> bool:
        assert r.agg is not None and r.w_next is not None
        t = r.t
        self.gs[t], self.g0s[t] = r.agg.vector, r.extra["g0"]
        self.ws[t + 1] = r.w_next
        wn = float(torch.linalg.vector_norm(r.w_next, dim=-1))
        if not math.isfinite(wn) or wn > self.limit:
            self.status = "diverged"
            return True
        return False
