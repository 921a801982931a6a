"""FoolsGold: down-weight clients whose update histories are too similar to another's (Sybils).

Paper: Fung, Yoon, Beschastnikh, "The Limitations of Federated Learning in Sybil Settings", RAID
2020, Algorithm 1

Per round, for the K clients present (rows keyed by ``ctx.client_ids``; row index if None):
1. History: ``H_i <- H_i + u_i`` (the summed updates of client i over the rounds it took part in).
2. ``cs_ij = cos(H_i, H_j)`` for j != i; a client is not compared with itself (``cs_ii = 0``, so a
   client with no positive similarity has ``v_i = 0``), a zero history has cosine 0.
   ``v_i = max_j cs_ij``.
3. Pardoning: ``cs_ij <- cs_ij * v_i / v_j`` wherever ``v_j > v_i``.
4. ``alpha_i = 1 - max_j cs_ij``, clipped to [0, 1]; ``alpha <- alpha / max(alpha)``.
5. Logit: ``alpha_i <- kappa (ln(alpha_i / (1 - alpha_i)) + 0.5)`` (``kappa`` > 0, default 1),
   clipped to [0, 1]; alpha_i = 1 maps to 1 and alpha_i = 0 to 0 (the logit's limits).
6. Output ``sum_i alpha_i u_i / sum_i alpha_i``, weights ``alpha / sum(alpha)``. The paper's step
   adds ``sum_i alpha_i u_i`` unnormalised (a learning-rate scale); normalising keeps the rule a
   weighted average comparable with the others. All alpha = 0 (e.g. every history identical)
   gives the zero update with zero weights.
Uniform feature importance (the paper's optional output-layer weighting is not used).

Rows with non-finite entries get weight 0, do not enter their history and take no part in this
round's comparison; when every row has one, the zero update with zero weights (as all alpha = 0).
``ctx.client_ids``, when given, must hold K distinct ids (else an InputError). Under partial
sharing (``ctx.coordinates``) histories are full-length, grown lazily to the largest coordinate
seen; similarities use the whole history. ``reset()`` forgets every history.
Guarantee: none in terms of f (the defense targets Sybils that send similar updates);
``min_clients`` = 1. Stats: ``num_zero_weight``, ``max_weight``, ``mean_max_similarity``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, gram64, round_ids


def foolsgold_weights(hist: Tensor, kappa: float) -> tuple[Tensor, Tensor]:
    """Steps 2-5 on the (K, L) histories: float64 alpha (before normalising to sum 1) and v.

    Cosines come from one float64 Gram matrix (norms from its diagonal); those within rounding
    of 1 (16 sqrt(L) eps) are set to exactly 1, so identical histories get alpha exactly 0 rather
    than rounding noise that the normalisation alpha / max(alpha) would blow up. No history (K = 0:
    every row of the round non-finite): both empty.
    """
    if hist.shape[0] == 0:
        empty = torch.zeros(0, dtype=torch.float64, device=hist.device)
        return empty, empty
    gram = gram64(hist)
    n = torch.diagonal(gram).clamp(min=0).sqrt()
    denom = n[:, None] * n[None, :]
    cs = torch.where(denom > 0, gram / denom.clamp(min=torch.finfo(torch.float64).tiny), 0.0)
    snap = 16 * math.sqrt(max(1, hist.shape[1])) * torch.finfo(torch.float64).eps
    cs = torch.where(cs >= 1 - snap, 1.0, cs.clamp(-1.0, 1.0)).fill_diagonal_(0.0)
    v = cs.max(1).values
    pardon = v[None, :] > v[:, None]
    cs = torch.where(pardon, cs * v[:, None] / torch.where(pardon, v[None, :], 1.0), cs)
    alpha = (1 - cs.max(1).values).clamp(0.0, 1.0)
    top = alpha.max()
    alpha = alpha / top if top > 0 else torch.zeros_like(alpha)
    inner = alpha.clamp(min=1e-300, max=1 - 1e-16)
    logit = (kappa * (torch.log(inner / (1 - inner)) + 0.5)).clamp(0.0, 1.0)
    alpha = torch.where(alpha >= 1, 1.0, torch.where(alpha <= 0, 0.0, logit))
    return alpha, v


@dataclass
class FoolsGold(Rule):
    kappa: float = 1.0
    name = "foolsgold"
    properties = frozenset(
        {"permutation_invariant", "scale_equivariant", "convex_combination", "coordinate_bounded"}
    )
    _index: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _hist: Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        params.number(f"defense {self.name}", "kappa", self.kappa, low=0, strict_low=True)

    def reset(self) -> None:
        self._index, self._hist = {}, None

    def __deepcopy__(self, memo: dict[int, Any]) -> FoolsGold:
        """The oracle's trial copy (``dry_run``), once per evaluation: the history table cloned and
        the id map copied directly (the generic deepcopy walks every entry, ~10x slower)."""
        new = copy.copy(self)
        new._index = dict(self._index)
        new._hist = None if self._hist is None else self._hist.clone()
        memo[id(self)] = new
        return new

    def _history_rows(self, ids: list[int], width: int, like: Tensor) -> Tensor:
        """Row numbers of these (distinct) clients in the history table, growing it (rows and width)."""
        for i in ids:
            self._index.setdefault(i, len(self._index))
        old = self._hist.to(like) if self._hist is not None else like.new_zeros(0, 0)
        shape = (len(self._index), max(width, old.shape[1]))
        if tuple(old.shape) != shape:
            new = like.new_zeros(shape)
            new[: old.shape[0], : old.shape[1]] = old
            old = new
        self._hist = old
        return torch.tensor([self._index[i] for i in ids], device=like.device)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        ids = round_ids(ctx, k, self.name)
        ok = torch.isfinite(row_norms(updates))
        rows_ok = updates if bool(ok.all()) else torch.where(ok[:, None], updates, torch.zeros_like(updates))
        coords = ctx.coordinates
        width = p if coords is None else (int(coords.max()) + 1 if coords.numel() else 0)
        idx = self._history_rows(ids, width, updates)
        assert self._hist is not None
        if coords is None and torch.equal(idx, torch.arange(k, device=idx.device)):
            hist = self._hist[:k]  # the usual case (the same clients in order): a view, in place
            hist[:, :p] += rows_ok
        elif coords is None:
            self._hist[idx, :p] += rows_ok
            hist = self._hist[idx]
        else:
            self._hist[idx[:, None], coords.to(updates.device)[None, :]] += rows_ok
            hist = self._hist[idx]
        alpha = torch.zeros(k, dtype=torch.float64, device=updates.device)
        alpha[ok], v = foolsgold_weights(hist if bool(ok.all()) else hist[ok], self.kappa)
        total = alpha.sum()
        weights = (alpha / total if total > 0 else alpha).to(updates.dtype)
        stats = {
            "num_zero_weight": float((weights == 0).sum()),
            "max_weight": float(weights.max()),
            "mean_max_similarity": float(v.mean()) if len(v) else 0.0,
        }
        return Aggregate(weights @ rows_ok, weights, stats)
