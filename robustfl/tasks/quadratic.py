"""Heterogeneous client quadratics with a closed-form optimum.

Client k's loss is ``F_k(w) = 1/2 (w - c_k)^T A_k (w - c_k)`` and ``F(w) = mean_k F_k(w)`` (every
client holds one "sample", so the sample-weighted mean is the plain mean). The optimum is
``w* = (sum_k A_k)^-1 sum_k A_k c_k``.

Each ``A_k`` is symmetric positive definite with eigenvalues ``cond^-u``, ``u ~ U[0, 1]`` i.i.d.
(so they lie in [1/cond, 1]), and a rotation of its own (Haar-random, from the QR of a Gaussian
matrix) -- so the A_k differ in spectrum and eigenvectors and FedAvg with several local steps is
biased, the case FedDyn fixes. ``c_k = m + spread * z_k`` with a shared centre ``m ~ N(0, I)``
and ``z_k ~ N(0, I)``: ``spread`` sets the heterogeneity. With ``diagonal = true`` every A_k is
diagonal (the same eigenvalue law, stored as a (d,) vector), which keeps memory at O(K d) for
very large ``dim``.

``heterogeneity = "scalar"`` (diagonal only) is the form for millions of parameters: the clients
share one diagonal ``a`` (eigenvalue law as above), one centre ``m`` and one direction ``v``
(both N(0, I)), and differ by two scalars, ``A_k = s_k diag(a)`` with ``s_k ~ U[0.5, 1.5]`` and
``c_k = m + spread * z_k * v`` with ``z_k ~ N(0, 1)``. Then ``w* = m + (sum s_k z_k / sum s_k) spread v``
and ``F`` is evaluated from three inner products, so the data take O(d + K) memory.
``dtype = "float32"`` halves the model and update memory (w* is still computed in float64).

Data layout: ``client_data = (A, c)`` with A ``(K, 1, d, d)`` (``(K, 1, d)`` when diagonal) and c
``(K, 1, d)``; mask all True; ``num_samples`` all 1. The root set is ``root_size`` further
quadratics drawn from the same law (its loss is their mean). float64. No labels: only the iid
partition applies and ``root_bias`` must be 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..types import TaskInfo
from ._data import check_common, masked_mean, require_regression_defaults, weighted_objective
from .base import Partition, Problem, Task


@dataclass
class Quadratic(Task):
    """``dim`` = 10, ``cond`` = 10 (eigenvalues in [1/cond, 1]), ``spread`` = 1.0, ``diagonal`` = false."""

    dim: int = 10
    cond: float = 10.0
    spread: float = 1.0
    diagonal: bool = False
    heterogeneity: str = "full"
    dtype: str = "float64"

    name = "quadratic"

    def __post_init__(self) -> None:
        c = "task quadratic"
        self.dim = params.number(c, "dim", self.dim, low=1, integer=True)
        self.cond = params.number(c, "cond", self.cond, low=1.0)
        self.spread = params.number(c, "spread", self.spread, low=0.0)
        self.diagonal = params.boolean(c, "diagonal", self.diagonal)
        self.heterogeneity = params.choice(c, "heterogeneity", self.heterogeneity, ("full", "scalar"))
        self.dtype = params.choice(c, "dtype", self.dtype, ("float64", "float32"))
        if self.heterogeneity == "scalar" and not self.diagonal:
            raise params.error(c, "heterogeneity", "'full' unless diagonal = true", self.heterogeneity)

    def _draw(self, count: int, centre: Tensor, g: torch.Generator) -> tuple[Tensor, Tensor]:
        d = self.dim
        eig = self.cond ** -torch.rand(count, d, generator=g, dtype=torch.float64)
        if self.diagonal:
            a = eig
        else:
            q, r = torch.linalg.qr(torch.randn(count, d, d, generator=g, dtype=torch.float64))
            q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar measure
            a = (q * eig.unsqueeze(-2)) @ q.transpose(-2, -1)
            a = 0.5 * (a + a.transpose(-2, -1))
        c = centre + self.spread * torch.randn(count, d, generator=g, dtype=torch.float64)
        return a, c

    def build(
        self,
        *,
        clients: int,
        partition: Partition,
        root_size: int,
        root_bias: float,
        generator: torch.Generator,
        base_dir: str | None = None,
    ) -> Problem:
        check_common(clients, root_size, root_bias)
        require_regression_defaults(self.name, partition, root_bias)
        if self.heterogeneity == "scalar":
            return self._build_scalar(clients, root_size, generator)
        d, diagonal = self.dim, self.diagonal
        centre = torch.randn(d, generator=generator, dtype=torch.float64)
        a, c = self._draw(clients, centre, generator)

        def loss(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
            a_, c_ = batch
            r = w - c_
            per = 0.5 * ((a_ * r * r).sum(-1) if diagonal else torch.einsum("ni,nij,nj->n", r, a_, r))
            return masked_mean(per, mask)

        if diagonal:
            optimum = (a * c).sum(0) / a.sum(0)
        else:
            optimum = torch.linalg.solve(a.sum(0), torch.einsum("kij,kj->i", a, c))
        data = (a.unsqueeze(1), c.unsqueeze(1))
        mask = torch.ones(clients, 1, dtype=torch.bool)
        counts = torch.ones(clients, dtype=torch.long)
        root_data = root_mask = None
        if root_size > 0:
            root_data = self._draw(root_size, centre, generator)
            root_mask = torch.ones(root_size, dtype=torch.bool)
        return Problem(
            info=TaskInfo(name=self.name, num_classes=None, input_shape=(d,), is_image=False),
            dim=d,
            layers=(d,),  # one parameter vector
            dtype=torch.float64,
            loss=loss,
            client_data=data,
            client_mask=mask,
            num_samples=counts,
            objective=weighted_objective(loss, data, mask, counts),
            optimum=optimum,
            root_data=root_data,
            root_mask=root_mask,
            extras={"centre": centre},
        )

    def _build_scalar(self, clients: int, root_size: int, g: torch.Generator) -> Problem:
        d = self.dim
        dt = torch.float32 if self.dtype == "float32" else torch.float64
        a = (self.cond ** -torch.rand(d, generator=g, dtype=torch.float64)).to(dt)
        m = torch.randn(d, generator=g, dtype=torch.float64).to(dt)
        v = (self.spread * torch.randn(d, generator=g, dtype=torch.float64)).to(dt)

        def draw(count: int) -> tuple[Tensor, Tensor]:
            s_ = 0.5 + torch.rand(count, generator=g, dtype=torch.float64)
            z_ = torch.randn(count, generator=g, dtype=torch.float64)
            return s_, z_

        s, z = draw(clients)

        def loss(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
            s_, z_ = batch  # (n,) scalars per sample
            r = w - m - z_[:, None].to(w.dtype) * v
            per = 0.5 * s_.to(w.dtype) * (a * r * r).sum(-1)
            return masked_mean(per, mask)

        aa, mm, vv = a.double(), m.double(), v.double()
        cav = float((aa * vv * vv).sum())

        def objective(w: Tensor) -> float:  # mean_k 1/2 s_k sum_i a_i (r_i - z_k v_i)^2, r = w - m
            r = w.double() - mm
            ar2, arv = float((aa * r * r).sum()), float((aa * r * vv).sum())
            return float((0.5 * s * (ar2 - 2 * z * arv + z * z * cav)).mean())

        optimum = (mm + float((s * z).sum() / s.sum()) * vv).to(dt)
        root_data: tuple[Tensor, ...] | None = None
        root_mask = None
        if root_size > 0:
            root_data = draw(root_size)
            root_mask = torch.ones(root_size, dtype=torch.bool)
        return Problem(
            info=TaskInfo(name=self.name, num_classes=None, input_shape=(d,), is_image=False),
            dim=d,
            layers=(d,),  # one parameter vector
            dtype=dt,
            loss=loss,
            client_data=(s[:, None], z[:, None]),
            client_mask=torch.ones(clients, 1, dtype=torch.bool),
            num_samples=torch.ones(clients, dtype=torch.long),
            objective=objective,
            optimum=optimum,
            root_data=root_data,
            root_mask=root_mask,
            extras={"centre": m, "direction": v, "diagonal": a},
        )
