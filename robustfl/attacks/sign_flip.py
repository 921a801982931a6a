"""Sign flipping: send the negated honest update.

``rows = -s * own`` (``scale`` s = 1), or with ``source = "mean"`` every attacker sends
``-s * mu``, mu the coordinate-wise mean of the rows it knows (the honest rows where HONEST is
granted, else its own). Against the mean the aggregate moves by -(1 + s) f/K times the Byzantine
mean; robust rules bound it when f-hat >= f. Classic baseline (e.g. Li et al., RSA, AAAI 2019;
Karimireddy et al. 2021).

Defaults (docs/attacks.md): ``scale = 1``, ``source = "own"``: each attacker sends the negation of
its own update, as in Xie et al.'s Zeno code (xcgoner/zeno ``signflip_attack``: ``-v[0]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..types import AttackContext, Knowledge
from ._common import known_rows


@dataclass
class SignFlip(AttackBase):
    scale: float = 1.0
    source: str = "own"
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)

    @property
    def per_client(self) -> bool:
        return self.source == "own"  # "mean" averages the rows the attackers know

    def __post_init__(self) -> None:
        self.scale = params.number("attack sign_flip", "scale", self.scale, low=0)
        self.source = params.choice("attack sign_flip", "source", self.source, ("own", "mean"))

    def __call__(self, ctx: AttackContext) -> Tensor:
        if self.source == "own":
            return -self.scale * ctx.own
        mu = known_rows(ctx).mean(0)
        return (-self.scale * mu).expand_as(ctx.own).clone()
