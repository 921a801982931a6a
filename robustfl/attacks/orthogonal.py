"""Orthogonal (and rotated) perturbation: a direction the honest mean does not see.

mu = coordinate-wise mean of the rows the attacker knows (honest where granted, else own). One
Gaussian draw z from the attack's generator is Gram-Schmidt-orthogonalised against mu (two passes,
for accuracy) to the unit vector u_perp; every attacker sends

    ``norm_factor * ||mu|| * (cos(phi) * mu_hat + sin(phi) * u_perp)``,

phi = ``angle`` in degrees (default None = 90: purely orthogonal). Orthogonal rows have zero inner
product with the honest direction, so cosine-trust rules (FLTrust: ReLU(0) = 0) give them no weight
while distance rules see rows of honest size; intermediate angles rotate the rows towards mu.
When ||mu|| <= eps the rows are zero.

Not ROP (Özfatura et al., TIFS 2024; robustfl's ``rop``): ROP relocates its rows to
``pi * g + (1 - pi) * mu`` (g the previous aggregate), rotates about ``lam * g + (1 - lam) * mu``,
starts from the all-ones vector and has an absolute length z; these rows are centred at the origin,
rotate about mu alone and scale with ||mu||. No parameters of one give the other (docs/attacks.md,
"ROP is not orthogonal with other parameters"; tests/attacks/test_issue16_attacks.py).

Defaults (docs/attacks.md): no single paper defines this attack; ``norm_factor = 1`` and
``angle = 90`` are robustfl's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..types import AttackContext, Knowledge
from ._common import generator, known_rows, orthogonalise, randn, unit


@dataclass
class Orthogonal(AttackBase):
    norm_factor: float = 1.0
    angle: float | None = None
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)

    def __post_init__(self) -> None:
        self.norm_factor = params.number("attack orthogonal", "norm_factor", self.norm_factor, low=0)
        if self.angle is not None:
            self.angle = params.number("attack orthogonal", "angle", self.angle, low=0, high=180)

    def __call__(self, ctx: AttackContext) -> Tensor:
        mu = known_rows(ctx).mean(0)
        mu_hat = unit(mu)
        z = orthogonalise(randn(generator(ctx), (mu.shape[0],), mu), mu_hat)
        phi = math.radians(90.0 if self.angle is None else self.angle)
        scale = self.norm_factor * torch.linalg.vector_norm(mu)
        row = scale * (math.cos(phi) * mu_hat + math.sin(phi) * unit(z))
        return row.expand_as(ctx.own).clone()
