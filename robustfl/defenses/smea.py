"""SMEA, Smallest Maximum Eigenvalue Averaging: the mean of the K - f rows whose covariance has the
smallest largest eigenvalue.

Paper: Allouah, Guerraoui, Gupta, Pinot, Stephan, "Robust Distributed Learning: Tight Error Bounds
and Breakdown Point under Data Heterogeneity", NeurIPS 2023 (SMEA is their rule reaching the
tight bound). Authors' code: ByzFL (LPD-EPFL/byzfl, ``byzfl.SMEA``) and its predecessor in EPFL's
ByzLibrary (``aggregators/mea.py``, ``compute_min_subset``: an exhaustive loop over
``itertools.combinations``).

    S* = argmin_{S in [K], |S| = K - f} lambda_max((1/|S|) sum_{i in S} (u_i - ubar_S)(u_i - ubar_S)^T)
    out = ubar_{S*} = (1/|S*|) sum_{i in S*} u_i

with f = f-hat. Exact: every subset is scored, C(K, K - f) = C(K, f) of them, each an eigenvalue
problem of size |S| (the non-zero spectrum of the P x P covariance is that of the |S| x |S| centred
Gram matrix ``H G_SS H / |S|``, H = I - 11^T/|S|, so the cost is O(C(K, f) |S|^3 + K^2 P), never
P x P). Above ``max_subsets`` subsets (default 100,000) the rule refuses with a one-line
InputError naming the count. Ties: the first subset in lexicographic order (``itertools``'s
order; the authors' loop keeps the first minimum with a strict ``<``); two scores within float64
rounding of each other (16 |S| eps relative) count as tied, so row order cannot flip the choice
through rounding alone.

Numerics: one float64 Gram matrix of the rows centred at their coordinate-wise median (the
centring removes a common offset that would otherwise cancel catastrophically; the covariance is
translation invariant). Rows with a non-finite entry are never selected while enough finite rows
remain (they score +inf). f-hat = 0: the mean. f-hat >= K: refused (no subset).
Guarantee: (f, kappa)-robust with kappa = O(f/(K - 2f)), which needs K > 2f (``min_clients`` =
2f + 1). Weights: 1/|S*| on the selected rows. Stats: ``num_subsets``, ``max_eigenvalue`` (of
the winner), ``score_gap`` (relative gap to the runner-up, 0 when there is none), ``tie_break``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, f_hat, gram64

_BATCH = 4096  # subsets scored per batched eigvalsh call


def centred_gram(updates: Tensor) -> Tensor:
    """float64 (K, K) Gram matrix of the rows centred at their coordinate-wise median (finite rows)."""
    finite = torch.isfinite(row_norms(updates))
    rows = updates.to(torch.float64)
    if bool(finite.any()):
        rows = rows - rows[finite].median(0).values
    return gram64(rows)


def subset_scores(gram: Tensor, subsets: Tensor) -> Tensor:
    """lambda_max of each subset's covariance (1/m sum (u - ubar)(u - ubar)^T) from the Gram matrix."""
    m = subsets.shape[1]
    g = gram[subsets[:, :, None], subsets[:, None, :]]  # (B, m, m)
    h = torch.eye(m, dtype=g.dtype, device=g.device) - 1.0 / m
    c = h @ g @ h / m
    c = (c + c.transpose(1, 2)) / 2
    return torch.linalg.eigvalsh(c)[:, -1].clamp(min=0)


@dataclass
class SMEA(Rule):
    max_subsets: int = 100_000
    name = "smea"
    properties = frozenset(
        {
            "permutation_invariant",
            "translation_equivariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        }
    )

    def __post_init__(self) -> None:
        params.number(f"defense {self.name}", "max_subsets", self.max_subsets, low=1, integer=True)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def refusal(self, k: int, f_hat: int) -> str | None:
        m = k - f_hat
        count = math.comb(k, m) if 0 <= m <= k else 0
        if count <= self.max_subsets:
            return None
        return (
            f"exact search over C({k}, {m}) = {count:,} subsets exceeds max_subsets = {self.max_subsets:,} "
            f"(K = {k}, f_hat = {f_hat})"
        )

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        if f >= k:
            raise InputError(f"{self.name}: needs K > f_hat rows, got K = {k}, f_hat = {f}")
        m = k - f
        count = math.comb(k, m)
        why = self.refusal(k, f)
        if why is not None:
            raise InputError(f"{self.name}: {why}")
        bad = ~torch.isfinite(row_norms(updates))
        gram = centred_gram(updates).cpu()
        gram = torch.where(torch.isfinite(gram), gram, 0.0)
        bad_cpu = bad.cpu()
        best_key: tuple[int, float] = (k + 1, math.inf)
        best: tuple[int, ...] = tuple(range(m))
        second = math.inf
        tied = False
        combos = itertools.combinations(range(k), m)
        while chunk := list(itertools.islice(combos, _BATCH)):
            sub = torch.tensor(chunk, dtype=torch.long)
            scores = subset_scores(gram, sub).tolist()
            nbad = bad_cpu[sub].sum(1).tolist()
            for s, nb, idx in zip(scores, nbad, chunk, strict=True):
                key = (nb, s)
                tol = 16 * m * torch.finfo(torch.float64).eps * max(abs(s), abs(best_key[1]))
                if nb < best_key[0] or (nb == best_key[0] and s < best_key[1] - tol):
                    second = best_key[1] if nb == best_key[0] else math.inf
                    best_key, best, tied = key, idx, False
                elif nb == best_key[0]:
                    if s <= best_key[1] + tol:
                        tied = True
                    second = min(second, s)
        sel = torch.tensor(best, dtype=torch.long, device=updates.device)
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        weights[sel] = 1.0 / m
        vector = combine(updates, weights, not bool(bad.any()))
        lam = best_key[1]
        gap = (second - lam) / second if math.isfinite(second) and second > 0 else 0.0
        stats = {
            "num_subsets": float(count),
            "max_eigenvalue": float(lam),
            "score_gap": float(max(gap, 0.0)),
            "tie_break": float(tied),
        }
        return Aggregate(vector, weights, stats)
