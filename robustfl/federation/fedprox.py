"""FedProx: local objective F_k(theta) + (mu/2) ||theta - w||^2.

Paper: Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from .. import params
from .base import Algorithm


@dataclass
class FedProx(Algorithm):
    has_extra_grad: ClassVar[bool] = True
    mu: float = 0.01
    name = "fedprox"

    def __post_init__(self) -> None:
        params.number(f"algorithm {self.name}", "mu", self.mu, low=0, finite=False)

    def extra_grad(self, theta: Tensor, w_start: Tensor, ids: Tensor) -> Tensor | None:
        return self.mu * (theta - w_start) if self.mu else None
