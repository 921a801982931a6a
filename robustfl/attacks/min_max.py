"""Min-Max: mu + gamma * p, gamma the largest keeping the malicious row's farthest distance within the
honest rows' largest pairwise distance.

Paper: Shejwalkar, Houmansadr, "Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
Defenses for Federated Learning", NDSS 2021

Every attacker sends ``m = mu + gamma * p`` with mu, sigma the mean and std (``ddof``, default 0:
population) of the known rows u_i (honest where HONEST is granted, else own), ``perturbation`` p
one of unit (-mu/||mu||), sign (-sign(mu)) or std (-sigma, default), and gamma the largest value
with

    max_i ||m - u_i||^2 <= D = max_{i,j} ||u_i - u_j||^2,

i.e. m is no farther from any known row than the two farthest known rows are from each other.
Closed form (the paper bisects; not needed): with a_i = ||mu - u_i||^2, b_i = <p, mu - u_i>,
gamma = min_i (-b_i + sqrt(b_i^2 + ||p||^2 (D - a_i))) / ||p||^2 (D >= a_i always: mu lies in the
hull of the rows), then ``min(gamma, gamma_max)`` when ``gamma_max`` is set. When ||p|| = 0 the
attackers send mu. Distance-based rules (Krum, Bulyan) cannot tell m from an honest outlier; the
harm is gamma * p.

Defaults and their sources (docs/attacks.md): ``perturbation = "std"`` is what the authors'
released CIFAR-10 notebooks set (vrt1shjwlkr/NDSS21-Model-Poisoning, ``dev_type = 'std'``; their
FEMNIST notebooks pass ``'sign'``; ``'unit_vec'`` is only the functions' unused keyword default).
``gamma_max = None`` (uncapped) and ``ddof = 0`` are robustfl's defaults. The authors' bisection
starts at gamma_init (10 on CIFAR-10, 50 on FEMNIST) and can only reach values below 2 gamma_init,
with ``torch.std`` (ddof 1): ``gamma_max = 20, ddof = 1`` reproduces their CIFAR-10 search to its
1e-5 tolerance. Uncapped, ddof does not change m (it rescales p, and gamma scales back), only the
reported gamma.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..kernels import sq_distances
from ..types import AttackContext, Knowledge
from ._common import EPS, PERTURBATIONS, known_rows, mean_std
from ._common import perturbation as direction


@dataclass
class MinMax(AttackBase):
    perturbation: str = "std"
    gamma_max: float | None = None
    ddof: int = 0
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.perturbation = params.choice("attack min_max", "perturbation", self.perturbation, PERTURBATIONS)
        if self.gamma_max is not None:
            self.gamma_max = params.number("attack min_max", "gamma_max", self.gamma_max, low=0)
        if isinstance(self.ddof, bool) or not isinstance(self.ddof, int) or self.ddof not in (0, 1):
            raise params.error("attack min_max", "ddof", "0 or 1", self.ddof)

    def __call__(self, ctx: AttackContext) -> Tensor:
        u = known_rows(ctx)
        mu, sigma = mean_std(u, self.ddof)
        p = direction(self.perturbation, mu, sigma)
        pp = p @ p
        if float(pp) <= EPS**2:
            gamma = torch.zeros((), dtype=mu.dtype, device=mu.device)
        else:
            dev = mu - u
            a, b = (dev * dev).sum(1), dev @ p
            big_d = sq_distances(u).max()
            gamma = ((-b + torch.sqrt(b * b + pp * (big_d - a).clamp_min(0))) / pp).min()
            if self.gamma_max is not None:
                gamma = gamma.clamp_max(self.gamma_max)
        self.last_stats = {"gamma": float(gamma)}
        return (mu + gamma * p).expand_as(ctx.own).clone()
