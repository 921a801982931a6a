"""The theorem's setting (docs/bound.md): one seed's ridge problem with Gaussian design, float64.

The population objective is exact there: ``grad F(w) = Sigma (w - w_true) + l2 w``, ``w* = (Sigma +
l2 I)^-1 Sigma w_true``, mu and L the extreme eigenvalues of ``Sigma + l2 I``. Every client takes
one full-batch gradient step with local lr beta = 1 on its fixed data, so its row is ``-grad
F_k(w)`` with ``grad F_k(w) = X_k^T (X_k w - y_k) / n_k + l2 w`` (all clients at once, one batched
product); the server's own update is ``-grad f_D0(w)`` on its root data. :class:`Setting` holds
the precomputed problem, the root set, fresh root draws and the theorem's constants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..scenario import Scenario
from ..simulation import components as C
from .constants import Constants, theorem_constants


@dataclass
class Setting:
    """One seed's ridge problem in the theorem's setting, on one device (float64).

    Each client's gradient is affine in w: ``grad F_k(w) = A_k w - b_k + l2 w`` with
    ``A_k = X_k^T X_k / n_k`` and ``b_k = X_k^T y_k / n_k`` precomputed from its fixed data, so all
    K gradients are one batched (K, d, d) x (d,) product per round."""

    a: Tensor  # (K, d, d)
    b: Tensor  # (K, d)
    num_samples: Tensor  # (K,) int64
    sigma: Tensor
    w_true: Tensor
    l2: float
    noise: float
    hessian: Tensor  # Sigma + l2 I
    w_star: Tensor  # population optimum
    root: tuple[Tensor, Tensor]  # the scenario's root set (x0, y0)
    sampler: Callable[[int, torch.Generator], tuple[Tensor, Tensor]]
    w0: Tensor
    byz_order: Tensor  # a random permutation of client ids; the first f are Byzantine
    seed: int

    @classmethod
    def build(cls, sc: Scenario, seed: int, device: torch.device) -> Setting:
        from ..simulation.runner import build_problem

        p = build_problem(sc, seed)
        ex = p.extras
        mask = p.client_mask.to(torch.float64)
        x = p.client_data[0].to(torch.float64) * mask[..., None]
        y = p.client_data[1].to(torch.float64) * mask
        counts = mask.sum(1).clamp_min(1)[:, None]
        sigma = ex["sigma"].to(torch.float64)
        l2 = float(ex["l2"])
        hessian = sigma + l2 * torch.eye(sigma.shape[0], dtype=torch.float64)
        assert p.root_data is not None
        w0 = p.init(C.named_generator(seed, "init"), sc.section("federation")["init_scale"])
        byz = torch.randperm(x.shape[0], generator=C.named_generator(seed, "byzantine"))
        return cls(
            a=(x.transpose(1, 2) @ x / counts[..., None]).to(device),
            b=(torch.einsum("knd,kn->kd", x, y) / counts).to(device),
            num_samples=p.num_samples.to(device),
            sigma=sigma.to(device),
            w_true=ex["w_true"].to(device, torch.float64),
            l2=l2,
            noise=float(ex["noise"]),
            hessian=hessian.to(device),
            w_star=ex["population_optimum"].to(device, torch.float64),
            root=(p.root_data[0].to(device), p.root_data[1].to(device)),
            sampler=ex["sample"],
            w0=w0.to(device, torch.float64),
            byz_order=byz.to(device),
            seed=seed,
        )

    @property
    def num_clients(self) -> int:
        return int(self.a.shape[0])

    @property
    def device(self) -> torch.device:
        return self.w0.device

    def client_grads(self, w: Tensor) -> Tensor:
        """(K, d): grad F_k(w) = X_k^T (X_k w - y_k) / n_k + l2 w for every client at once."""
        return self.a @ w - self.b + self.l2 * w

    def grad(self, w: Tensor) -> Tensor:
        """The population gradient Sigma (w - w_true) + l2 w (rows of ``w`` for a batch)."""
        return (w - self.w_true) @ self.sigma + self.l2 * w

    def root_grad(self, w: Tensor, root: tuple[Tensor, Tensor]) -> Tensor:
        x0, y0 = root
        return x0.T @ (x0 @ w - y0) / x0.shape[0] + self.l2 * w

    def root_optimum(self, root: tuple[Tensor, Tensor]) -> Tensor:
        """w_D0: the minimiser of the ridge objective on the root data alone."""
        x0, y0 = root
        n0, d = x0.shape
        a = x0.T @ x0 / n0 + self.l2 * torch.eye(d, dtype=x0.dtype, device=x0.device)
        return torch.linalg.solve(a, x0.T @ y0 / n0)

    def draw_root(self, size: int, draw: int) -> tuple[Tensor, Tensor]:
        """Root draw ``draw`` of ``size`` fresh samples (its own named generator: reproducible anywhere)."""
        x0, y0 = self.sampler(size, C.named_generator(self.seed, f"bound:root:{size}:{draw}"))
        return x0.to(self.device), y0.to(self.device)

    def constants(self, alpha: float | None) -> Constants:
        return theorem_constants(
            self.hessian, self.sigma, self.w_true, self.w_star, self.noise, int(self.root[0].shape[0]), alpha
        )
