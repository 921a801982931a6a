"""SignGuard: a norm filter and a sign-statistics clustering filter; the norm-clipped mean of the rows
both keep.

Paper: Xu, Huang, Song, Lin, "SignGuard: Byzantine-robust Federated Learning through
Collaborative Malicious Gradient Filtering", ICDCS 2022 (arXiv:2109.05872). Authors' code:
JianXu95/SignGuard, ``aggregators/signguard.py`` (class ``signguard_multiclass``), read for every
choice the paper leaves open.

With n_k = ||u_k||, M = median_k n_k (the mean of the two middle values for even K):

1. Norm filter: ``S1 = {k : lower * M < n_k < upper * M}`` (``lower`` = 0.1, ``upper`` = 3.0, strict,
   as the authors' code).
2. Sign statistics on a random block of coordinates: ``q = max(1, floor(fraction * P))``
   consecutive coordinates (``fraction`` = 0.1) starting at an offset drawn uniformly from
   [0, P - q] with ``ctx.generator`` (the authors' code draws one contiguous block with
   ``torch.randint``; the paper says "a randomly selected subset"). Per row the fractions of
   positive, zero and negative entries, each divided by its maximum over the rows (+ 1e-8),
   give a point in R^3 (a NaN entry counts as zero, as the authors' code sets NaN to 0).
3. Clustering: the authors' code runs scikit-learn's ``MeanShift(bandwidth, bin_seeding=True,
   cluster_all=False)`` with ``bandwidth = estimate_bandwidth(features, quantile=0.5,
   n_samples=50)``. Implemented here exactly and deterministically (:func:`mean_shift_labels`,
   the same flat-kernel steps, seeds, merge order and labelling as scikit-learn 1.x), with two
   differences said here: the bandwidth uses all K rows (scikit-learn subsamples 50 rows with a
   global RNG when K > 50; for K <= 50 the value is the same), and a zero bandwidth (the K/2-th
   neighbours coincide), which scikit-learn refuses, clusters identical points together (the
   limit of the flat kernel). ``S2`` = the largest cluster (ties: the cluster of the denser
   centre, scikit-learn's order); rows farther than the bandwidth from every centre are in none.
4. ``S = S1 & S2``; ``out = (1/|S|) sum_{k in S} min(1, M / n_k) u_k`` (every kept row clipped to the
   median norm M of all K rows; the authors' code takes ``torch.median``, the lower middle value,
   for this M and numpy's median for the filter: here both use the median above).

Weights: 1/|S| on S (each row's share of the mean of clipped rows; ``vector = weights^T U`` only
when no row is clipped). Empty S: the zero update, all weights 0, stat ``empty`` = 1. Zero-width
rows (P = 0) are all-zero rows: S1 is empty, so the empty update (as median's and fedavg's), with
no block drawn.
Guarantee: the paper assumes fewer than half of the clients Byzantine; f-hat is not used by the
rule. ``min_clients`` = 2f + 1. Stats: ``num_kept``, ``norm_kept`` (|S1|), ``sign_kept`` (|S2|),
``median_norm``, ``bandwidth``, ``empty``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, generator_for, median_value


def estimate_bandwidth(x: np.ndarray, quantile: float = 0.5) -> float:
    """scikit-learn's ``estimate_bandwidth`` on all rows: the mean over points of the distance to
    their ``max(1, int(K * quantile))``-th nearest point, the point itself counted first."""
    n = max(1, int(len(x) * quantile))
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    return float(np.sort(d, axis=1)[:, n - 1].sum() / len(x))


def _seeds(x: np.ndarray, bw: float) -> np.ndarray:
    """scikit-learn's bin seeding (min_bin_freq 1): the occupied grid cells of size ``bw``, as
    float32 cell * bw; the points themselves when every point has its own cell."""
    cells = list(dict.fromkeys(tuple(np.round(p / bw)) for p in x))
    if len(cells) == len(x):
        return x
    return np.array(cells, dtype=np.float32) * np.float32(bw)


def mean_shift_labels(x: np.ndarray, bw: float, max_iter: int = 300) -> np.ndarray:
    """Flat-kernel mean shift as scikit-learn's ``MeanShift(bandwidth=bw, bin_seeding=True,
    cluster_all=False)``: each seed climbs to the mean of the points within ``bw`` until it moves
    by <= 1e-3 bw; centres are kept by decreasing (intensity, centre), one within ``bw`` of a kept
    centre dropped; each point takes its nearest centre (-1 beyond ``bw``).

    The points are visited in lexicographic order, so the result does not depend on row order."""
    order = np.lexsort(x.T[::-1])
    pts = x[order]
    centres: dict[tuple[float, ...], int] = {}
    if bw == 0:  # the flat kernel's limit: identical points form a cluster
        for p in pts:
            centres[tuple(float(v) for v in p)] = centres.get(tuple(float(v) for v in p), 0) + 1
    for seed in _seeds(pts, bw) if bw > 0 else ():
        mean, count, it = np.asarray(seed, dtype=np.float64), 0, 0
        while True:
            within = np.sqrt(((pts - mean) ** 2).sum(1)) <= bw
            count = int(within.sum())
            if count == 0:
                break
            old, mean = mean, pts[within].mean(0)
            if np.sqrt(((mean - old) ** 2).sum()) <= 1e-3 * bw or it == max_iter:
                break
            it += 1
        if count:
            centres[tuple(float(v) for v in mean)] = count
    ranked = sorted(centres.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    cs = np.array([c for c, _ in ranked])
    keep = np.ones(len(cs), dtype=bool)
    for i in range(len(cs)):
        if keep[i]:
            keep[np.sqrt(((cs - cs[i]) ** 2).sum(1)) <= bw] = False
            keep[i] = True
    cs = cs[keep]
    d = np.sqrt(((pts[:, None, :] - cs[None, :, :]) ** 2).sum(-1))
    near = d.argmin(1)
    labels = np.where(d[np.arange(len(pts)), near] <= bw, near, -1)
    out = np.empty_like(labels)
    out[order] = labels
    return out


def sign_features(block: Tensor) -> np.ndarray:
    """(K, 3): fractions of positive, zero and negative entries per row, each over its max + 1e-8."""
    s = torch.sign(torch.nan_to_num(block.to(torch.float64), nan=0.0))
    q = block.shape[1]
    feats = torch.stack([(s > 0).sum(1), (s == 0).sum(1), (s < 0).sum(1)], dim=1).to(torch.float64) / q
    return (feats / (feats.max(0).values + 1e-8)).cpu().numpy()


@dataclass
class SignGuard(Rule):
    fraction: float = 0.1
    lower: float = 0.1
    upper: float = 3.0
    name = "signguard"
    properties = frozenset({"permutation_invariant", "scale_equivariant"})

    def __post_init__(self) -> None:
        who = f"defense {self.name}"
        params.number(who, "fraction", self.fraction, low=0, high=1, strict_low=True)
        params.number(who, "lower", self.lower, low=0)
        params.number(who, "upper", self.upper, low=self.lower, strict_low=True)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def _zero_width(self, k: int, updates: Tensor, med: float) -> Aggregate:
        """(K, 0) rows: the empty update, zero weights (S1 is empty: every norm is 0, not above
        ``lower`` * 0); no coordinate to draw, so no draw, and the K empty sign statistics coincide
        (one cluster of all K rows, bandwidth 0), as for all-zero rows of any width."""
        stats = {"num_kept": 0.0, "norm_kept": 0.0, "sign_kept": float(k), "median_norm": med,
                 "bandwidth": 0.0, "empty": 1.0}
        return Aggregate(updates.new_zeros(0), updates.new_zeros(k), stats)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        norms = row_norms(updates)
        med = median_value(norms)
        s1 = (norms > self.lower * med) & (norms < self.upper * med)
        if p == 0:  # zero-width rows: as all-zero rows, every norm 0 = M fails the norm filter
            return self._zero_width(k, updates, med)
        q = max(1, math.floor(self.fraction * p))
        start = int(torch.randint(0, p - q + 1, (1,), generator=generator_for(ctx)))
        feats = sign_features(updates[:, start : start + q])
        bw = estimate_bandwidth(feats)
        labels = mean_shift_labels(feats, bw)
        counts = np.bincount(labels[labels >= 0], minlength=1)
        s2 = torch.from_numpy((labels == int(counts.argmax())) & (counts.max() > 0)).to(updates.device)
        kept = s1 & s2
        n = int(kept.sum())
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        stats = {
            "num_kept": float(n), "norm_kept": float(s1.sum()), "sign_kept": float(s2.sum()),
            "median_norm": med, "bandwidth": bw, "empty": float(n == 0),
        }
        if n == 0:
            return Aggregate(torch.zeros(p, dtype=updates.dtype, device=updates.device), weights, stats)
        scale = torch.where(norms > med, med / norms, torch.ones_like(norms))
        weights[kept] = 1.0 / n
        share = torch.where(kept, scale / n, torch.zeros_like(scale))
        vector = combine(updates, share, bool(torch.isfinite(norms).all()))
        return Aggregate(vector, weights, stats)
