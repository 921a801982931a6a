"""scikit-learn's bundled handwritten digits (1,797 images of 8x8 pixels, 10 classes).

Pixels are scaled to [0, 1] (the raw values are 0..16) and stored as images ``(n, 1, 8, 8)``
float32, so that data-poisoning attacks (the backdoor trigger) see the picture; the models flatten.
Splits, all drawn from the build generator and disjoint: a class-stratified test set
(``test_fraction``), then the server's root set (``root_size``; ``root_bias`` of it from class 0,
the rest stratified), then the rest partitioned among the clients.

Models: ``mlp`` (64 -> ``hidden`` -> 10, ReLU; default) or ``logreg`` (64 -> 10). Loss:
cross-entropy + (l2/2)||w||^2 (``l2`` = 0 by default). A neural task: no exact optimum, the
reference is the clean run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import params
from ..types import TaskInfo
from ._data import check_common, image_problem, stratified_take
from ._flat import linear, meta_module, mlp
from .base import Partition, Problem, Task

CLASSES = 10
SIDE = 8


@dataclass
class Digits(Task):
    """``model`` = "mlp" ("mlp" | "logreg"), ``hidden`` = 32, ``test_fraction`` = 0.2, ``l2`` = 0."""

    model: str = "mlp"
    hidden: int = 32
    test_fraction: float = 0.2
    l2: float = 0.0

    name = "digits"

    def __post_init__(self) -> None:
        c = "task digits"
        self.model = params.choice(c, "model", self.model, ("mlp", "logreg"))
        self.hidden = params.number(c, "hidden", self.hidden, low=1, integer=True)
        self.test_fraction = params.number(c, "test_fraction", self.test_fraction, low=0.0, high=0.9)
        self.l2 = params.number(c, "l2", self.l2, low=0.0)

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
        from sklearn.datasets import load_digits  # imported when used: a second to import

        raw = load_digits()
        x = torch.as_tensor(raw.images / 16.0, dtype=torch.float32).unsqueeze(1)
        y = torch.as_tensor(raw.target, dtype=torch.long)
        n_test = math.floor(self.test_fraction * y.numel() + 0.5)
        test_idx, rest = stratified_take(y, n_test, generator, CLASSES)
        test = (x[test_idx], y[test_idx]) if n_test > 0 else None
        inputs = SIDE * SIDE
        hidden = self.hidden
        if self.model == "mlp":
            module = meta_module(lambda: mlp(inputs, hidden, CLASSES))
        else:
            module = meta_module(lambda: linear(inputs, CLASSES))
        return image_problem(
            info=TaskInfo(name=self.name, num_classes=CLASSES, input_shape=(1, SIDE, SIDE), is_image=True),
            module=module,
            l2=self.l2,
            pool=(x[rest], y[rest]),
            test=test,
            clients=clients,
            partition=partition,
            root_size=root_size,
            root_bias=root_bias,
            generator=generator,
        )
