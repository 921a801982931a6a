"""FedDyn: federated learning with dynamic regularisation.

Paper: Acar, Zhao, Matas, Mattina, Whatmough, Saligrama, "Federated Learning Based on Dynamic
Regularization", ICLR 2021

Client k keeps a state ``g_k`` (zeros until its first participation; an absent client's state is
frozen, never decayed). In a round with start point w (the global model) it minimises::

    F_k(theta) - <g_k, theta> + (alpha/2) ||theta - w||^2
    per-step gradient:  grad F_k(theta) - g_k + alpha (theta - w)       (:meth:`extra_grad`)

and, once its row ``u_k = theta_k - w`` has reached the server, ``g_k <- g_k - alpha u_k``. The row
used is the one the server *received*: a Byzantine client's state follows the row it sent.

Server (``h`` = 0 at the start; K_total = every client of the federation; R = the rows received
and valid this round, ``valid`` as marked by the caller: finite rows)::

    theta_bar = w + A(U)                        (A = the defense; for A = mean, mean_{k in R} theta_k)
    h        <- h - alpha (|R| / K_total) (theta_bar - w)
    w_new     = theta_bar - h / alpha           (with the new h)

For A = the plain mean this is the paper's ``h <- h - (alpha/K_total) sum_{k in R} (theta_k - w)``,
``w_new = mean_{k in R} theta_k - h/alpha``, and the invariant ``h = (1/K_total) sum_k g_k`` holds at
every round, attacked or not. A robust rule breaks the invariant by design, and whatever a
poisoned aggregate puts into h stays there for good: h only ever accumulates. An empty R changes
nothing (neither h nor any g_k).

Guarantee (paper, Theorem 1): for convex smooth F_k, full participation and exact local solves,
FedDyn converges to the minimiser of ``(1/K_total) sum_k F_k`` even when the clients' optima differ
-- at a fixed point ``theta_k = w`` and ``g_k = grad F_k(w)``, so ``h = mean_k grad F_k(w) = 0``.
With inexact local solves (a few gradient steps) the fixed point is the same. FedAvg with many
local steps on heterogeneous clients is biased instead. The unweighted mean over clients equals
the sample-weighted objective when all clients hold the same number of samples.

State: ``g`` is K_total x P (one model per client), allocated at :meth:`setup`, which refuses
(ConfigError, naming the memory needed) when that exceeds half the machine's memory (half the GPU's
memory on CUDA). FedDyn's server step is its own: ``server_lr`` must be 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from .. import params
from ..errors import ConfigError
from .base import Algorithm


def memory_limit_bytes(device: torch.device) -> int:
    """Half of the device's memory: physical RAM on CPU, the GPU's total memory on CUDA."""
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).total_memory) // 2
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES")) // 2
    except (ValueError, OSError, AttributeError):  # platforms without sysconf: no limit we can tell
        return 1 << 62


def check_state_memory(component: str, what: str, needed: int, device: torch.device) -> None:
    """Refuse (ConfigError) per-client state larger than :func:`memory_limit_bytes`."""
    limit = memory_limit_bytes(device)
    if needed > limit:
        raise ConfigError(
            f"{component}: {what} needs {needed / 1e9:.2f} GB, more than the {limit / 1e9:.2f} GB limit "
            f"(half of the {device.type} memory); reduce federation.clients or the model size"
        )


@dataclass
class FedDyn(Algorithm):
    """FedDyn with per-client states ``g`` (K_total, P) and the server state ``h`` (P,)."""

    has_extra_grad: ClassVar[bool] = True

    alpha: float = 0.1
    name = "feddyn"
    g: Tensor = field(init=False, repr=False)
    h: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.alpha = params.number(f"algorithm {self.name}", "alpha", self.alpha, low=0, strict_low=True)
        self._last: dict[str, float] = {}
        self._cache_ids: Tensor | None = None
        self._cache_g: Tensor | None = None

    def state_bytes(self, num_clients: int, dim: int, itemsize: int) -> int:
        return (num_clients + 1) * dim * itemsize

    def setup(self, *, num_clients: int, dim: int, dtype: torch.dtype, device: torch.device) -> None:
        itemsize = torch.empty((), dtype=dtype).element_size()
        needed = self.state_bytes(num_clients, dim, itemsize)
        what = f"per-client state ({num_clients} clients x {dim} parameters x {itemsize} bytes)"
        check_state_memory("algorithm feddyn", what, needed, torch.device(device))
        self.num_clients = num_clients
        self.g = torch.zeros(num_clients, dim, dtype=dtype, device=device)
        self.h = torch.zeros(dim, dtype=dtype, device=device)
        self._last = {"state_norm": 0.0, "correction_magnitude": 0.0, "participation_fraction": 0.0}
        self._cache_ids = self._cache_g = None

    def extra_grad(self, theta: Tensor, w_start: Tensor, ids: Tensor) -> Tensor | None:
        if self._cache_ids is not ids:  # one gather per round, not per local step
            self._cache_ids, self._cache_g = ids, self.g.index_select(0, ids)
        assert self._cache_g is not None
        return self.alpha * (theta - w_start) - self._cache_g

    def server_step(
        self, w: Tensor, delta: Tensor, *, rows: Tensor, ids: Tensor, valid: Tensor, server_lr: float
    ) -> Tensor:
        if server_lr != 1.0:
            raise ConfigError(f"federation.server_lr must be 1 with algorithm feddyn, got {server_lr!r}")
        self._cache_ids = self._cache_g = None
        received = int(valid.sum())
        self._last["participation_fraction"] = received / self.num_clients
        if received == 0:
            return w
        a = self.alpha
        self.g.index_add_(0, ids[valid], rows[valid].to(self.g.dtype), alpha=-a)
        self.h.add_(delta.to(self.h.dtype), alpha=-a * received / self.num_clients)
        h_norm = float(torch.linalg.vector_norm(self.h, dtype=torch.float64))
        self._last["state_norm"], self._last["correction_magnitude"] = h_norm, h_norm / a
        return w + delta - self.h / a

    def stats(self) -> dict[str, float]:
        return dict(self._last)
