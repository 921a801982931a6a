"""Ridge regression with a Gaussian design: exact sample optimum and exact population objective.

Data: ``x ~ N(0, Sigma)``, ``y = <w_true, x> + N(0, noise^2)``, ``w_true ~ N(0, I_dim)`` from the
seed. Sigma's eigenvalues are spaced geometrically from 1 down to 1/cond
(``cond^(-i/(dim-1))``); with ``cond > 1`` its eigenvectors are a Haar-random rotation from the
seed (``cond = 1`` gives Sigma = I). Per-sample loss ``1/2 (x^T w - y)^2``; every client adds
``(l2/2)||w||^2``, so ``F(w) = 1/(2n) ||X w - y||^2 + (l2/2)||w||^2`` over all n clients' samples
and ``w* = (X^T X + n l2 I)^-1 X^T y``.

The population objective (docs/bound.md) is ``1/2 (w - w_true)^T Sigma (w - w_true) + noise^2/2
+ (l2/2)||w||^2`` with minimiser ``(Sigma + l2 I)^-1 Sigma w_true``; ``extras`` carries ``sigma``,
``w_true``, ``noise``, ``l2``, ``population_optimum`` and ``sample(n, generator) -> (x, y)``
(fresh draws from the same distribution, for root-set studies). The root set is ``root_size``
fresh samples, disjoint from the clients' data. Regression: only the iid partition, no test set.
float64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..types import TaskInfo
from ._data import check_common, masked_mean, require_regression_defaults, weighted_objective
from .base import Partition, Problem, Task
from .partition import pad_clients, partition_indices


def sampler(
    sigma: Tensor, w_true: Tensor, noise: float
) -> Callable[[int, torch.Generator], tuple[Tensor, Tensor]]:
    """``sample(n, generator)``: n draws of (x, y) from the task's distribution."""
    evals, evecs = torch.linalg.eigh(sigma)
    root = (evecs * evals.clamp(min=0).sqrt()) @ evecs.T  # symmetric square root of Sigma

    def sample(n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        d = sigma.shape[0]
        x = torch.randn(n, d, generator=generator, dtype=torch.float64) @ root
        y = x @ w_true + noise * torch.randn(n, generator=generator, dtype=torch.float64)
        return x, y

    return sample


@dataclass
class Ridge(Task):
    """``dim`` = 20, ``samples_per_client`` = 100, ``noise`` = 0.5, ``l2`` = 0.01, ``cond`` = 1."""

    dim: int = 20
    samples_per_client: int = 100
    noise: float = 0.5
    l2: float = 0.01
    cond: float = 1.0

    name = "ridge"

    def __post_init__(self) -> None:
        c = "task ridge"
        self.dim = params.number(c, "dim", self.dim, low=1, integer=True)
        self.samples_per_client = params.number(
            c, "samples_per_client", self.samples_per_client, low=1, integer=True
        )
        self.noise = params.number(c, "noise", self.noise, low=0.0)
        self.l2 = params.number(c, "l2", self.l2, low=0.0)
        self.cond = params.number(c, "cond", self.cond, low=1.0)

    def covariance(self, generator: torch.Generator) -> Tensor:
        d = self.dim
        evals = self.cond ** -(torch.arange(d, dtype=torch.float64) / max(d - 1, 1))
        if self.cond == 1.0:
            return torch.diag(evals)
        q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(r))  # Haar-random rotation
        sigma = (q * evals) @ q.T
        return 0.5 * (sigma + sigma.T)

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
        d, l2 = self.dim, self.l2
        sigma = self.covariance(generator)
        w_true = torch.randn(d, generator=generator, dtype=torch.float64)
        sample = sampler(sigma, w_true, self.noise)
        n = clients * self.samples_per_client
        x, y = sample(n, generator)
        no_labels = torch.zeros(n, dtype=torch.long)
        parts = partition_indices(no_labels, clients, partition, generator, num_classes=1)
        data, mask, counts = pad_clients((x, y), parts)

        def loss(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
            xb, yb = batch
            return masked_mean(0.5 * (xb @ w - yb) ** 2, mask) + 0.5 * l2 * (w * w).sum()

        eye = torch.eye(d, dtype=torch.float64)
        optimum = torch.linalg.solve(x.T @ x + n * l2 * eye, x.T @ y)
        population = torch.linalg.solve(sigma + l2 * eye, sigma @ w_true)
        root_data = root_mask = None
        if root_size > 0:
            root_data = sample(root_size, generator)
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
            extras={
                "sigma": sigma,
                "w_true": w_true,
                "noise": self.noise,
                "l2": l2,
                "population_optimum": population,
                "sample": sample,
            },
        )
