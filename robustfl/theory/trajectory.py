"""One trajectory of the theorem's setting, replayed with the library's attack and defense.

The rounds run through the library's one round loop (:func:`robustfl.simulation.round.run_rounds`)
configured by :class:`~robustfl.theory.stages.TheoremStages`: every client's row is
``-grad F_k(w)`` (:class:`~robustfl.theory.setting.Setting`); the attack (the library's, on the
update rows, reference = the server's update) replaces the Byzantine rows; ``g`` = the defense's
aggregate of the negated rows (gradient convention, with reference ``g0 = grad f_D0(w)``); the
server steps ``w <- w - alpha g``. A run diverges when ``||w||`` passes
``DIVERGENCE_FACTOR`` times ``||w0 - w*||`` or is not finite. On FLTrust's trajectories the lemma
checks' columns are computed after the loop (:class:`Trajectory`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..capabilities import AttackBase, DefenseBase
from ..simulation.round import run_rounds
from ..types import Knowledge
from .setting import Setting
from .stages import TheoremStages

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
    attack: AttackBase,
    defense: DefenseBase,
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
    defense.reset()
    stages = TheoremStages(
        st, attack, defense, f=f, f_hat=f_hat, alpha=alpha, root=root, attack_gen=attack_gen,
        defense_gen=defense_gen, granted=granted, rounds=rounds,
        limit=DIVERGENCE_FACTOR * float(norm(st.w0 - st.w_star)),
    )
    _, done = run_rounds(stages, st.w0, rounds)
    status = stages.status
    ws, gs, g0s = stages.ws[: done + 1], stages.gs, stages.g0s
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
