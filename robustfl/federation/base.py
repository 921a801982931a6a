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
    """FedAvg: clients run plain local SGD on F_k; the server steps w <- w + server_lr * A(U).

    Paper: McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of
    Deep Networks from Decentralized Data", AISTATS 2017

    The base class: the other algorithms override what differs.
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
    #: Declared capability: the scheme takes the cell's ``seed`` (a keyword of its constructor).
    takes_seed: ClassVar[bool] = False

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
    """The algorithm registered as ``name`` (built-in or plugin), built with ``params``."""
    from ..errors import PluginError
    from . import algorithm_registry

    obj = algorithm_registry.create(name, **params)
    if not isinstance(obj, Algorithm):
        raise PluginError(f"algorithm {name!r} must derive from robustfl.federation.Algorithm")
    return obj


def create_sharing(name: str, params: dict[str, Any], *, seed: int) -> Sharing:
    """The sharing scheme registered as ``name``, built with ``params`` (and the cell's seed where the
    class declares ``takes_seed``)."""
    from ..errors import PluginError
    from . import sharing_registry

    factory = sharing_registry.get(name)
    takes_seed = isinstance(factory, type) and issubclass(factory, Sharing) and factory.takes_seed
    obj = sharing_registry.create(name, **params, **({"seed": seed} if takes_seed else {}))
    if not isinstance(obj, Sharing):
        raise PluginError(f"sharing scheme {name!r} must derive from robustfl.federation.Sharing")
    return obj


def resolve_params(kind: str, name: str, given: dict[str, Any]) -> dict[str, Any]:
    """A scenario's ``[algorithm]`` / ``[sharing]`` parameters, validated by the component itself
    (built once with them) and completed with its defaults, in its fields' order; the cell's
    ``seed`` is not a scenario parameter."""
    import dataclasses

    from . import algorithm_registry, sharing_registry

    registry = algorithm_registry if kind == "algorithm" else sharing_registry
    if "seed" in given and kind == "sharing":
        from ..errors import ConfigError

        raise ConfigError("sharing.seed is not a scenario key: the cell's seed seeds the sharing scheme")
    from ..errors import ParameterError

    try:
        registry.create(name, **given)  # validates: unknown or bad parameters are errors naming them
    except ParameterError as exc:
        text = str(exc)
        bad = next((k for k in given if f"'{k}'" in text or f"parameter {k} " in text), None)
        raise ParameterError(f"{kind}.{bad}: {text}" if bad else text) from None
    factory = registry.get(name)
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(factory):
        for f in dataclasses.fields(factory):
            if not f.init or f.name == "seed":
                continue
            if f.name in given:
                out[f.name] = given[f.name]
            elif f.default is not dataclasses.MISSING:
                out[f.name] = f.default
    out.update({k: v for k, v in given.items() if k not in out})
    return out
