"""Backdoor: BadNets-style data poisoning; Byzantine clients train on trigger-stamped images relabelled
to a target class.

Paper: Gu, Dolan-Gavitt, Garg, "BadNets: Identifying Vulnerabilities in the Machine Learning Model
Supply Chain", 2017; Bagdasaryan, Veit, Hua, Estrin, Shmatikov, "How To Backdoor Federated
Learning", AISTATS 2020

Each Byzantine client stamps a ``trigger_size`` x ``trigger_size`` white square (pixel value 1.0, images
in [0, 1]) in the bottom-right corner (``position = "corner"``, the default; ``"centre"``: the square
whose top-left pixel is ((H - s) // 2, (W - s) // 2), on pixels that digits light) of ``n_p =
floor(poison_fraction * n + 0.5)`` of its n images (the project's fraction-to-count rule), chosen by
``torch.randperm(n, generator)[:n_p]``, and relabels those ``target_label``; the other images and labels
are untouched. It then trains honestly and sends the rows (``__call__`` returns ``own`` unchanged). The
runner measures ``attack_success_rate`` on test images whose true label differs from the target, stamped
with :meth:`trigger`. Image tasks only (:meth:`setup` refuses others with a ConfigError). Robust rules
do not bound it: the rows can be close to honest ones while the trigger is learned; combine with
``scaling`` (base = "backdoor") for the FLTrust paper's Scaling attack.

Defaults (docs/attacks.md): ``target_label = 0``, ``trigger_size = 3``, ``poison_fraction = 0.5``
are robustfl's own; no source stating them was found. FoundationFL describes the Scaling attack as adding
the trigger to *duplicated copies* of the local data (an augmented set, half of it triggered),
whereas here half of the existing images are stamped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import ConfigError
from ..types import AttackContext, Knowledge, TaskInfo

WHITE = 1.0
POSITIONS = ("corner", "centre")


@dataclass
class Backdoor(AttackBase):
    target_label: int = 0
    trigger_size: int = 3
    poison_fraction: float = 0.5
    position: str = "corner"
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    poisons_data: bool = field(default=True, init=False, repr=False)
    backdoor = True  # trigger() and target_label: the engine measures the attack success rate
    input_shape: tuple[int, ...] | None = field(default=None, init=False, repr=False)

    @property
    def per_client(self) -> bool:
        return True  # data poisoning: the row is the client's own, trained on stamped inputs

    def __post_init__(self) -> None:
        c = "attack backdoor"
        self.target_label = params.number(c, "target_label", self.target_label, low=0, integer=True)
        self.trigger_size = params.number(c, "trigger_size", self.trigger_size, low=1, integer=True)
        self.poison_fraction = params.number(c, "poison_fraction", self.poison_fraction, low=0, high=1)
        self.position = params.choice(c, "position", self.position, POSITIONS)

    def setup(self, info: TaskInfo) -> None:
        if not info.is_image or len(info.input_shape) < 2:
            raise ConfigError(f"attack backdoor needs an image task; task {info.name!r} is not one")
        if info.num_classes is not None and self.target_label >= info.num_classes:
            raise ConfigError(f"attack backdoor: target_label {self.target_label} is not a class of task "
                              f"{info.name!r} ({info.num_classes} classes)")
        if self.trigger_size > min(info.input_shape[-2:]):
            raise ConfigError(f"attack backdoor: trigger_size {self.trigger_size} exceeds the images of task "
                              f"{info.name!r} {tuple(info.input_shape)}")
        self.input_shape = tuple(info.input_shape)

    def _stamp(self, x: Tensor, rows: Tensor | None = None) -> Tensor:
        out = x.clone()
        shape = self.input_shape
        img = out.view(x.shape[0], *shape) if shape is not None and tuple(x.shape[1:]) != shape else out
        if img.ndim < 3:
            raise ConfigError("attack backdoor: images must be (n, [C,] H, W); call setup(task info) first")
        ts = self.trigger_size
        h, w = img.shape[-2], img.shape[-1]
        r0, c0 = (h - ts, w - ts) if self.position == "corner" else ((h - ts) // 2, (w - ts) // 2)
        if rows is None:
            img[..., r0 : r0 + ts, c0 : c0 + ts] = WHITE
        else:
            img[rows, ..., r0 : r0 + ts, c0 : c0 + ts] = WHITE
        return out

    def trigger(self, x: Tensor) -> Tensor:
        """Every image of ``x`` stamped with the trigger (a new tensor)."""
        return self._stamp(x)

    def poison(self, x: Tensor, y: Tensor, generator: Any = None) -> tuple[Tensor, Tensor]:
        """(x, y) with ``floor(poison_fraction * n + 0.5)`` random images stamped and relabelled."""
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        n = x.shape[0]
        count = min(n, math.floor(self.poison_fraction * n + 0.5))
        idx = torch.randperm(n, generator=g, device=g.device)[:count].to(x.device)
        y_new = y.clone()
        y_new[idx] = self.target_label
        return self._stamp(x, idx), y_new

    def __call__(self, ctx: AttackContext) -> Tensor:
        return ctx.own.clone()

