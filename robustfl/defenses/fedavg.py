"""FedAvg: the (sample-weighted) mean of the rows -- the baseline every robust rule is measured against.

Paper: McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017

Formula (McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of
Deep Networks from Decentralized Data", AISTATS 2017)::

    g = Σ_k n_k u_k / Σ_k n_k        (weighted = True and ctx.num_samples given)
    g = (1/K) Σ_k u_k                 (weighted = False, or no sample counts)

Weights ``n / Σn`` (or ``1/K``) are returned. With ``weighted = True`` (the default) FedAvg with no
attack converges to the sample-weighted optimum w*; the robust rules are unweighted.

Regime: no Byzantine robustness at all (breakdown point 0): one row can move the mean anywhere.
A non-finite row gives a non-finite vector on purpose -- the runner records the run as diverged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..capabilities import DefenseBase
from ..errors import InputError
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext


@dataclass
class FedAvg(DefenseBase):
    """Sample-weighted (``weighted``) or plain mean of the rows."""

    weighted: bool = True

    name = "fedavg"
    tolerates_byzantine = False  # a mean: one row moves it anywhere
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
        params.boolean(f"defense {self.name}", "weighted", self.weighted)

    def min_clients(self, f_hat: int) -> int:
        return 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, "fedavg")
        k = updates.shape[0]
        n = ctx.num_samples
        if self.weighted and n is not None:
            n = torch.as_tensor(n, device=updates.device).to(torch.float64)
            if n.shape != (k,) or not bool(torch.isfinite(n).all()) or bool((n < 0).any()) or n.sum() <= 0:
                raise InputError(
                    f"fedavg: num_samples must be {k} finite non-negative counts with a positive sum, "
                    f"got {n.tolist() if n.numel() <= 8 else tuple(n.shape)}"
                )
            weights = (n / n.sum()).to(updates.dtype)
        else:
            weights = torch.full((k,), 1.0 / k, dtype=updates.dtype, device=updates.device)
        return Aggregate(vector=weights @ updates, weights=weights, stats={})
