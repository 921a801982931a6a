"""The adaptive attack on FLTrust: unit directions optimised to pull FLTrust's aggregate against its
own direction.

Paper: Cao, Fang, Liu, Gong, "FLTrust: Byzantine-robust Federated Learning via Trust Bootstrapping",
NDSS 2021 (section on adaptive attacks)

FLTrust (docs/maths.md): with server update g0, ``TS_i = ReLU(cos(u_i, g0))``, rows rescaled to
``||g0||``, ``g = sum_i TS_i ||g0|| u_i/||u_i|| / sum_j TS_j`` (zero when sum TS <= eps). Since the
magnitudes are normalised the attackers choose unit directions e_i and send ``||g0|| e_i``. With
g the aggregate without attack (the Byzantine clients sending their own rows), s = sign(g) and
g'(e) the aggregate with the crafted rows, they maximise ``h(e) = s^T (g - g'(e))``:

* ``variant = "gradient"`` (default): projected gradient ascent ``e_i <- normalise(e_i + lr *
  grad_e h)`` for ``steps`` V (default 10, ``lr`` 0.01) with torch.autograd through the
  differentiable :func:`fltrust_aggregate`, from ``normalise(t_i + c_i g0_hat)``, t_i the
  normalised fang_trim rows, ``c_i = max(0, -a_i + 0.1 sqrt(1 - a_i^2) / sqrt(0.99))``,
  a_i = <t_i, g0_hat> (the smallest tilt giving cosine >= 0.1 with g0: a row with non-positive
  cosine has zero trust and zero gradient); g0_hat itself where the tilt is degenerate
  (a_i = -1). The best iterate (largest h, the start included) is sent.
* ``variant = "angle"``: all attackers send ``||g0|| (cos(phi) g0_hat + sin(phi) u_hat)``, u_hat
  the unit component of -s orthogonal to g0 (random orthogonal from the generator if ~0), phi on
  the grid 0, 0.5, ..., 89.5 degrees maximising h (evaluated in closed form: the trust is cos phi).

Needs the reference g0 and the honest rows. FLTrust's bound (Theorem 1) holds for any Byzantine
rows, so the attack can at most reach it; ``last_stats``: ``objective``, ``start_objective``
(gradient) or ``angle`` (degrees).

Defaults (docs/attacks.md): ``steps = 10``, ``lr = 0.01``, ``variant = "gradient"`` are robustfl's own; the
FLTrust paper's text and the authors' code were not available to check them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge
from ._common import EPS, generator, orthogonalise, randn, unit
from .fang_trim import fang_trim_rows

ANGLES_DEG = torch.arange(180, dtype=torch.float64) * 0.5


def trust_parts(rows: Tensor, g0: Tensor) -> tuple[Tensor, Tensor]:
    """(sum_i TS_i * rescaled u_i, sum_i TS_i) for FLTrust; invalid rows get zero trust."""
    g0_norm = torch.linalg.vector_norm(g0)
    norms = torch.linalg.vector_norm(rows, dim=1)
    valid = torch.isfinite(norms) & (norms > EPS)
    safe = torch.where(valid[:, None], rows, torch.zeros_like(rows))
    inv = torch.where(valid, 1.0 / norms.clamp_min(EPS), torch.zeros_like(norms))
    ts = torch.relu((safe @ g0) * inv / g0_norm)
    return (ts * inv * g0_norm) @ safe, ts.sum()


def fltrust_aggregate(rows: Tensor, g0: Tensor) -> Tensor:
    """FLTrust's aggregate of ``rows`` (K, P) given the server update ``g0`` (P,), differentiable."""
    if float(torch.linalg.vector_norm(g0)) <= EPS:
        return torch.zeros_like(g0)
    num, total = trust_parts(rows, g0)
    return num / total if float(total.detach()) > EPS else torch.zeros_like(g0)


def _normalise(e: Tensor) -> Tensor:
    return e / torch.linalg.vector_norm(e, dim=1, keepdim=True).clamp_min(EPS)


@dataclass
class FLTrustAdaptive(AttackBase):
    steps: int = 10
    lr: float = 0.01
    variant: str = "gradient"
    knowledge: Knowledge = field(
        default=Knowledge.OWN | Knowledge.HONEST | Knowledge.REFERENCE, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        c = "attack fltrust_adaptive"
        self.steps = params.number(c, "steps", self.steps, low=0, integer=True)
        self.lr = params.number(c, "lr", self.lr, low=0, strict_low=True)
        self.variant = params.choice(c, "variant", self.variant, ("gradient", "angle"))

    def __call__(self, ctx: AttackContext) -> Tensor:
        if ctx.honest is None or ctx.reference is None:
            raise InputError("attack fltrust_adaptive: needs the honest rows and the server reference update")
        own = ctx.own.detach()
        honest, g0 = ctx.honest.detach().to(own), ctx.reference.detach().to(own)
        g0_norm = float(torch.linalg.vector_norm(g0))
        if not math.isfinite(g0_norm) or g0_norm <= EPS:
            self.last_stats = {"objective": 0.0}
            return torch.zeros_like(own)
        g0_hat = g0 / g0_norm
        g = fltrust_aggregate(torch.cat([own, honest]), g0)
        s = torch.sign(g)
        if self.variant == "angle":
            return self._angle(ctx, own, honest, g0, g0_hat, g, s)
        t = _normalise(fang_trim_rows(honest, own.shape[0], generator(ctx)))
        a = t @ g0_hat
        c = (-a + 0.1 * torch.sqrt((1 - a * a).clamp_min(0)) / math.sqrt(0.99)).clamp_min(0)
        tilt = t + c[:, None] * g0_hat
        degenerate = torch.linalg.vector_norm(tilt, dim=1) <= 1e-6
        e = torch.where(degenerate[:, None], g0_hat.expand_as(tilt), _normalise(tilt))
        best_h, best_e, start_h = -math.inf, e, 0.0
        with torch.enable_grad():
            for it in range(self.steps + 1):
                e_var = e.clone().requires_grad_(True)
                h = s @ (g - fltrust_aggregate(torch.cat([g0_norm * e_var, honest]), g0))
                h_val = float(h.detach())
                if it == 0:
                    start_h = h_val
                if h_val > best_h:
                    best_h, best_e = h_val, e
                if it == self.steps or not h.requires_grad:
                    break
                (grad,) = torch.autograd.grad(h, e_var)
                e = _normalise(e + self.lr * grad)
        self.last_stats = {"objective": best_h, "start_objective": start_h}
        return g0_norm * best_e.detach()

    def _angle(self, ctx: AttackContext, own: Tensor, honest: Tensor, g0: Tensor, g0_hat: Tensor,
               g: Tensor, s: Tensor) -> Tensor:
        f, g0_norm = own.shape[0], torch.linalg.vector_norm(g0)
        u = orthogonalise(-s, g0_hat)
        if float(torch.linalg.vector_norm(u)) <= 1e-4 * float(torch.linalg.vector_norm(s)) or not u.any():
            u = orthogonalise(randn(generator(ctx), (g0.shape[0],), g0), g0_hat)
        u_hat = unit(u)
        num, total = trust_parts(honest, g0)
        phi = torch.deg2rad(ANGLES_DEG).to(own)
        cos, sin = torch.cos(phi), torch.sin(phi)
        s_agg = (s @ num + f * g0_norm * cos * (cos * (s @ g0_hat) + sin * (s @ u_hat))) / (total + f * cos)
        h = s @ g - s_agg
        best = int(torch.argmax(h))
        self.last_stats = {"objective": float(h[best]), "angle": float(ANGLES_DEG[best])}
        return (g0_norm * (cos[best] * g0_hat + sin[best] * u_hat)).expand_as(own).clone()
