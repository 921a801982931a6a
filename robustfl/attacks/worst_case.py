"""Worst case: search for the Byzantine rows that move the defense's output farthest from the
honest mean, instead of trusting a fixed list of attacks.

Maximises, with the defense itself as the oracle,

    kappa_hat(B) = || A(H, B) - mean(H) ||^2 / ((1/h) sum_i || H_i - mean(H) ||^2),

the kappa the rule exhibits on the honest rows H (the (f, kappa)-robustness of Allouah et al.,
"Fixing by Mixing", AISTATS 2023, Definition 1; the square of robustfl's ``aggregation_error``).
The search starts from every other attack in the catalogue with its defaults, then tries copies of
single honest rows (the lower-bound construction), rows along +-the honest mean, the coordinate-wise
std, the top principal directions and seeded random directions at log-spaced distances (refined
around the best), and ends with gradient ascent through the rule where it is differentiable. It is
at least as strong as every fixed attack it starts from. ``budget``: the defense evaluations per
round (default 200; each costs one defense call on a copy of the round's rows, so a round costs
about ``budget`` aggregations -- set it lower for big models; ``robustfl kappa`` uses 1000 on its
small rows).
Deterministic from the round's attack stream. Needs ORACLE and HONEST (full knowledge).
``last_stats``: ``kappa`` (the best kappa_hat), ``evaluations``, ``best_fixed`` (the best fixed
attack's kappa_hat) and ``gain`` (kappa / best_fixed).

robustfl's own construction (no paper proposes this exact search); the objective is ByzFL's
"optimal" attacks' (LPD-EPFL/byzfl) deviation from the honest mean, squared and normalised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge
from ._common import generator
from ._search import Found, search

__all__ = ["Found", "WorstCase", "search"]


@dataclass
class WorstCase(AttackBase):
    budget: int = 200
    gradient: bool = True
    knowledge: Knowledge = field(
        default=Knowledge.OWN | Knowledge.HONEST | Knowledge.ORACLE, init=False, repr=False
    )
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.budget = int(params.number("attack worst_case", "budget", self.budget, low=1, integer=True))
        self.gradient = params.boolean("attack worst_case", "gradient", self.gradient)

    def __call__(self, ctx: AttackContext) -> Tensor:
        if ctx.oracle is None or ctx.honest is None or ctx.honest.shape[0] == 0:
            raise InputError("attack worst_case: needs the oracle and the honest rows (full knowledge)")
        from . import registry

        oracle = ctx.oracle
        names = [n for n, origin in registry.items() if origin == "built-in" and n != "worst_case"]
        found = search(
            lambda rows: oracle(rows).vector,
            ctx.honest.to(ctx.own),
            ctx.own,
            budget=self.budget,
            generator=generator(ctx),
            attacks=names,
            num_clients=ctx.num_clients,
            reference=ctx.reference,
            global_model=ctx.global_model,
            differentiable=self.gradient,
        )
        best_fixed = max(found.fixed.values(), default=0.0)
        self.last_stats = {
            "kappa": found.kappa,
            "evaluations": float(found.evaluations),
            "best_fixed": best_fixed,
            "gain": found.kappa / best_fixed if best_fixed > 0 else float("inf"),
        }
        return found.rows.to(ctx.own).detach()
