"""ROP, relocated orthogonal perturbation: rows at the server's reference point plus a perturbation
orthogonal to it, aimed at centered clipping.

Paper: Özfatura, Özfatura, Küpçü, Gündüz, "Byzantines Can Also Learn From History: Fall of Centered
Clipping in Federated Learning", IEEE TIFS 19, 2024 (arXiv 2208.09894)

Every attacker sends ``loc + z * unit(sin(theta) * u + cos(theta) * r_hat)`` with, for g the previous
round's aggregate and mu the coordinate-wise mean of the rows the attacker knows (honest where
granted, else its own):

* ``loc = pi * g + (1 - pi) * mu`` (the relocation: ``pi = 1`` puts the rows at the previous
  aggregate, which is centered clipping's reference point v);
* ``r = lam * g + (1 - lam) * mu`` (the direction the perturbation is made orthogonal to),
  ``r_hat = unit(r)``;
* ``u = unit(1 - (1 . r_hat) r_hat)``: the all-ones vector with its component along r removed
  (the authors' deterministic start; no randomness);
* ``theta = angle`` in degrees (270: purely orthogonal, on the -u side); ``z`` the perturbation's
  length, by default the authors' ``z = Phi^-1((K - f - s)/(K - f))``, ``s = floor(K/2 + 1) - f``
  (0 where that quantile is not in (0, 1)); it can be negative, which flips the perturbation.

With no previous aggregate (the first round of a run) the authors' code takes g = 0 for the location
and r = mu, so ``loc = (1 - pi) * mu``; robustfl does the same. g is recovered from the global
models the attack sees: ``g = (w_t - w_{t-1}) / server_lr``, exact for the ``w + server_lr * A``
server step (FedAvg, FedProx) when the defense's output is the whole step (centered clipping's v is
then g). The attack keeps w_{t-1} in its instance: a call at round 0 (or ``round = None``) starts a
run afresh; a repeated call for the same round reuses the same g; a round that does not follow the
last one by 1 (the attackers were not sampled in between) or a global model of another size has no
g, and takes the first-round rule.

Not robustfl's ``orthogonal`` with other parameters: ``orthogonal`` sends
``norm_factor * ||mu|| * (cos(phi) mu_hat + sin(phi) u_rand)`` -- centred at the origin, rotated
about mu alone, with a length proportional to ||mu|| and a random orthogonal direction -- while ROP
is relocated to pi g + (1 - pi) mu, rotated about a mix with the previous aggregate, and has an
absolute length z; no setting of one gives the other's rows (docs/attacks.md,
tests/attacks/test_issue16_attacks.py).

Needs ``ctx.global_model`` (an InputError names it otherwise). ``last_stats``: ``z`` and
``history`` (1 when the previous aggregate was known this round, else 0).

Defaults (docs/attacks.md): the paper's defaults were not available here; the authors' code
(CRYPTO-KU/FL-Byzantine-Library ``config/attack.py``, ``attacks/rop.py``) sets ``angle = 270``,
``pi = 1``, ``lam = 0.9`` and ``z`` by the formula above; ``server_lr = 1`` is robustfl's
``federation.server_lr`` default (their server has no such step size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge
from ._common import known_rows, num_clients, orthogonalise, unit


def default_z(k: int, f: int) -> float:
    """The authors' z for K clients of which f are Byzantine (0 where the quantile is not in (0, 1))."""
    n = k - f
    if n < 1:
        return 0.0
    s = math.floor(k / 2 + 1) - f
    q = (n - s) / n
    return NormalDist().inv_cdf(q) if 0 < q < 1 else 0.0


@dataclass
class ROP(AttackBase):
    z: float | None = None
    angle: float = 270.0
    pi: float = 1.0
    lam: float = 0.9
    server_lr: float = 1.0
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _round: int | None = field(default=None, init=False, repr=False, compare=False)
    _w: Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _prev: Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.z is not None:
            self.z = params.number("attack rop", "z", self.z)
        self.angle = params.number("attack rop", "angle", self.angle, low=0, high=360)
        self.pi = params.number("attack rop", "pi", self.pi, low=0, high=1)
        self.lam = params.number("attack rop", "lam", self.lam, low=0, high=1)
        self.server_lr = params.number("attack rop", "server_lr", self.server_lr, low=0, strict_low=True)

    def previous_aggregate(self, ctx: AttackContext) -> Tensor | None:
        """g = (w_t - w_{t-1}) / server_lr, or None where the previous global model is not known."""
        w = ctx.global_model
        p = ctx.own.shape[1]
        if w is None:
            raise InputError(
                "attack rop: needs the global model (ctx.global_model) to follow the previous aggregate"
            )
        if tuple(w.shape) != (p,):
            raise InputError(f"attack rop: global model has shape {tuple(w.shape)}, expected ({p},)")
        t = 0 if ctx.round is None else int(ctx.round)
        if t == 0 or self._round is None or self._w is None:
            self._round, self._w, self._prev = t, w.detach().clone(), None
        elif t == self._round + 1 and self._w.shape == w.shape:
            self._round, self._w, self._prev = t, w.detach().clone(), self._w
        elif t != self._round or self._w.shape != w.shape:
            self._round, self._w, self._prev = t, w.detach().clone(), None
        if self._prev is None:
            return None
        return ((self._w - self._prev) / self.server_lr).to(ctx.own)

    def __call__(self, ctx: AttackContext) -> Tensor:
        g = self.previous_aggregate(ctx)
        f = ctx.own.shape[0]
        z = default_z(num_clients(ctx), f) if self.z is None else self.z
        mu = known_rows(ctx).mean(0)
        if g is None:
            loc, ref = (1.0 - self.pi) * mu, mu
        else:
            loc = self.pi * g + (1.0 - self.pi) * mu
            ref = self.lam * g + (1.0 - self.lam) * mu
        r_hat = unit(ref)
        u = unit(orthogonalise(torch.ones_like(mu), r_hat))
        theta = math.radians(self.angle)
        pert = unit(math.sin(theta) * u + math.cos(theta) * r_hat)
        self.last_stats = {"z": z, "history": 0.0 if g is None else 1.0}
        return (loc + z * pert).expand_as(ctx.own).clone()
