"""MoNNA on the server: the mean of the K - f rows nearest to a trusted pivot.

Paper: Farhadkhani, Guerraoui, Gupta, Hoang, Pinot, Stephan, "Robust Collaborative Learning with
Linear Gradient Overhead", ICML 2023 (MoNNA = local Momentum + Nearest-Neighbour Averaging).
Authors' code: ByzFL (LPD-EPFL/byzfl, ``byzfl.MoNNA(f, idx)``: the n - f nearest neighbours, by
Euclidean distance, of ``vectors[idx]``, the pivot itself included, averaged; ``idx`` = 0 by
default; its docstring: the rule is for peer-to-peer settings where ``idx`` is a vector known to
be correct).

    N = the K - f rows u_k with the smallest ||u_k - p||      (f = f-hat)
    out = (1/|N|) sum_{k in N} u_k

In the paper each honest node is its own pivot: it trusts its own momentum and averages it with
the received vectors nearest to it. A server has no momentum of its own, so ``pivot`` says what
the server trusts:
- ``"reference"`` (default): p = ``ctx.reference``, the server's own update on its root data (the
  one vector here known to be correct, as FLTrust uses it); it is not one of the averaged rows, so
  the output averages the K - f client rows nearest to it. Needs root data (``needs_reference``).
- an integer i (ByzFL's ``idx``): p = row i itself, which is then always among the neighbours
  (distance 0). Only meaningful where row i is known to be honest; not permutation invariant.
Ties at the boundary of N: the lower row index first (``tie_break`` = 1 when the (K - f)-th and
(K - f + 1)-th distances are equal). Distances are taken in float64 from the rows centred at p
(no Gram cancellation). Rows with a non-finite entry are at distance +inf (never chosen before a
finite row). f-hat >= K: refused.

Guarantee: the nearest-neighbour averaging analysis needs an honest majority (K > 2f,
``min_clients`` = 2f + 1). Weights 1/(K - f) on N. Stats: ``pivot_distance`` (largest distance
kept), ``tie_break``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, combine, f_hat, sq_dist_to

_PROPS = frozenset(
    {
        "permutation_invariant",
        "translation_equivariant",
        "scale_equivariant",
        "convex_combination",
        "coordinate_bounded",
    }
)


@dataclass
class MoNNA(Rule):
    pivot: str | int = "reference"
    name = "monna"

    def __post_init__(self) -> None:
        if isinstance(self.pivot, str):
            params.choice(f"defense {self.name}", "pivot", self.pivot, ("reference",))
        elif isinstance(self.pivot, bool) or not isinstance(self.pivot, int) or self.pivot < 0:
            raise params.error(f"defense {self.name}", "pivot", "'reference' or an integer >= 0", self.pivot)

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return self.pivot == "reference"

    @property
    def properties(self) -> frozenset[str]:  # type: ignore[override]
        """A row pivot makes the output depend on which row sits at that index."""
        return _PROPS if self.pivot == "reference" else _PROPS - {"permutation_invariant"}

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def _pivot(self, updates: Tensor, ctx: DefenseContext) -> Tensor:
        k, p = updates.shape
        if self.pivot == "reference":
            if ctx.reference is None:
                raise InputError(f"{self.name}: pivot 'reference' needs the server's reference update "
                                 "(set server.root_size > 0), got none")
            if tuple(ctx.reference.shape) != (p,):
                got = tuple(ctx.reference.shape)
                raise InputError(f"{self.name}: reference must have shape ({p},), got {got}")
            return ctx.reference.to(dtype=torch.float64, device=updates.device)
        assert isinstance(self.pivot, int)
        if self.pivot >= k:
            raise InputError(f"{self.name}: pivot row {self.pivot} does not exist, got K = {k}")
        return updates[self.pivot].to(torch.float64)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        if f >= k:
            raise InputError(f"{self.name}: needs K > f_hat rows, got K = {k}, f_hat = {f}")
        m = k - f
        pivot = self._pivot(updates, ctx)
        if not bool(torch.isfinite(pivot).all()):
            raise InputError(f"{self.name}: the pivot has non-finite entries")
        d = sq_dist_to(updates.to(torch.float64), pivot)
        d = torch.where(torch.isfinite(d), d, torch.full_like(d, torch.inf))
        if isinstance(self.pivot, int):
            d[self.pivot] = -1.0  # the pivot is its own nearest neighbour, whatever the rounding
        order = torch.sort(d, stable=True).indices
        sel = order[:m]
        tied = m < k and bool(d[order[m - 1]] == d[order[m]])
        weights = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        weights[sel] = 1.0 / m
        vector = combine(updates, weights, bool(torch.isfinite(row_norms(updates)).all()))
        stats = {"pivot_distance": float(d[order[m - 1]].clamp(min=0).sqrt()), "tie_break": float(tied)}
        return Aggregate(vector, weights, stats)
