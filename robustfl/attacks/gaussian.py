"""Gaussian noise: rows drawn i.i.d. from N(m, std^2 I).

``mean = "zero"`` (default): m = 0; ``mean = "honest"``: m = mu, the coordinate-wise mean of the
known rows (honest where granted, else own). ``std`` default 200 (see Defaults below).
An untargeted baseline: FedAvg's error grows like f/K * std * sqrt(P); any rule that bounds a
row's influence by its distance or cosine (Krum, median, FLTrust) filters it.

Defaults (docs/attacks.md): ``std = 200`` with mean 0 as in Xie et al.'s Zeno code
(xcgoner/icml2019_zeno ``byzantine.py``: ``mx.nd.random.normal(0, 200)``). FoundationFL (Fang et
al., NDSS 2025, Section VI-A) states "a mean of 0 and a variance of 200", i.e. std = sqrt(200)
~ 14.14: pass ``std = math.sqrt(200)`` to follow that text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..types import AttackContext, Knowledge
from ._common import generator, known_rows, randn


@dataclass
class Gaussian(AttackBase):
    std: float = 200.0
    mean: str = "zero"
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)

    @property
    def per_client(self) -> bool:
        return self.mean != "honest"  # noise alone; "honest" centres it on the known rows' mean

    def __post_init__(self) -> None:
        self.std = params.number("attack gaussian", "std", self.std, low=0)
        self.mean = params.choice("attack gaussian", "mean", self.mean, ("zero", "honest"))

    def __call__(self, ctx: AttackContext) -> Tensor:
        noise = self.std * randn(generator(ctx), tuple(ctx.own.shape), ctx.own)
        return noise + known_rows(ctx).mean(0) if self.mean == "honest" else noise
