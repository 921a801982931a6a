"""Min-Max (Shejwalkar & Houmansadr, NDSS 2021).

Every attacker sends ``m = mu + gamma * p`` with mu, sigma the mean and population std of the
known rows u_i (honest where HONEST is granted, else own), ``perturbation`` p one of unit
(-mu/||mu||), sign (-sign(mu)) or std (-sigma, default), and gamma the largest value with

    max_i ||m - u_i||^2 <= D = max_{i,j} ||u_i - u_j||^2,

i.e. m is no farther from any known row than the two farthest known rows are from each other.
Closed form (the paper bisects; not needed, and no cap on gamma): with a_i = ||mu - u_i||^2,
b_i = <p, mu - u_i>, gamma = min_i (-b_i + sqrt(b_i^2 + ||p||^2 (D - a_i))) / ||p||^2
(D >= a_i always: mu lies in the hull of the rows). When ||p|| = 0 the attackers send mu.
Distance-based rules (Krum, Bulyan) cannot tell m from an honest outlier; the harm is gamma * p.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..defenses._util import sq_distances
from ..types import AttackContext, Knowledge
from ._common import EPS, PERTURBATIONS, check_choice, known_rows, mean_std
from ._common import perturbation as direction


@dataclass
class MinMax:
    perturbation: str = "std"
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.perturbation = check_choice("min_max", "perturbation", self.perturbation, PERTURBATIONS)

    def __call__(self, ctx: AttackContext) -> Tensor:
        u = known_rows(ctx)
        mu, sigma = mean_std(u)
        p = direction(self.perturbation, mu, sigma)
        pp = p @ p
        if float(pp) <= EPS**2:
            gamma = torch.zeros((), dtype=mu.dtype, device=mu.device)
        else:
            dev = mu - u
            a, b = (dev * dev).sum(1), dev @ p
            big_d = sq_distances(u).max()
            gamma = ((-b + torch.sqrt(b * b + pp * (big_d - a).clamp_min(0))) / pp).min()
        self.last_stats = {"gamma": float(gamma)}
        return (mu + gamma * p).expand_as(ctx.own).clone()
