"""LASA, Layer-Adaptive Sparsified model Aggregation: sparsify each row, then per layer keep the rows
whose layer norm and sign purity are typical (median-based z-scores), and average those.

Paper: Xu, Zhang, Hu, "Achieving Byzantine-Resilient Federated Learning via Layer-Adaptive
Sparsified Model Aggregation", WACV 2025 (arXiv:2409.01435): pre-aggregation Top-k sparsification
of every client's update, then a layer-wise filter on magnitude (the layer's L2 norm) and direction
(PDP, positive direction purity), each judged by its MZ-score (median-based z-score) against a
radius (lambda_n, lambda_s). Authors' code: JiiahaoXU/LASA, ``algorithms/defense/lasa.py`` (with
``utils/mask_help.py`` and the defaults in ``main.py``), read for every choice left open. The
paper's text itself could not be read here: the PDP and MZ-score formulas, the default
sparsification level and the bound below are as the authors' code computes them and as a
third-party summary of the paper quotes them; the clipping step is the code's (unverified in the
paper).

The rows u_1..u_K (rows with a non-finite entry left out of every statistic, weight 0: the
authors' code drops NaN updates first), P coordinates, layers l = 1..L from ``ctx.layers``:

1. Clip (authors' code; ``clip`` = False skips it): M = the lower median of the row norms (the
   ceil(K/2)-th smallest, ``torch.median``'s), ``u_k <- min(1, M / ||u_k||) u_k``. Every row at
   or above M then has norm M: the norm check judges how a row spreads its norm over the layers
   (and short rows), not how long the row was.
2. Sparsify each row (paper, Top-k): keep the entries with ``|u_kj| >= t_k``, t_k the q-th largest
   |u_kj| of the row, ``q = max(1, floor((1 - s) P))``, s = ``sparsity``; the rest become 0: v_k.
3. Per layer l, with v_k^l the row's layer:
   ``n_k = ||v_k^l||``, ``rho_k = (1/2) (1 + sum_j sgn(v_kj^l) / sum_j |sgn(v_kj^l)|)``;
   ``MZ(x)_k = |x_k - med(x)| / sigma(x)``: med the median (mean of the two middle values for even
   K, ``np.median``), sigma the population standard deviation (``np.std``), as the authors' code;
   ``S_l = {k : MZ(n)_k < lambda_n and MZ(rho)_k < lambda_s}`` (strict, as the code; the code's
   PDP carries a factor (1 - s) on the sign ratio, an affine map common to all rows that leaves
   every MZ-score unchanged);
   S_l empty: every row (the authors' code falls back to all clients).
4. ``out^l = (1/|S_l|) sum_{k in S_l} v_k^l``: the clipped, sparsified rows are averaged (the
   paper's "pre-aggregation" sparsification; the authors' code does the same, its clipped dict
   and its masked dict being the same tensors).

Defaults: ``sparsity`` s = 0.3 (fraction of coordinates zeroed), ``lambda_n`` = ``lambda_s`` = 1.0:
the authors' ``main.py`` argparse defaults (the summary gives 0.3 as the paper's default level,
radii tried from 1 to 4; a third-party port sets lambda_n = 2 outside CIFAR, unverified).

Choices (each said here, none in the sources):
* top-k over the whole row, biases included; the authors' mask covers only 2-D and 4-D tensors
  (weights) and keeps ``|x| > t`` (q - 1 entries without ties): here ties at t are all kept;
* an all-zero layer has rho = 1/2 (0/0 in the authors' code, NaN, which fails every check);
* rounding: sigma within rounding of 0 (<= 64 eps max|x|: the values equal up to rounding) gives
  MZ = 0 for every row (the code divides by 0); an MZ-score within 64 eps (relative) of its radius
  counts as on it, so not below it: with K = 2 distinct values, or two values held by equally many
  rows, every MZ-score is exactly 1 (the default radius) in exact arithmetic, and rounding would
  otherwise keep an arbitrary half of them. The statistics are taken over the sorted values, so a
  row's MZ-score does not depend on the row order. A zero row is not rescaled (0/0 in the code);
* ``ctx.layers`` None (unknown: synthetic rows, a hand-built context) treats the row as ONE layer,
  what LASA is on a one-tensor model, and says so in the stat ``layers_given`` = 0. The engine and
  the Flower strategy always pass the model's layers (under PSFed, those of the shared coordinates).

Guarantee: the paper's kappa-robustness bound carries f/(K - 2f) (as the summary quotes it), so
K > 2f (``min_clients`` = 2f + 1);
f-hat itself is not used by the rule. Weights: each row's share of the output's coordinates,
``w_k = sum_l (P_l / P) [k in S_l] / |S_l|`` (sums to 1; 0 = dropped from every layer, which the
engine's detection metric reads as flagged). Stats: ``layers`` (L), ``layers_given``,
``fallback_layers`` (layers where no row passed, so all were averaged), ``mean_kept`` and
``min_kept`` (|S_l| over layers), ``clip_norm`` (M).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext, layers_error
from ._select import Rule


def mz_scores(x: Tensor) -> Tensor:
    """float64 ``|x_k - median(x)| / std(x)`` (population std; 0 for all when std is within rounding
    of 0), from the values' offsets to their lower middle value (the median and the mean are close
    to it, so no cancellation: two values held by equally many rows score 1 to rounding); the
    statistics come from the sorted offsets, so each score is independent of the row order."""
    s = torch.sort(x.to(torch.float64)).values
    n = len(s)
    ref = s[(n - 1) // 2]
    d = s - ref
    med = (d[(n - 1) // 2] + d[n // 2]) / 2
    sd = torch.sqrt(((d - d.sum() / n) ** 2).sum() / n)
    if float(sd) <= 64 * torch.finfo(torch.float64).eps * float(s.abs().max()):
        return torch.zeros_like(s)
    return ((x.to(torch.float64) - ref) - med).abs() / sd


def purity(block: Tensor, live: Tensor) -> Tensor:
    """float64 PDP of each row's block, 1/2 (1 + sum sgn / sum |sgn|); 1/2 for an all-zero block or
    a row scaled to 0 (``live`` False)."""
    pos = ((block > 0).sum(1) * live).to(torch.float64)
    neg = ((block < 0).sum(1) * live).to(torch.float64)
    tot = pos + neg
    return torch.where(tot > 0, 0.5 * (1 + (pos - neg) / tot.clamp(min=1)), torch.full_like(tot, 0.5))


@dataclass
class LASA(Rule):
    sparsity: float = 0.3
    lambda_n: float = 1.0
    lambda_s: float = 1.0
    clip: bool = True
    name = "lasa"
    properties = frozenset({"permutation_invariant", "scale_equivariant"})

    def __post_init__(self) -> None:
        who = f"defense {self.name}"
        params.number(who, "sparsity", self.sparsity, low=0, high=1, strict_high=True)
        params.number(who, "lambda_n", self.lambda_n, low=0, strict_low=True)
        params.number(who, "lambda_s", self.lambda_s, low=0, strict_low=True)
        params.boolean(who, "clip", self.clip)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        given = ctx.layers is not None
        layers = ctx.layers if ctx.layers is not None else ((p,) if p else ())
        if (why := layers_error(layers, p)) is not None:
            raise InputError(f"{self.name}: ctx.{why}")
        norms = row_norms(updates)
        ok = torch.isfinite(norms)
        if not bool(ok.any()):
            raise InputError(f"{self.name}: every row has a non-finite entry")
        idx = torch.nonzero(ok).flatten()
        u = updates if bool(ok.all()) else updates.index_select(0, idx)
        nrm = norms[idx]
        m = float(torch.sort(nrm).values[(len(nrm) - 1) // 2])
        scale = torch.where(nrm > m, m / nrm, torch.ones_like(nrm)) if self.clip else torch.ones_like(nrm)
        out = torch.zeros(p, dtype=updates.dtype, device=updates.device)
        share = torch.zeros(len(idx), dtype=torch.float64, device=updates.device)
        kept_sizes, fallback = [], 0
        if p:
            q = max(1, math.floor((1 - self.sparsity) * p))
            a = u.abs()
            t = torch.kthvalue(a, p - q + 1, dim=1, keepdim=True).values
            v = torch.where(a >= t, u, torch.zeros_like(u))
            live, below = scale > 0, 1 - 64 * torch.finfo(torch.float64).eps  # a score ON its radius
            for lo, hi in zip((0, *layers[:-1]), layers, strict=True):
                block = v[:, lo:hi]
                keep = (mz_scores(row_norms(block) * scale) < self.lambda_n * below) & (
                    mz_scores(purity(block, live)) < self.lambda_s * below
                )
                if not bool(keep.any()):
                    keep, fallback = torch.ones_like(keep), fallback + 1
                c = int(keep.sum())
                coef = torch.where(keep, scale / c, torch.zeros_like(scale))
                out[lo:hi] = coef.to(updates.dtype) @ block
                share += keep.to(torch.float64) * ((hi - lo) / (p * c))
                kept_sizes.append(c)
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        weights[idx] = share.to(updates.dtype)
        stats = {
            "layers": float(len(layers)),
            "layers_given": float(given),
            "fallback_layers": float(fallback),
            "mean_kept": sum(kept_sizes) / len(kept_sizes) if kept_sizes else 0.0,
            "min_kept": float(min(kept_sizes, default=0)),
            "clip_norm": m,
        }
        return Aggregate(out, weights, stats)
