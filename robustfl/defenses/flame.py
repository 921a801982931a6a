"""FLAME: cosine clustering (HDBSCAN) of the rows, norm clipping of the kept ones, optional noise.

Paper: Nguyen et al., "FLAME: Taming Backdoors in Federated Learning", USENIX Security 2022

1. Cosine distances ``c_ij = 1 - cos(u_i, u_j)`` between the rows (a zero row has distance 1 to
   every other), clustered as scikit-learn's HDBSCAN does (``metric="precomputed"``,
   ``min_cluster_size = K//2 + 1`` (at least 2), ``min_samples = 1``, ``allow_single_cluster =
   True``, as FLAME's deployment of HDBSCAN). The largest cluster is kept; the rest are outliers.
   At these settings HDBSCAN has a closed form (:func:`majority_cluster`), computed directly and
   tested against scikit-learn's own labels. We cluster the updates; the paper clusters the local
   models ``w + u_k``, whose cosines are all close to 1 once w dominates.
2. Adaptive clipping: ``S`` = median of ``||u_k||`` over all rows; each kept row is scaled by
   ``min(1, S / ||u_k||)``.
3. Output: the mean of the clipped kept rows, plus ``N(0, (noise * S)^2)`` per coordinate from
   ``ctx.generator`` when ``noise`` (the paper's lambda) > 0; default 0 (no noise).

Rows with non-finite entries are outliers. Weights: 1/L on the L kept rows (shares of the
clipped rows). Guarantee: an honest majority, ``min_clients`` = 2f + 1.
Stats: ``num_kept``, ``median_norm``, ``no_cluster`` (always 0: see :func:`majority_cluster`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, generator_for, gram64, median_value


def majority_cluster(dist: np.ndarray) -> np.ndarray:
    """Boolean mask of the points scikit-learn's HDBSCAN (``metric="precomputed"``,
    ``min_cluster_size = max(2, n//2 + 1)``, ``min_samples = 1``, ``allow_single_cluster = True``)
    labels as a cluster, on the (n, n) distances ``dist``.

    The closed form at these settings: ``min_samples = 1`` makes every core distance 0, so the
    mutual reachability is ``dist`` itself and the hierarchy is single linkage. A split keeps two
    clusters only when both sides have ``min_cluster_size > n/2`` points, which never happens: the
    condensed tree is the root alone, EOM selects it (``allow_single_cluster``), and the labelled
    points are those leaving it at the largest lambda (1/distance). Those are the points of the
    first single-linkage component of ``min_cluster_size`` points, at distance d*, together with
    those joining it at distances whose lambda equals d*'s. The mask is never empty, so the
    ``no_cluster`` case of FLAME's step 1 does not arise at these settings (the stat stays 0).
    ``tests/defenses/test_flame_cluster.py`` compares it with scikit-learn's labels (ties,
    duplicates, equal reciprocals, asymmetric rounding included); ``python -m benchmarks.catalogue``
    times it against scikit-learn's estimator.
    """
    n = len(dist)
    if n <= 1:
        return np.ones(n, dtype=bool)
    from .._compiled import hdbscan_majority  # numba, on first use

    mask: np.ndarray = hdbscan_majority(np.ascontiguousarray(dist, dtype=np.float64), max(2, n // 2 + 1))
    return mask


@dataclass
class Flame(Rule):
    noise: float = 0.0
    name = "flame"
    properties = frozenset({"permutation_invariant", "scale_equivariant"})

    def __post_init__(self) -> None:
        params.number(f"defense {self.name}", "noise", self.noise, low=0)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        norms = row_norms(updates)
        finite = torch.isfinite(norms)
        ok = torch.nonzero(finite).flatten()
        all_finite = bool(finite.all())
        n = norms[ok]
        cos = gram64(updates if all_finite else updates[ok]) / (n[:, None] * n[None, :])
        cos = torch.nan_to_num(cos, nan=0.0, posinf=0.0, neginf=0.0)  # a zero row: distance 1
        dist = (1 - cos).clamp(0.0, 2.0).fill_diagonal_(0.0)
        mask = majority_cluster(dist.cpu().numpy())
        kept = ok[torch.from_numpy(mask).to(ok.device)]
        median = median_value(norms[ok]) if len(ok) else 0.0
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        vector = torch.zeros(p, dtype=updates.dtype, device=updates.device)
        if len(kept):
            nk = norms[kept]
            share = torch.zeros(k, dtype=torch.float64, device=updates.device)
            share[kept] = torch.where(nk > median, median / nk, torch.ones_like(nk)) / len(kept)
            vector = combine(updates, share, all_finite)
            weights[kept] = 1.0 / len(kept)
        if self.noise > 0:
            g = generator_for(ctx)
            draw = torch.randn(p, generator=g, dtype=updates.dtype, device=g.device).to(updates.device)
            vector = vector + (self.noise * median) * draw
        stats = {"num_kept": float(len(kept)), "median_norm": median, "no_cluster": 0.0}
        return Aggregate(vector, weights, stats)
