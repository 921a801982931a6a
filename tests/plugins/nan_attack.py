"""Test-only attack (loaded with --plugin): every Byzantine row is NaN."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robustfl.types import AttackContext, Knowledge


@dataclass
class NaNAttack:
    knowledge: Knowledge = Knowledge.OWN

    def __call__(self, ctx: AttackContext) -> torch.Tensor:
        return torch.full_like(ctx.own, float("nan"))


ATTACKS = {"nan_rows": NaNAttack}
