"""The scenario runner's configuration of the round (:mod:`robustfl.simulation.round`).

select: the round's participants (all, or a seeded sample) and which of them are Byzantine ->
share: the sharing scheme's coordinates and start points -> train: local SGD of every participant
at once (:func:`~robustfl.simulation.engine.local_train`; Byzantine clients train on their own,
possibly poisoned, data; with full-batch training the server's root update rides along as one more
row) -> reference: the server's update on its root data and the :class:`DefenseContext` -> attack:
the Byzantine rows replaced (:func:`~robustfl.simulation.round.attack_stage`) -> aggregate: the
defense -> server step: the algorithm's, on the sharing scheme's expanded aggregate -> measure:
divergence, and the metrics every ``metrics.every`` rounds and at the last.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..capabilities import AttackBase, DefenseBase
from ..errors import PluginError
from ..federation import Algorithm, Sharing
from ..kernels import row_norms
from ..tasks.base import Problem
from ..types import Aggregate, DefenseContext, Knowledge, restrict_layers
from .engine import gather_clients, local_train
from .metrics import round_metrics
from .results import Cell, clean_metrics
from .round import Round, attack_stage, dry_run, oracle_for

DIVERGENCE_FACTOR = 1e6


def diverged(w: Tensor, w_ref: Tensor | None, d0: float) -> bool:
    """Non-finite, or past DIVERGENCE_FACTOR x the initial distance to w* (1e12 without w*)."""
    n = float(torch.linalg.vector_norm(w.double()))
    if not math.isfinite(n):
        return True
    if w_ref is None or not math.isfinite(d0):
        return n > 1e12
    return float(torch.linalg.vector_norm((w - w_ref).double())) > DIVERGENCE_FACTOR * max(d0, 1e-12)


class FederatedStages:
    """The stages of one cell's rounds. Built by :class:`~robustfl.simulation.runner.Simulation`
    after the data are on the device (poisoned where the attack poisons) and the components set up."""

    def __init__(
        self,
        *,
        problem: Problem,
        attack: AttackBase,
        attack_label: str,
        defense: DefenseBase,
        algorithm: Algorithm,
        sharing: Sharing,
        fed: dict[str, Any],
        per_round: int,
        assumed: Callable[[int], int],
        is_byz: Tensor,
        data: tuple[Tensor, ...],
        mask: Tensor,
        num_samples: Tensor,
        root: tuple[Tensor, ...] | None,
        root_mask: Tensor | None,
        granted: Knowledge,
        generators: dict[str, torch.Generator],
        measure: Callable[[Round], bool],
        device: torch.device,
        observe: Callable[[Round], None] | None = None,
        defense_label: str | None = None,
    ) -> None:
        self.p, self.attacker, self.attack_label, self.defense = problem, attack, attack_label, defense
        self.algorithm, self.sharing, self.fed = algorithm, sharing, fed
        self.per_round, self.assumed, self.is_byz = per_round, assumed, is_byz
        self.num_samples, self.granted, self.g = num_samples, granted, generators
        self.root, self.root_mask, self.device = root, root_mask, device
        self._measure, self._observe = measure, observe
        self.defense_label = defense_label or defense.name
        self.k_total = int(is_byz.shape[0])
        self.f_hat_all = assumed(per_round)
        bsz = fed["batch_size"]
        # Full batch: the server's root update rides along as one more row of the clients' vmap.
        n_max = mask.shape[1]
        self.merged = (
            root is not None
            and root_mask is not None
            and root_mask.shape[1] <= n_max
            and (bsz <= 0 or bsz >= max(int(mask.sum(1).max()), int(root_mask.sum())))
        )
        if self.merged:
            assert root is not None and root_mask is not None
            pad = n_max - root_mask.shape[1]
            data = tuple(
                torch.cat([t, torch.nn.functional.pad(r, (0, 0) * (r.ndim - 2) + (0, pad))], 0)
                for t, r in zip(data, root, strict=True)
            )
            mask = torch.cat([mask, torch.nn.functional.pad(root_mask, (0, pad))], 0)
            self.root_id = torch.tensor([self.k_total], device=device)
        # contiguous, as a gather would give them: a round with every client trains on them as they are
        self.data, self.mask = tuple(t.contiguous() for t in data), mask.contiguous()
        self.has_extra = algorithm.has_extra_grad

    # -- select, share --------------------------------------------------------------------------
    def select(self, r: Round) -> None:
        if self.per_round == self.k_total:
            ids = torch.arange(self.k_total)
        else:
            draw = torch.randperm(self.k_total, generator=self.g["participation"])
            ids = draw[: self.per_round].sort().values
        r.ids = ids.to(self.device)
        r.byz = self.is_byz[ids].to(self.device)

    def share(self, r: Round) -> None:
        assert r.ids is not None
        r.coords = self.sharing.begin_round(r.t, r.w, r.ids)

    # -- train, reference -----------------------------------------------------------------------
    def train(self, r: Round) -> None:
        assert r.ids is not None
        w, ids_dev, merged, fed = r.w, r.ids, self.merged, self.fed
        train_ids = torch.cat([ids_dev, self.root_id]) if merged else ids_dev
        if merged and self.sharing.common_start:  # all rows start at w: no (S, P) concatenation
            train_start = w.expand(len(ids_dev) + 1, -1).clone()  # trained in place
            start = w.expand(len(ids_dev), -1)  # the start points, untouched by training
        else:
            start = self.sharing.start_points(w, ids_dev)
            # trained in place: keep the start points apart when the algorithm reads them
            own_copy = start.clone() if self.has_extra and not merged else start
            train_start = torch.cat([start, w[None]]) if merged else own_copy
        algorithm = self.algorithm

        def extra(theta: Tensor) -> Tensor | None:
            if not merged:
                return algorithm.extra_grad(theta, start, ids_dev)
            e = algorithm.extra_grad(theta[:-1], start, ids_dev)
            return None if e is None else torch.cat([e, torch.zeros_like(theta[-1:])])

        every = self.per_round == self.k_total  # the ids are 0..K-1 (and the root row): all the data
        theta = local_train(
            self.p.loss,
            train_start,
            self.data if every else gather_clients(self.data, train_ids),
            self.mask if every else self.mask.index_select(0, train_ids),
            steps=fed["local_steps"],
            lr=fed["local_lr"],
            batch_size=fed["batch_size"],
            generator=self.g["train"],
            extra_grad=extra if self.has_extra else None,
            inplace=True,
            point=w if self.sharing.common_start else None,
            shared_grad=self.p.shared_grad,
        )
        if merged:
            r.extra["g0"] = theta[-1] - w
            theta = theta[:-1]
        r.rows = self.sharing.rows(theta, w, ids_dev)

    def reference(self, r: Round) -> None:
        assert r.ids is not None
        w, fed = r.w, self.fed
        reference = None
        if self.merged:
            reference = self.sharing.restrict(r.extra.pop("g0"))
        elif self.root is not None and self.root_mask is not None:
            g0 = (
                local_train(
                    self.p.loss, w[None], self.root, self.root_mask, steps=fed["local_steps"],
                    lr=fed["local_lr"], batch_size=fed["batch_size"], generator=self.g["root"], point=w,
                    shared_grad=self.p.shared_grad,
                )[0]
                - w
            )
            reference = self.sharing.restrict(g0)
        r.reference = reference
        k = len(r.ids)
        r.ctx = DefenseContext(
            round=r.t,
            global_model=self.sharing.restrict(w),
            assumed_byzantine=self.f_hat_all if self.per_round == self.k_total else self.assumed(k),
            client_ids=r.ids,
            num_samples=self.num_samples.index_select(0, r.ids),
            reference=reference,
            coordinates=r.coords,
            generator=self.g["defense"],
            layers=restrict_layers(self.p.layers, r.coords),  # the model's, in the rows passed
        )

    # -- attack, aggregate, server step ---------------------------------------------------------
    def attack(self, r: Round) -> None:
        assert r.byz is not None and r.ctx is not None
        if int(r.byz.sum()) == 0:
            return  # data-poisoning attacks' rows are their trained rows (a composite may boost them)
        oracle = oracle_for(r, dry_run(self.defense, r.ctx)) if Knowledge.ORACLE in self.granted else None
        attack_stage(
            self.attacker, self.attack_label, r, granted=self.granted, generator=self.g["attack"],
            global_model=self.sharing.restrict(r.w), reference=r.reference, oracle=oracle,
        )

    def aggregate(self, r: Round) -> None:
        assert r.rows is not None and r.ctx is not None
        if self._observe is not None:  # a read-only look at the rows the defense gets (robustfl kappa)
            self._observe(r)
        r.agg = self.defense(r.rows, r.ctx)
        p = int(r.rows.shape[1])
        vector = getattr(r.agg, "vector", None)
        if not isinstance(r.agg, Aggregate) or not isinstance(vector, Tensor) or tuple(vector.shape) != (p,):
            got = (
                f"a vector of shape {tuple(vector.shape)}" if isinstance(vector, Tensor)
                else type(r.agg).__name__ if vector is None else f"a vector of type {type(vector).__name__}"
            )
            raise PluginError(
                f"defense {self.defense_label!r} returned {got}; "
                f"expected an Aggregate whose vector has shape ({p},)"
            )

    def server_step(self, r: Round) -> None:
        assert r.rows is not None and r.agg is not None and r.ids is not None
        delta = self.sharing.expand(r.agg.vector.to(self.p.dtype))
        valid = torch.isfinite(row_norms(r.rows))
        r.w_next = self.algorithm.server_step(
            r.w, delta, rows=r.rows, ids=r.ids, valid=valid, server_lr=self.fed["server_lr"]
        )
        self.sharing.end_round(r.w, r.w_next, int(r.rows.shape[0]))  # every row received counts

    def measure(self, r: Round) -> bool:
        return self._measure(r)


class Measure:
    """The measure stage: divergence every round; metrics every ``every`` rounds and at the last
    (skipped rounds are absent from the cell's ``rounds``), with the defense's, algorithm's,
    sharing scheme's and attack's stats; ``on_round(t, T)`` after each round."""

    def __init__(
        self,
        cell: Cell,
        *,
        problem: Problem,
        w_ref: Tensor | None,
        d0: float,
        f_ref: float,
        rounds: int,
        every: int,
        backdoor: tuple[Tensor, Tensor] | None,
        sybil_rows: Callable[[Tensor], Tensor | None],
        stats: Callable[[], dict[str, dict[str, float]]],
        on_round: Callable[[int, int], None] | None,
    ) -> None:
        self.cell, self.p, self.w_ref, self.d0, self.f_ref = cell, problem, w_ref, d0, f_ref
        self.rounds, self.every, self.backdoor = rounds, every, backdoor
        self.sybil_rows, self.stats, self.on_round = sybil_rows, stats, on_round

    def __call__(self, r: Round) -> bool:
        assert r.w_next is not None and r.agg is not None and r.rows is not None and r.byz is not None
        t, w = r.t, r.w_next
        stop = diverged(w, self.w_ref, self.d0)
        if (t + 1) % self.every and t + 1 < self.rounds and not stop:
            if self.on_round is not None:
                self.on_round(t + 1, self.rounds)
            return False  # metrics.every: this round is not measured (absent from `rounds`)
        m = round_metrics(
            t + 1, w, self.w_ref, self.d0, self.f_ref, self.p, r.agg, r.rows, r.byz, self.backdoor,
            sybil_rows=self.sybil_rows(r.byz),
        )
        m["defense"] = dict(r.agg.stats)
        m.update(self.stats())
        m["attack"] = r.attack_stats
        self.cell.rounds.append(clean_metrics(m))
        if self.on_round is not None:
            self.on_round(t + 1, self.rounds)
        if stop:
            self.cell.status = "diverged"
            self.cell.error = (
                f"model diverged at round {t + 1} (non-finite or norm past 1e6 x initial distance)"
            )
        return stop
