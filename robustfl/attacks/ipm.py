"""Inner-product manipulation, IPM: every attacker sends -epsilon * mu, mu the mean of the rows it
knows.

Paper: Xie, Koyejo, Gupta, "Fall of Empires: Breaking Byzantine-tolerant SGD by Inner Product
Manipulation", UAI 2020

Every attacker sends ``-epsilon * mu``, mu the coordinate-wise mean of the rows it knows (honest
rows where HONEST is granted, else its own). Against the plain mean the aggregate's inner product
with mu turns negative once epsilon > (K - f)/f, which is why epsilon = 100 breaks FedAvg; a small
epsilon (0.1, the default) keeps the rows near the origin, close to the honest rows, so rules that
select or weight by distance (Krum, median when f is large) keep them and the aggregate shrinks
or flips. Robust rules bound the damage when f-hat >= f and the honest spread is small.

Defaults (docs/attacks.md): ``epsilon = 0.1`` as in Karimireddy et al.'s code
(epfml/byzantine-robust-noniid-optimizer, ``IPMAttack(epsilon=0.1)``); the IPM paper's own text and
code were not available to check. ByzFL's ``InnerProductManipulation`` defaults to tau = 2.0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..types import AttackContext, Knowledge
from ._common import known_rows


@dataclass
class IPM(AttackBase):
    epsilon: float = 0.1
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)

    def __post_init__(self) -> None:
        self.epsilon = params.number("attack ipm", "epsilon", self.epsilon, low=0)

    def __call__(self, ctx: AttackContext) -> Tensor:
        return _line(ctx)(self.epsilon)

    def along(self, ctx: AttackContext, parameter: str) -> Callable[[float], Tensor] | None:
        return _line(ctx) if parameter == "epsilon" else None


def _line(ctx: AttackContext) -> Callable[[float], Tensor]:
    """epsilon -> the f rows -epsilon mu (the mean of the rows known, computed once)."""
    mu = known_rows(ctx).mean(0)
    return lambda epsilon: (-epsilon * mu).expand_as(ctx.own).clone()
