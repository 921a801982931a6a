"""The two federation axes besides the defense: the algorithm and the sharing scheme.

* An :class:`Algorithm` decides how clients train (an extra term in the local gradient) and how
  the server steps from the aggregate (FedAvg/FedProx: ``w + server_lr * A(U)``; FedDyn: its own).
* A :class:`Sharing` scheme decides which coordinates travel: where a client starts its local
  training, which coordinates of its trained model it sends, and how the aggregate of those
  coordinates lands in the global model.

Both see whole-round tensors: ``ids`` (S,) are this round's participants, sorted; ``theta`` (S, P)
their trained models. Neither may loop over clients in Python.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor


class Algorithm:
    """FedAvg's behaviour; subclasses override what differs.

    ``has_extra_grad`` declares that :meth:`extra_grad` adds a term to the local gradient (the
    engine then passes the start points along and keeps them apart from the trained rows)."""

    name = "fedavg"
    has_extra_grad: ClassVar[bool] = False

    def setup(self, *, num_clients: int, dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.num_clients = num_clients

    def extra_grad(self, theta: Tensor, w_start: Tensor, ids: Tensor) -> Tensor | None:
        """A term added to each client's local gradient (None: plain local SGD)."""
        return None

    def server_step(
        self,
        w: Tensor,
        delta: Tensor,
        *,
        rows: Tensor,
        ids: Tensor,
        valid: Tensor,
        server_lr: float,
    ) -> Tensor:
        """The new global model from the aggregated update ``delta`` (P,) (zeros where unshared).

        ``rows`` (S, P') are the rows the server received (after the attack), ``valid`` (S,) which
        of them are finite.
        """
        return w + server_lr * delta

    def stats(self) -> dict[str, float]:
        return {}

    def state_bytes(self, num_clients: int, dim: int, itemsize: int) -> int:
        """Memory the algorithm's state needs (for a refusal message before round 1)."""
        return 0


class Sharing:
    """Full sharing: every coordinate travels every round."""

    name = "full"
    #: Declared capability: every participant starts its local training at the global model
    #: (``start_points`` is ``w`` repeated), so the engine may take one-step gradients at one point.
    common_start: ClassVar[bool] = True

    def setup(self, *, num_clients: int, w0: Tensor, generator: torch.Generator) -> None:
        self.dim = w0.numel()

    def begin_round(self, t: int, w: Tensor, ids: Tensor) -> Tensor | None:
        """This round's shared coordinates (None = all)."""
        return None

    def start_points(self, w: Tensor, ids: Tensor) -> Tensor:
        """(S, P): where each participant starts its local training."""
        return w.expand(ids.numel(), -1).clone()

    def rows(self, theta: Tensor, w: Tensor, ids: Tensor) -> Tensor:
        """(S, P') the rows participants send (their update on the shared coordinates).

        ``theta`` is the engine's fresh output and may be consumed (full sharing subtracts in place).
        """
        return theta.sub_(w)

    def restrict(self, v: Tensor) -> Tensor:
        """A full-length vector restricted to this round's shared coordinates."""
        return v

    def expand(self, vec: Tensor) -> Tensor:
        """The aggregate (P',) placed back into a full-length update (zeros where unshared)."""
        return vec

    def end_round(self, w_old: Tensor, w_new: Tensor, received: int) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {}


def create_algorithm(name: str, params: dict[str, Any]) -> Algorithm:
    if name == "fedavg":
        return Algorithm()
    if name == "fedprox":
        from .fedprox import FedProx

        return FedProx(**params)
    if name == "feddyn":
        from .feddyn import FedDyn

        return FedDyn(**params)
    from ..errors import UnknownNameError

    raise UnknownNameError("algorithm", name, ["fedavg", "fedprox", "feddyn"])


def create_sharing(name: str, params: dict[str, Any], *, seed: int) -> Sharing:
    if name == "full":
        return Sharing()
    if name == "psfed":
        from .psfed import PSFed

        return PSFed(seed=seed, **params)
    from ..errors import UnknownNameError

    raise UnknownNameError("sharing", name, ["full", "psfed"])
