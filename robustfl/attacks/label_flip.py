"""Label flipping: data poisoning; the Byzantine clients train honestly on labels l -> C - 1 - l.

Paper: Tolpegin, Truex, Gursoy, Liu, "Data Poisoning Attacks Against Federated Learning Systems",
ESORICS 2020; Fang, Cao, Jia, Gong, "Local Model Poisoning Attacks to Byzantine-Robust Federated
Learning", USENIX Security 2020

The Byzantine clients train honestly on relabelled data, ``l -> C - 1 - l`` for C classes, and
send the rows so trained (``__call__`` returns ``own`` unchanged). Classification tasks only:
:meth:`setup` refuses a regression task with a ConfigError. A weak, realistic attack: the rows
are honest-looking, and robust rules' guarantees hold with the flipped clients counted among f.

The map ``l -> C - 1 - l`` is the one FoundationFL states ("M - y - 1", Section VI-A) and the
FLTrust lineage uses; there are no parameters (docs/attacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..capabilities import AttackBase
from ..errors import ConfigError
from ..types import AttackContext, Knowledge, TaskInfo


@dataclass
class LabelFlip(AttackBase):
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    poisons_data: bool = field(default=True, init=False, repr=False)
    num_classes: int | None = field(default=None, init=False, repr=False)

    def setup(self, info: TaskInfo) -> None:
        if info.num_classes is None or info.num_classes < 2:
            raise ConfigError(
                f"attack label_flip needs a classification task; task {info.name!r} is a regression task")
        self.num_classes = info.num_classes

    def poison(self, x: Tensor, y: Tensor, generator: Any = None) -> tuple[Tensor, Tensor]:
        """(x, C - 1 - y) as new tensors; ``generator`` is unused (the map is deterministic)."""
        if self.num_classes is None:
            raise ConfigError("attack label_flip: setup(task info) must be called before poison()")
        return x.clone(), (self.num_classes - 1) - y.to(torch.int64)

    @property
    def per_client(self) -> bool:
        return True  # data poisoning: the row is the client's own, trained on flipped labels

    def __call__(self, ctx: AttackContext) -> Tensor:
        return ctx.own.clone()
