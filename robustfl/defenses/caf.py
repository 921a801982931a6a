"""CAF, the Covariance-bound Agnostic Filter: iterative down-weighting along the top eigenvector of
the weighted covariance; the weighted mean with the smallest top eigenvalue wins.

Paper: Allouah, Guerraoui, Stephan, "Towards Trustworthy Federated Learning with Untrusted
Participants", ICML 2025 (arXiv:2505.01874), Algorithm 2 "CAF: Covariance bound-Agnostic Filter"
(input x_1..x_n, 0 <= f < n/2); ByzFL's ``CAF`` (LPD-EPFL/byzfl, ``byzfl/aggregators/
aggregators.py``, and its documentation page byzfl.epfl.ch/aggregators/classes/caf.html).

With f = ctx.assumed_byzantine, weights c = 1 (K rows), repeat while ``sum_i c_i > K - 2f``:

1. ``mu_c = sum_i c_i u_i / sum_i c_i``;
2. ``Sigma_c = sum_i c_i (u_i - mu_c)(u_i - mu_c)^T / sum_i c_i``, its top eigenpair (lambda, v);
3. ``tau_i = ((u_i - mu_c)^T v)^2``;
4. ``c_i <- c_i (1 - tau_i / max_j tau_j)``;

and return the ``mu_c`` of the iteration with the smallest lambda (the first on ties).

Choices where the sources differ or are silent (each said here):
* the top eigenpair is exact (``numpy.linalg.eigh`` of the K x K matrix
  ``C^{1/2} B C^{1/2} / sum c``, B the centred Gram matrix, which has Sigma_c's non-zero spectrum;
  v = D^T C^{1/2} y / ||.||), as the paper's algorithm states; ByzFL runs ONE power iteration
  from a random start (an approximation, and a global RNG);
* ``max_j tau_j`` is taken over the rows still weighted (c_j > 0): each pass then zeroes at least
  one row, so the loop ends within K passes. ByzFL takes it over all rows; the two differ only when
  a row already at weight 0 projects further than every weighted row;
* f = 0: the loop never runs (sum c = K) and ByzFL returns None; here the plain mean (c = 1);
* when Sigma_c = 0 (the weighted rows coincide) mu_c is exact and the loop stops;
* rows with a non-finite entry start at weight 0 (they would make every mu_c non-finite).

Guarantee: 2f < K (``min_clients`` = 2f + 1); K <= 2f raises InputError, as in ByzFL.
Weights: c / sum c of the chosen iteration (``vector = weights^T U``).
Stats: ``iterations``, ``top_eigenvalue`` (the chosen lambda; 0 when no pass ran), ``total_weight``
(its sum c).
Work per pass is K x K only: the (K, P) rows are read once for the centred Gram matrix (float64,
chunked over coordinates) and once for the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, f_hat

_CHUNK = 1 << 16


def centred_gram(rows: Tensor, use: Tensor) -> np.ndarray:
    """float64 Gram matrix of the rows centred at the mean of the rows ``use`` (chunked)."""
    k = rows.shape[0]
    g = torch.zeros(k, k, dtype=torch.float64, device=rows.device)
    for start in range(0, rows.shape[1], _CHUNK):
        block = rows[:, start : start + _CHUNK].to(torch.float64)
        block = torch.where(use[:, None], block - block[use].mean(0), torch.zeros_like(block))
        g += block @ block.T
    return ((g + g.T) / 2).cpu().numpy()


def caf_weights(g: np.ndarray, c: np.ndarray, f: int) -> tuple[np.ndarray, float, int]:
    """CAF's chosen weights c (not normalised), its top eigenvalue and the number of passes, from
    the centred Gram matrix ``g`` and the starting weights ``c``."""
    k = len(c)
    best, best_lam, passes = c, np.inf, 0
    while c.sum() > k - 2 * f:
        passes += 1
        s = c.sum()
        a = g @ c / s
        b = g - a[:, None] - a[None, :] + (c @ a) / s  # (u_i - mu_c)^T (u_j - mu_c)
        r = np.sqrt(c)
        vals, vecs = np.linalg.eigh(r[:, None] * b * r[None, :] / s)
        lam, y = float(vals[-1]), vecs[:, -1]
        if lam < best_lam:
            best, best_lam = c, lam
        if lam <= 0:  # the weighted rows coincide: mu_c is exact
            break
        tau = (b @ (r * y)) ** 2 / (s * lam)  # ((u_i - mu_c)^T v)^2, ||D^T C^{1/2} y||^2 = s lam
        tau_max = float(tau[c > 0].max())
        c = np.where(c > 0, c * np.clip(1 - tau / tau_max, 0.0, 1.0), 0.0)
    return best, max(best_lam, 0.0) if np.isfinite(best_lam) else 0.0, passes


@dataclass
class CAF(Rule):
    name = "caf"
    properties = frozenset(
        {
            "permutation_invariant",
            "translation_equivariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        }
    )

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        if k <= 2 * f:
            raise InputError(f"caf: needs K > 2 f_hat rows, got K = {k}, f_hat = {f}")
        finite = torch.isfinite(updates).all(1)
        if not bool(finite.any()):
            raise InputError("caf: every row has a non-finite entry")
        c0 = finite.cpu().numpy().astype(np.float64)
        c, lam, passes = caf_weights(centred_gram(updates, finite), c0, f)
        weights = torch.from_numpy(c / c.sum()).to(dtype=updates.dtype, device=updates.device)
        vector = combine(updates, weights, bool(finite.all()))
        stats = {"iterations": float(passes), "top_eigenvalue": lam, "total_weight": float(c.sum())}
        return Aggregate(vector, weights, stats)
