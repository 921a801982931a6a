"""Fang et al.'s full-knowledge attack on the median and trimmed mean: values just beyond the honest
extremes, against the honest direction.

Paper: Fang, Cao, Jia, Gong, "Local Model Poisoning Attacks to Byzantine-Robust Federated Learning",
USENIX Security 2020

From the honest rows u_i (HONEST): per coordinate j, ``s_j = sign(sum_i u_ij)`` (the direction the
aggregate would move without attack); ``e_j = min_i u_ij`` if s_j > 0 else ``max_i u_ij``; each
attacker k sends ``e_j / b_kj`` if ``s_j e_j > 0`` else ``e_j * b_kj``, with
``b = 1 + torch.rand((f, P), generator)`` (b ~ U[1, 2] per attacker and coordinate, one draw in
that order). Every Byzantine value lies beyond the honest extreme on the side opposite to s_j, so
coordinate-wise rules are pulled against the honest direction by up to the honest spread; the
median's and trimmed mean's guarantees (f-hat >= f) bound the shift by that spread, not below.

Defaults (docs/attacks.md): b ~ U[1, 2] (b = 2 in Fang et al.'s setting) matches the Trim attack of
the FLTrust/Fang code lineage (``random_12 = 1. + uniform``) and ``b = 2`` in
vrt1shjwlkr/NDSS21-Model-Poisoning; there is no parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge
from ._common import generator, rand


def fang_trim_rows(honest: Tensor, f: int, g: torch.Generator) -> Tensor:
    """The (f, P) crafted rows for the honest rows ``honest`` (K - f, P)."""
    s = torch.sign(honest.sum(0))
    e = torch.where(s > 0, honest.min(0).values, honest.max(0).values)
    b = 1.0 + rand(g, (f, honest.shape[1]), honest)
    return torch.where(s * e > 0, e / b, e * b)


@dataclass
class FangTrim(AttackBase):
    knowledge: Knowledge = field(default=Knowledge.OWN | Knowledge.HONEST, init=False, repr=False)

    def __call__(self, ctx: AttackContext) -> Tensor:
        if ctx.honest is None or ctx.honest.shape[0] == 0:
            raise InputError("attack fang_trim: needs the honest rows (HONEST knowledge)")
        return fang_trim_rows(ctx.honest.to(ctx.own), ctx.own.shape[0], generator(ctx))
