"""Test-only attack (loaded with --plugin): the Byzantine clients send a random model.

On the model basis FedSim sees v = w + u = a fresh N(0, scale^2) draw, unrelated to w.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robustfl.types import AttackContext, Knowledge


@dataclass
class RandomModel:
    scale: float = 1.0
    knowledge: Knowledge = Knowledge.OWN

    def __call__(self, ctx: AttackContext) -> torch.Tensor:
        assert ctx.global_model is not None
        v = torch.randn(ctx.own.shape, generator=ctx.generator, dtype=ctx.own.dtype) * self.scale
        return v - ctx.global_model  # the row that makes the client's model equal v


ATTACKS = {"random_model": RandomModel}
