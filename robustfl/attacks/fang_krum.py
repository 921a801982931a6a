"""Fang et al.'s full-knowledge attack on Krum: all attackers send -lambda * sign(mu), the largest
lambda Krum still selects.

Paper: Fang, Cao, Jia, Gong, "Local Model Poisoning Attacks to Byzantine-Robust Federated Learning",
USENIX Security 2020

All f attackers send the same row ``-lambda * s``, s = sign(mu), mu the honest rows' mean (the
direction the model would move without attack). lambda is the largest of
``lambda_max, lambda_max / 2, ...`` (down to 1e-5) for which Krum -- computed here, on
[malicious; honest] with f-hat = f, score = sum of squared distances to the K - f - 2 nearest
other rows, ties to the lowest index -- selects a malicious row. With H the honest rows, K all
rows, d = P, Gamma_i the K - f - 2 honest rows nearest to u_i (all others if fewer):

    lambda_max = min_{i in H} sum_{l in Gamma_i} ||u_l - u_i|| / ((K - 2f - 1) sqrt(d))
                 + max_{i in H} ||u_i|| / sqrt(d)        (K - 2f - 1 clamped at 1).

If no lambda >= 1e-5 works the attackers send lambda = 1e-5 and ``last_stats["succeeded"] = 0``.
Krum's guarantee (K >= 2f + 3) bounds the selected row's distance from an honest row, not its
direction: the attack exploits exactly that slack. It transfers to other rules (partial knowledge).
The Gram matrix of [malicious; honest] is assembled from H H^T, H s and ||s||^2 once per call.

Defaults (docs/attacks.md): the halving stops at 1e-5 as in vrt1shjwlkr/NDSS21-Model-Poisoning
(``get_malicious_updates_fang``: ``threshold = 1e-5``, ``lamda *= 0.5``); there is no parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..capabilities import AttackBase
from ..errors import InputError
from ..kernels import krum_scores, sq_distances
from ..types import AttackContext, Knowledge

LAMBDA_MIN = 1e-5


def lambda_max(honest: Tensor, f: int) -> float:
    """The paper's upper bound on lambda for n honest rows and f attackers."""
    n, d = honest.shape
    k = n + f
    dist = sq_distances(honest).sqrt()
    dist.fill_diagonal_(float("inf"))
    m = min(max(0, k - f - 2), n - 1)
    near = torch.topk(dist, m, dim=1, largest=False).values.sum(1) if m > 0 else dist.new_zeros(n)
    denom = max(1, k - 2 * f - 1) * math.sqrt(d)
    return float(near.min()) / denom + float(torch.linalg.vector_norm(honest, dim=1).max()) / math.sqrt(d)


@dataclass
class FangKrum(AttackBase):
    knowledge: Knowledge = field(default=Knowledge.OWN | Knowledge.HONEST, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __call__(self, ctx: AttackContext) -> Tensor:
        if ctx.honest is None or ctx.honest.shape[0] == 0:
            raise InputError("attack fang_krum: needs the honest rows (HONEST knowledge)")
        h = ctx.honest.to(ctx.own)
        f, n = ctx.own.shape[0], h.shape[0]
        s = torch.sign(h.mean(0))
        g_hh, h_s, s_s = h @ h.T, h @ s, s @ s
        lam, ok = lambda_max(h, f), False
        while math.isfinite(lam) and lam >= LAMBDA_MIN:
            gram = torch.empty((f + n, f + n), dtype=h.dtype, device=h.device)
            gram[:f, :f] = lam * lam * s_s
            gram[:f, f:] = -lam * h_s
            gram[f:, :f] = -lam * h_s[:, None]
            gram[f:, f:] = g_hh
            diag = torch.diagonal(gram)
            sq = (diag[:, None] + diag[None, :] - 2 * gram).clamp_min(0)
            sq.fill_diagonal_(0)
            if int(torch.argmin(krum_scores(sq, f))) < f:
                ok = True
                break
            lam /= 2
        if not ok:
            lam = LAMBDA_MIN
        self.last_stats = {"succeeded": float(ok), "lambda": lam}
        return (-lam * s).expand_as(ctx.own).clone()
