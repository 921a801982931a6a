"""ALIE, A Little Is Enough: every attacker sends mu + z * sigma, inside the honest spread per
coordinate.

Paper: Baruch, Baruch, Goldberg, "A Little Is Enough: Circumventing Defenses For Distributed
Learning", NeurIPS 2019

Every attacker sends ``mu + z * sigma``: mu, sigma the coordinate-wise mean and population std
(ddof 0) of the rows it knows (honest where HONEST is granted, else its own). Default z from the
paper: ``s = floor(K/2 + 1) - f`` supporters needed for a majority, ``z = Phi^-1((K - s)/K)``; when
s <= 0, ``z = Phi^-1((K - 1)/K)``. The rows stay inside the honest spread per coordinate, so
median-, trimmed-mean- and Krum-type rules keep them; the bias z * sigma per coordinate is below
the rules' detection threshold yet adds up over rounds. No robust rule's guarantee excludes it
beyond its sigma-proportional error term.

Defaults (docs/attacks.md): ``z = None`` is the paper's formula above (robustfl's choice). The authors'
code (moranant/attacking_distributed_learning) instead takes z from the command line (``--num_std``,
default 1.5), uses the population std (``np.var(...) ** 0.5``, as here) and sends ``mu - z sigma``:
pass a negative z for that sign.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..types import AttackContext, Knowledge
from ._common import known_rows, mean_std, num_clients


def default_z(k: int, f: int) -> float:
    """The paper's z for K clients of which f are Byzantine (0 when K < 2: no quantile exists)."""
    if k < 2:
        return 0.0
    s = math.floor(k / 2 + 1) - f
    q = (k - s) / k if s > 0 else (k - 1) / k
    return NormalDist().inv_cdf(q) if 0 < q < 1 else 0.0


@dataclass
class ALIE(AttackBase):
    z: float | None = None
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.z is not None:
            self.z = params.number("attack alie", "z", self.z)

    def __call__(self, ctx: AttackContext) -> Tensor:
        f = ctx.own.shape[0]
        z = default_z(num_clients(ctx), f) if self.z is None else self.z
        self.last_stats = {"z": z}
        return _line(ctx)(z)

    def along(self, ctx: AttackContext, parameter: str) -> Callable[[float], Tensor] | None:
        return _line(ctx) if parameter == "z" else None


def _line(ctx: AttackContext) -> Callable[[float], Tensor]:
    """z -> the f rows mu + z sigma (the statistics of the rows known, computed once)."""
    mu, sigma = mean_std(known_rows(ctx))
    return lambda z: (mu + z * sigma).expand_as(ctx.own).clone()
