"""Centered clipping: move the previous aggregate by the mean of the rows' clipped differences to it.

Paper: Karimireddy, He, Jaggi, "Learning from History for Byzantine Robust Optimization", ICML 2021

``v <- v + (1/K) sum_k clip_tau(u_k - v)``, repeated ``iterations`` L times (default 1), starting
from the previous round's aggregate (0 at round 0 and after ``reset()``), with
``clip_tau(x) = x * min(1, tau / ||x||)``. ``tau`` default: the median of ``||u_k - v||`` over the
rows at the start of the round (mean of the two middle values for even K), which makes the rule
scale-equivariant from a fresh state; a fixed ``tau`` does not. Rows with non-finite entries
contribute nothing (the 1/K stays).

State: the previous aggregate, one vector. Under partial sharing (``ctx.coordinates`` set) the
rows hold only those coordinates; the state is kept full-length, grown lazily to the largest
coordinate seen (coordinates never seen start at 0), and only the shared coordinates move.
Guarantee: the paper's analysis needs an honest majority (a Byzantine fraction below a constant);
``min_clients`` = 2f + 1. Weights: None (the output includes v, not only rows).
Stats: ``tau``, ``clipped_fraction`` (rows clipped in the first iteration).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import params
from ..kernels import check_updates
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, median_value, sq_dist_to


@dataclass
class CenteredClipping(Rule):
    tau: float | None = None
    iterations: int = 1
    name = "centered_clipping"
    _v: Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tau is not None:
            params.number(f"defense {self.name}", "tau", self.tau, low=0, strict_low=True)
        params.number(f"defense {self.name}", "iterations", self.iterations, low=1, integer=True)

    @property
    def properties(self) -> frozenset[str]:
        """Scale-equivariant (from a fresh state) only with the adaptive default tau."""
        return frozenset({"permutation_invariant"} | ({"scale_equivariant"} if self.tau is None else set()))

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def reset(self) -> None:
        self._v = None

    def _start(self, p: int, coords: Tensor | None, like: Tensor) -> Tensor:
        """The previous aggregate at this round's coordinates, growing the full state as needed."""
        size = p if coords is None else int(coords.max()) + 1 if coords.numel() else 0
        old = self._v.to(like) if self._v is not None else like.new_zeros(0)
        self._v = torch.cat([old, like.new_zeros(max(0, size - len(old)))])
        return self._v[:p].clone() if coords is None else self._v[coords.to(like.device)]

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        v = self._start(p, ctx.coordinates, updates)
        tau, clipped = self.tau, 0.0
        for it in range(self.iterations):
            d = sq_dist_to(updates, v).sqrt()  # ||u_k - v||, direct differences, no (K, P) temp
            finite = torch.isfinite(d)
            if tau is None:
                tau = median_value(d)
            scale = torch.where(d > tau, tau / d, torch.ones_like(d))
            if it == 0:
                clipped = float((d > tau).sum()) / k
            scale = torch.where(finite, scale, torch.zeros_like(scale))
            # v + (1/K) sum_k c_k (u_k - v) = v + (c^T U - (sum c) v) / K
            v = v + (combine(updates, scale, bool(finite.all())) - scale.sum().to(v.dtype) * v) / k
        if ctx.coordinates is None:
            assert self._v is not None
            self._v[:p] = v
        elif self._v is not None:
            self._v[ctx.coordinates.to(updates.device)] = v
        stats = {"tau": float(tau if tau is not None else 0.0), "clipped_fraction": clipped}
        return Aggregate(v, None, stats)
