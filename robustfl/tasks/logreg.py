"""Multinomial logistic regression on a synthetic Gaussian mixture, with an exact optimum.

Data: class means ``mu_c ~ N(0, separation^2 I_dim)``; a sample of class y is ``x = mu_y + N(0, I)``.
Labels are balanced (``i mod classes``, shuffled) in the clients' pool (``clients *
samples_per_client`` samples), the test set (``test_size``) and the root set (``root_size``, of
which ``round(root_bias * root_size)`` are class 0), all drawn independently from the same mixture.
All four partitions apply.

Parameters: ``w = [W.ravel(), b]`` with W (classes, dim) and b (classes); logits ``W x + b``.
Per-sample loss: cross-entropy; every client adds ``(l2/2)||w||^2`` (bias included). F is strongly
convex for l2 > 0; w* is found by scipy's L-BFGS followed by Newton steps (closed-form Hessian)
and checked: ``||grad F(w*)|| <= 1e-8`` or the build fails (with l2 = 0 and separable data there
is no minimiser). float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize
from torch import Tensor

from .. import params
from ..errors import ConfigError
from ..types import TaskInfo
from ._data import check_common, classification_problem
from .base import Partition, Problem, Task

TOLERANCE = 1e-8


@dataclass
class LogReg(Task):
    """``dim`` = 20, ``classes`` = 5, ``samples_per_client`` = 100, ``separation`` = 1.0,
    ``l2`` = 0.01, ``test_size`` = 2000."""

    dim: int = 20
    classes: int = 5
    samples_per_client: int = 100
    separation: float = 1.0
    l2: float = 0.01
    test_size: int = 2000

    name = "logreg"

    def __post_init__(self) -> None:
        c = "task logreg"
        self.dim = params.number(c, "dim", self.dim, low=1, integer=True)
        self.classes = params.number(c, "classes", self.classes, low=2, integer=True)
        self.samples_per_client = params.number(
            c, "samples_per_client", self.samples_per_client, low=1, integer=True
        )
        self.separation = params.number(c, "separation", self.separation, low=0.0)
        self.l2 = params.number(c, "l2", self.l2, low=0.0)
        self.test_size = params.number(c, "test_size", self.test_size, low=0, integer=True)

    def logits(self, w: Tensor, x: Tensor) -> Tensor:
        k, d = self.classes, self.dim
        return x @ w[: k * d].reshape(k, d).T + w[k * d :]

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
        k, d, l2 = self.classes, self.dim, self.l2
        means = self.separation * torch.randn(k, d, generator=generator, dtype=torch.float64)

        def draw(labels: Tensor) -> tuple[Tensor, Tensor]:
            x = means[labels] + torch.randn(labels.numel(), d, generator=generator, dtype=torch.float64)
            return x, labels

        def balanced(n: int) -> Tensor:
            return (torch.arange(n) % k)[torch.randperm(n, generator=generator)]

        x, y = draw(balanced(clients * self.samples_per_client))
        n_bias = math.floor(root_bias * root_size + 0.5)
        root = draw(torch.cat([torch.zeros(n_bias, dtype=torch.long), balanced(root_size - n_bias)]))
        test = draw(balanced(self.test_size)) if self.test_size > 0 else None

        logits = self.logits

        def per_sample(w: Tensor, batch: tuple[Tensor, ...]) -> Tensor:
            xb, yb = batch
            z = logits(w, xb)
            return torch.logsumexp(z, dim=-1) - z.gather(-1, yb.unsqueeze(-1)).squeeze(-1)

        def loss(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
            per = per_sample(w, batch)
            m = mask.to(per.dtype)
            return (m * per).sum() / m.sum().clamp(min=1.0) + 0.5 * l2 * (w * w).sum()

        def batched_loss(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
            """(S,) every client's ``loss`` at w: the same operations on the (S, n, ...) batch,
            bit for bit the vmap of ``loss`` (tests/tasks/test_shared_grad.py)."""
            per = per_sample(w, batch)
            m = mask.to(per.dtype)
            return (m * per).sum(-1) / m.sum(-1).clamp(min=1.0) + 0.5 * l2 * (w * w).sum()

        def shared_grad(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
            """Every client's gradient of ``loss`` at w in closed form, written as the backward
            pass autograd runs under ``vmap(grad(loss), in_dims=(None, 0, 0))`` (same kernels,
            same order, bit for bit: tests/tasks/test_shared_grad.py), without the transforms'
            per-operation cost (~3 x faster at 50 clients x 100 samples)."""
            xb, yb = batch
            z = logits(w, xb)  # (S, n, k)
            lse = torch.logsumexp(z, dim=-1)
            m = mask.to(z.dtype)
            g_per = m * (1.0 / m.sum(-1).clamp(min=1.0))[:, None]  # d loss / d per-sample loss
            g_z = g_per[..., None] * torch.exp(z - lse[..., None])  # logsumexp's backward
            g_z = g_z.scatter_add(-1, yb[..., None], -g_per[..., None])  # the gather's backward
            g_w = (xb.transpose(1, 2) @ g_z).transpose(1, 2)  # (S, k, d), as mm's backward forms it
            g = torch.cat([g_w.reshape(len(xb), k * d), g_z.sum(1)], dim=1)
            half = 0.5 * l2 * w
            return g + (half + half)  # (w * w)'s two backward terms, summed first

        def predict(w: Tensor, xb: Tensor) -> Tensor:
            return logits(w, xb).argmax(dim=-1)

        optimum = self.solve(x, y)
        full = torch.ones(y.numel(), dtype=torch.bool)
        w = optimum.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(loss(w, (x, y), full), w)
        if not float(grad.norm()) <= TOLERANCE:
            raise ConfigError(
                f"task logreg: the optimiser reached only ||grad F(w*)|| = {float(grad.norm()):.3g} > "
                f"{TOLERANCE:g}; with l2 = {l2} the data may have no minimiser: raise task.l2"
            )
        return classification_problem(
            info=TaskInfo(name=self.name, num_classes=k, input_shape=(d,), is_image=False),
            dim=k * (d + 1),
            layers=(k * d, k * (d + 1)),  # W (classes, dim), then b (classes)
            dtype=torch.float64,
            loss=loss,
            predict=predict,
            x=x,
            y=y,
            clients=clients,
            partition=partition,
            generator=generator,
            root=root if root_size > 0 else None,
            test=test,
            optimum=optimum,
            extras={"means": means},
            shared_grad=shared_grad,
            batched_loss=batched_loss,
        )

    def solve(self, x: Tensor, y: Tensor) -> Tensor:
        """argmin of mean cross-entropy + (l2/2)||w||^2 over (x, y): L-BFGS, then Newton steps."""
        k, d, l2 = self.classes, self.dim, self.l2
        xs, n = x.numpy(), y.numel()
        z = np.hstack([xs, np.ones((n, 1))])  # (n, d+1): features and the bias input
        onehot = np.eye(k)[y.numpy()]
        # position of (class a, input i) in w = [W.ravel(), b]
        pos = np.empty((k, d + 1), dtype=np.int64)
        pos[:, :d] = np.arange(k * d).reshape(k, d)
        pos[:, d] = k * d + np.arange(k)
        order = pos.ravel()

        def unpack(theta: np.ndarray) -> np.ndarray:  # (k, d+1) matrix [W, b]
            return theta[order].reshape(k, d + 1)

        def probs(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            s = z @ unpack(theta).T
            s -= s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True)
            return s, p

        def fun(theta: np.ndarray) -> tuple[float, np.ndarray]:
            s, p = probs(theta)
            lse = np.log(np.exp(s).sum(axis=1))
            value = float(np.mean(lse - (s * onehot).sum(axis=1))) + 0.5 * l2 * float(theta @ theta)
            gm = (p - onehot).T @ z / n  # (k, d+1)
            g = np.empty_like(theta)
            g[order] = gm.ravel()
            return value, g + l2 * theta

        def hessian(theta: np.ndarray) -> np.ndarray:
            _, p = probs(theta)
            s = (p[:, :, None] * (np.eye(k)[None] - p[:, None, :])).reshape(n, k * k)
            zz = (z[:, :, None] * z[:, None, :]).reshape(n, (d + 1) ** 2)
            h4 = (s.T @ zz / n).reshape(k, k, d + 1, d + 1).transpose(0, 2, 1, 3)
            h = np.empty((k * (d + 1), k * (d + 1)))
            h[np.ix_(order, order)] = h4.reshape(k * (d + 1), k * (d + 1))
            return h + l2 * np.eye(k * (d + 1))

        theta = np.zeros(k * (d + 1))
        res = minimize(fun, theta, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-10})
        theta = res.x
        best = float(np.linalg.norm(fun(theta)[1]))
        for _ in range(20):  # Newton polishes L-BFGS's answer to rounding level
            if best <= 1e-14:
                break
            try:
                candidate = theta - np.linalg.solve(hessian(theta), fun(theta)[1])
            except np.linalg.LinAlgError:
                break
            norm = float(np.linalg.norm(fun(candidate)[1]))
            if not norm < best:
                break
            theta, best = candidate, norm
        return torch.from_numpy(theta.copy())
