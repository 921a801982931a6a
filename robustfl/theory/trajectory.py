"""One trajectory of the theorem's setting, replayed with the library's attack and defense.

Per round: every client's row is ``-grad F_k(w)`` (:class:`~robustfl.theory.setting.Setting`); the
attack (the library's, on the update rows, reference = the server's update) replaces the Byzantine
rows; ``g`` = the defense's aggregate of the negated rows (gradient convention, with reference
``g0 = grad f_D0(w)``); the server steps ``w <- w - alpha g``. A run diverges when ``||w||`` passes
``DIVERGENCE_FACTOR`` times ``||w0 - w*||`` or is not finite. On FLTrust's trajectories the lemma
checks' columns are computed after the loop (:class:`Trajectory`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..types import Aggregate, AttackContext, DefenseContext, Knowledge
from .setting import Setting

DIVERGENCE_FACTOR = 1e6  # a run diverges when ||w|| passes this times ||w0 - w*|| (or is not finite)


@dataclass
class Trajectory:
    """``errors[t] = ||w^t - w*||`` for t = 0..T (shorter when diverged); on FLTrust's rounds the
    columns of ``checks``: Lemma 1's LHS and RHS, Lemma 2's LHS and RHS, the root error."""

    errors: np.ndarray
    status: str
    checks: np.ndarray | None = None  # (rounds run, 5)
    cpu_s: float = 0.0  # CPU time of the process that ran it

    @property
    def final_error(self) -> float | None:
        return float(self.errors[-1]) if self.status == "ok" else None

    @property
    def rounds(self) -> int:
        return len(self.errors) - 1


def norm(v: Tensor) -> Tensor:
    """The Euclidean norm along the last dimension."""
    return torch.linalg.vector_norm(v, dim=-1)


def run_trajectory(
    st: Setting,
    attack: Any,
    defense: Any,
    *,
    f: int,
    f_hat: int,
    alpha: float,
    alpha_lemma: float,
    lemma2_factor: float,
    rounds: int,
    root: tuple[Tensor, Tensor],
    attack_gen: torch.Generator,
    defense_gen: torch.Generator,
    granted: Knowledge,
    check: bool,
) -> Trajectory:
    """Replay ``rounds`` rounds of the theorem's setting with the library's ``attack`` and ``defense``.

    The iterates, aggregates g and root gradients g0 are kept, and the lemma checks are computed
    from them after the loop in one vectorised pass (same formulas, per round)."""
    k, dev = st.num_clients, st.device
    is_byz = torch.zeros(k, dtype=torch.bool, device=dev)
    is_byz[st.byz_order[:f]] = True
    byz, honest = torch.nonzero(is_byz).flatten(), torch.nonzero(~is_byz).flatten()
    ids = torch.arange(k, device=dev)
    x0, y0 = root
    a0, b0 = x0.T @ x0 / x0.shape[0], x0.T @ y0 / x0.shape[0]  # grad f_D0(w) = a0 w - b0 + l2 w
    limit = DIVERGENCE_FACTOR * float(norm(st.w0 - st.w_star))
    ws = torch.empty(rounds + 1, st.w0.shape[0], dtype=torch.float64, device=dev)
    gs, g0s = torch.empty_like(ws[1:]), torch.empty_like(ws[1:])
    ws[0] = w = st.w0
    if hasattr(defense, "reset"):
        defense.reset()
    status, done = "ok", rounds
    for t in range(rounds):
        rows = -st.client_grads(w)  # each client's update: one full-batch step, beta = 1
        g0 = a0 @ w - b0 + st.l2 * w  # the server's gradient on D0 (its update is -g0)
        ctx = DefenseContext(
            round=t,
            global_model=w,
            assumed_byzantine=f_hat,
            client_ids=ids,
            num_samples=st.num_samples,
            reference=g0,
            generator=defense_gen,
        )
        if f > 0:
            actx = AttackContext(
                own=rows[byz],
                round=t,
                num_clients=k,
                global_model=w,
                generator=attack_gen,
                honest=rows[honest] if Knowledge.HONEST in granted else None,
                reference=-g0 if Knowledge.REFERENCE in granted else None,
                oracle=oracle_for(rows, byz, defense, ctx) if Knowledge.ORACLE in granted else None,
            )
            rows = rows.clone()
            rows[byz] = attack(actx).to(rows)
        g = defense(-rows, ctx).vector  # the aggregate of the negated rows (gradient convention)
        gs[t], g0s[t] = g, g0
        w = w - alpha * g
        ws[t + 1] = w
        wn = float(norm(w))
        if not math.isfinite(wn) or wn > limit:
            status, done = "diverged", t + 1
            break
    ws = ws[: done + 1]
    errors = norm(ws - st.w_star)
    checks = None
    if check:
        w_, g_, g0_ = ws[:done], gs[:done], g0s[:done]
        gf = st.grad(w_)
        root_err = norm(g0_ - gf)
        checks = torch.stack(
            [
                norm(g_ - gf),  # Lemma 1: ||g - grad F(w)||
                3 * root_err + 2 * norm(gf),  # <= 3 ||g0 - grad F(w)|| + 2 ||grad F(w)||
                norm(w_ - alpha_lemma * gf - st.w_star),  # Lemma 2 at alpha = mu / (2 L^2)
                lemma2_factor * errors[:done],  # <= sqrt(1 - mu^2 / (4 L^2)) ||w - w*||
                root_err,  # ||grad f_D0(w) - grad F(w)||
            ],
            dim=1,
        )
    return Trajectory(
        errors=errors.cpu().numpy(),
        status=status,
        checks=None if checks is None else checks.cpu().numpy(),
    )


def oracle_for(rows: Tensor, byz: Tensor, defense: Any, ctx: DefenseContext) -> Callable[[Tensor], Aggregate]:
    """What the defense would output with ``cand`` as the Byzantine rows (update convention);
    run on a copy, so the defense's state never changes."""

    def oracle(cand: Tensor) -> Aggregate:
        trial = rows.clone()
        trial[byz] = cand.to(trial)
        agg = copy.deepcopy(defense)(-trial, ctx)
        return Aggregate(vector=-agg.vector, weights=agg.weights, stats=agg.stats)

    return oracle
