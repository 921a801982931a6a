"""Mimic: every Byzantine client copies one honest row, over-representing one client's data.

Paper: Karimireddy, He, Jaggi, "Byzantine-Robust Learning on Heterogeneous Datasets via Bucketing",
ICLR 2022

All Byzantine clients copy one honest row: ``target`` (an index into the honest rows) or by
default the honest row farthest from the honest mean mu (ties: the lowest index). Every row sent
is a genuine honest update, so no outlier filter can flag it, yet over-representing one client
biases the aggregate towards its data under heterogeneity; bucketing/NNM pre-aggregation restores
the robust rules' guarantees.

Default ``target = None`` (farthest honest row from mu) is robustfl's own choice, not the authors': their
code (epfml/byzantine-robust-noniid-optimizer, ``MimicVariantAttacker``, ``--mimic-warmup 1``)
picks argmax_i <u_i, z>, z one power-iteration step of the honest rows' covariance from a seeded
Gaussian start, and keeps that target after the warm-up (docs/attacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge


@dataclass
class Mimic(AttackBase):
    target: int | None = None
    knowledge: Knowledge = field(default=Knowledge.OWN | Knowledge.HONEST, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.target is not None:
            self.target = params.number("attack mimic", "target", self.target, low=0, integer=True)

    def __call__(self, ctx: AttackContext) -> Tensor:
        if ctx.honest is None or ctx.honest.shape[0] == 0:
            raise InputError("attack mimic: needs the honest rows (HONEST knowledge)")
        h = ctx.honest.to(ctx.own)
        if self.target is None:
            idx = int(torch.argmax(torch.linalg.vector_norm(h - h.mean(0), dim=1)))
        elif self.target < h.shape[0]:
            idx = self.target
        else:
            n = h.shape[0]
            raise InputError(f"attack mimic: target {self.target} is out of range for {n} honest rows")
        self.last_stats = {"target": float(idx)}
        return h[idx].expand_as(ctx.own).clone()
