"""Similarity poisoning: rank first under a similarity-weighted rule while carrying harm.

Aimed at FLTrust / FedSim-style rules that weight rows by cosine similarity to a reference.
mu = mean of the known rows (honest where granted, else own); ``d`` = the component of
``-sign(mu)`` orthogonal to the anchor (a random unit vector orthogonal to it, from the
generator, when that component is ~0); the angle phi is the largest with
``cos(phi) >= target_similarity`` and is kept below 90 degrees (cos(phi) >= 0.01).

* ``target = "update"`` (default): anchor r = the server reference update when REFERENCE is
  granted, else mu; every attacker sends ``||r|| (cos(phi) r_hat + sin(phi) d_hat)``. Default
  target similarity: the highest cos(u_k, r) among the known rows, so the attackers tie for first.
* ``target = "model"`` (FedSim's model basis): anchor w = the global model; the attackers send
  ``delta = ||w|| tan(phi) d_hat`` so that ``cos(w + delta, w) = cos(phi)``; default target: the
  highest cos(w + u_k, w) among the known rows. Zero rows when ||w|| <= eps (or ||r|| <= eps).

``last_stats["cosine"]`` is the achieved cosine (with r, or of w + delta with w). A defense's
guarantee cannot exclude it: the rows are as similar as the best honest row by construction; the
harm per round is bounded by sin(phi) times the rows' norm.

Defaults (docs/attacks.md): ``target_similarity = None``, ``target = "update"`` are robustfl's; this
attack is robustfl's own (no paper).
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
from ._common import EPS, generator, known_rows, orthogonalise, randn, unit

MIN_COS = 0.01


def _cos(rows: Tensor, anchor: Tensor) -> Tensor:
    norms = torch.linalg.vector_norm(rows, dim=1) * torch.linalg.vector_norm(anchor)
    return (rows @ anchor) / norms.clamp_min(EPS)


@dataclass
class SimilarityPoisoning(AttackBase):
    target_similarity: float | None = None
    target: str = "update"
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.target_similarity is not None:
            self.target_similarity = params.number("attack similarity_poisoning", "target_similarity",
                                                self.target_similarity, low=0, high=1, strict_low=True)
        self.target = params.choice("attack similarity_poisoning", "target", self.target, ("update", "model"))

    def __call__(self, ctx: AttackContext) -> Tensor:
        known = known_rows(ctx)
        mu = known.mean(0)
        if self.target == "update":
            anchor = ctx.reference.to(mu) if ctx.reference is not None else mu
            sims = _cos(known, anchor)
        else:
            if ctx.global_model is None:
                raise InputError("attack similarity_poisoning: target 'model' needs ctx.global_model")
            anchor = ctx.global_model.to(mu)
            sims = _cos(known + anchor, anchor)
        a_norm = float(torch.linalg.vector_norm(anchor))
        if a_norm <= EPS:
            self.last_stats = {"cosine": 0.0}
            return torch.zeros_like(ctx.own)
        a_hat = anchor / a_norm
        cos_phi = float(sims.max()) if self.target_similarity is None else self.target_similarity
        cos_phi = min(1.0, max(MIN_COS, cos_phi))
        s = -torch.sign(mu)
        d = orthogonalise(s, a_hat)
        if float(torch.linalg.vector_norm(d)) <= 1e-4 * float(torch.linalg.vector_norm(s)) or not d.any():
            d = orthogonalise(randn(generator(ctx), (d.shape[0],), mu), a_hat)
        d_hat = unit(d)
        sin_phi = math.sqrt(max(0.0, 1.0 - cos_phi**2))
        if self.target == "update":
            row = a_norm * (cos_phi * a_hat + sin_phi * d_hat)
            achieved = _cos(row[None], anchor)
        else:
            row = a_norm * (sin_phi / cos_phi) * d_hat
            achieved = _cos((anchor + row)[None], anchor)
        self.last_stats = {"cosine": float(achieved[0]), "target_similarity": cos_phi}
        return row.expand_as(ctx.own).clone()
