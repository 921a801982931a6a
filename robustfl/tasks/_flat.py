"""A flat (P,) parameter vector for an ``nn.Module``.

:class:`FlatModel` records the module's parameter names, shapes and offsets once;
``unflatten(w)`` returns a dict of views into ``w`` and ``forward(w, x)`` evaluates the module with
:func:`torch.func.functional_call` on them. Nothing is copied into the module, so the call is a
pure function of ``w`` and works under ``torch.func.vmap`` / ``grad`` over a leading client
dimension of ``w``. The module itself only supplies the architecture: build it on the ``meta``
device (:func:`meta_module`), so that constructing it neither allocates nor touches the global RNG
(its initial values are never used: the engine draws w0).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from .base import LossFn


class FlatModel:
    """Evaluate ``module`` on flat parameter vectors (parameters in ``named_parameters`` order)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.names: list[str] = []
        self.shapes: list[torch.Size] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        offset = 0
        for name, p in module.named_parameters():
            self.names.append(name)
            self.shapes.append(p.shape)
            self.offsets.append(offset)
            self.sizes.append(math.prod(p.shape))
            offset += self.sizes[-1]
        self.numel = offset

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        """Views of ``w`` (P,) shaped as the module's parameters.

        One ``split`` rather than one slice per parameter: a slice's backward writes its gradient
        into a zero (P,) tensor and the slices' gradients are then added (per parameter, per
        client, per step); split's backward is one concatenation. Same values, bit for bit.
        """
        parts = torch.split(w, self.sizes)
        return {
            name: part.reshape(shape)
            for name, shape, part in zip(self.names, self.shapes, parts, strict=True)
        }

    def flatten(self, params: dict[str, Tensor]) -> Tensor:
        """The inverse of :meth:`unflatten`."""
        return torch.cat([params[name].reshape(-1) for name in self.names])

    def __call__(self, w: Tensor, x: Tensor) -> Tensor:
        return functional_call(self.module, self.unflatten(w), (x,))


def meta_module(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` on the meta device: shapes only, no storage, no global RNG draws."""
    with torch.device("meta"):
        return build()


def classifier_loss(model: FlatModel, l2: float) -> LossFn:
    """Mean cross-entropy over the masked samples + (l2/2)||w||^2; batch = (x, y)."""

    def loss(w: Tensor, batch: tuple[Tensor, ...], mask: Tensor) -> Tensor:
        x, y = batch
        logits = model(w, x)
        # cross-entropy written out: F.cross_entropy under vmap costs ~5 s of set-up on first use
        per_sample = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        m = mask.to(per_sample.dtype)
        value = (m * per_sample).sum() / m.sum().clamp(min=1.0)
        if l2 > 0.0:
            value = value + 0.5 * l2 * (w * w).sum()
        return value

    return loss


def classifier_predict(model: FlatModel) -> Callable[[Tensor, Tensor], Tensor]:
    """(w, x) -> argmax of the logits."""

    def predict(w: Tensor, x: Tensor) -> Tensor:
        return model(w, x).argmax(dim=-1)

    return predict


def mlp(inputs: int, hidden: int, classes: int) -> nn.Module:
    """Flatten -> Linear(inputs, hidden) -> ReLU -> Linear(hidden, classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def linear(inputs: int, classes: int) -> nn.Module:
    """Flatten -> Linear(inputs, classes): multinomial logistic regression."""
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs, classes))


def small_cnn(side: int, classes: int) -> nn.Module:
    """Conv(1->8, 5x5) -> ReLU -> MaxPool 2 -> Conv(8->16, 5x5) -> ReLU -> MaxPool 2 -> Linear."""
    after = ((side - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(1, 8, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * after * after, classes),
    )


def fltrust_cnn(side: int, classes: int) -> nn.Module:
    """FLTrust's MNIST CNN (Cao et al., NDSS 2021, the CNN architecture table for MNIST):
    Conv(1->30, 3x3) -> ReLU -> MaxPool 2 -> Conv(30->50, 3x3) -> ReLU -> MaxPool 2 -> Linear 100 -> ReLU
    -> Linear(100, classes); 139,960 parameters on 28x28 MNIST."""
    after = ((side - 2) // 2 - 2) // 2
    return nn.Sequential(
        nn.Conv2d(1, 30, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(30, 50, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(50 * after * after, 100),
        nn.ReLU(),
        nn.Linear(100, classes),
    )
