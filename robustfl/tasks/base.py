"""What a task provides to the engine.

A :class:`Task` is built from its scenario parameters (``[task]`` minus ``name``); its
:meth:`Task.build` draws the data for one seed and returns a :class:`Problem`: padded per-client
data, a pure (vmappable) loss on a flat parameter vector, the clean objective F and, where it
exists, the exact optimum w*.

Conventions
-----------
* Parameters are one flat ``(P,)`` tensor in ``Problem.dtype`` (float64 for the convex tasks,
  so that w* and drifts of 1e-4 are meaningful; float32 for neural tasks).
* ``layers``: the cumulative end offsets of the model's parameter tensors in that vector, in its
  layout order (``DefenseContext.layers``, which the engine fills from it); None if unknown.
* ``client_data`` is a tuple of tensors, each ``(K_total, n_max, ...)``; ``client_mask`` is
  ``(K_total, n_max)`` bool (True = a real sample; padding is False); ``num_samples`` ``(K_total,)``.
* ``loss(w, batch, mask)`` is the mean loss over the masked samples of one client's batch plus
  the task's regulariser: ``sum(mask_i * l_i) / max(sum(mask), 1) + reg(w)``. It must be a pure
  torch function of its arguments so that ``vmap(grad(loss))`` trains all clients at once.
* F(w) = sum_k n_k F_k(w) / sum_k n_k over the clean data of all clients (sample-weighted).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..types import TaskInfo

LossFn = Callable[[Tensor, tuple[Tensor, ...], Tensor], Tensor]
# (w (P,), batch (S, n, ...), mask (S, n)) -> (S, P): every client's gradient of ``loss`` at one point
SharedGrad = Callable[[Tensor, tuple[Tensor, ...], Tensor], Tensor]


@dataclass
class Partition:
    """How samples are split among clients: ``iid``, ``dirichlet`` (alpha), ``bias`` (q), ``shards``."""

    name: str = "iid"
    alpha: float = 0.5
    q: float = 0.5
    shards_per_client: int = 2


@dataclass
class Problem:
    """One seed's data and model for a task."""

    info: TaskInfo
    dim: int  # P
    dtype: torch.dtype
    loss: LossFn
    client_data: tuple[Tensor, ...]
    client_mask: Tensor  # (K_total, n_max) bool
    num_samples: Tensor  # (K_total,) int64
    objective: Callable[[Tensor], float]  # clean F(w), sample-weighted over all clients
    optimum: Tensor | None = None  # exact w* (None: the reference is the clean run)
    root_data: tuple[Tensor, ...] | None = None  # each (n0, ...): the server's root set
    root_mask: Tensor | None = None  # (n0,) bool
    test_data: tuple[Tensor, Tensor] | None = None  # (x, y) for accuracy
    predict: Callable[[Tensor, Tensor], Tensor] | None = None  # (w, x) -> labels
    extras: dict[str, Any] = field(default_factory=dict)  # task-specific (e.g. ridge's Sigma)
    # where the model's parameter tensors end in w (DefenseContext.layers; None: unknown)
    layers: tuple[int, ...] | None = None
    # each client's gradient of ``loss`` at one shared point in closed form, bit for bit what
    # ``vmap(grad(loss), in_dims=(None, 0, 0))`` gives (None: that is used)
    shared_grad: SharedGrad | None = None

    def init(self, generator: torch.Generator, scale: float) -> Tensor:
        """w0 ~ N(0, scale^2 I), never exactly zero."""
        w = torch.randn(self.dim, generator=generator, dtype=torch.float64) * scale
        w[w == 0] = scale * 1e-3
        return w.to(self.dtype)

    def accuracy(self, w: Tensor) -> float | None:
        if self.test_data is None or self.predict is None:
            return None
        x, y = self.test_data
        with torch.no_grad():
            return float((self.predict(w, x) == y).double().mean())


class Task(ABC):
    """A learning problem; subclasses are dataclasses whose fields are the scenario parameters."""

    name: str = "task"

    @abstractmethod
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
        """Draw one seed's data. ``generator`` is this task's own; ``base_dir`` is the scenario
        file's folder (image tasks resolve ``data_dir`` against it)."""
