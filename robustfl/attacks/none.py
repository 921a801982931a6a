"""No attack: the Byzantine clients send what they would have sent honestly.

``rows = own``. The baseline cell of every matrix (under ``none`` the sampled Byzantine clients
behave honestly, so a defense's drift here is its price without an adversary).

No parameters (docs/attacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from ..capabilities import AttackBase
from ..types import AttackContext, Knowledge


@dataclass
class NoAttack(AttackBase):
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    honest = True  # the designated clients are not counted as Byzantine

    @property
    def per_client(self) -> bool:
        return True  # each designated client sends its own honest row

    def __call__(self, ctx: AttackContext) -> Tensor:
        return ctx.own.clone()
