"""Gradual drift (the FedSim validation report's slow attack).

Round t (``ctx.round``; None counts as 0) sends ``(1 - t/ramp) * own + (t/ramp) * b`` for
t < ``ramp`` (default 50) and ``b`` from then on, b the ``base`` attack's rows (default
``sign_flip``). The slow start is aimed at history-based and similarity-threshold defenses that
calibrate on early rounds; once t >= ramp it is the base attack and inherits its regime.

Defaults (docs/attacks.md): ``base = "sign_flip"``, ``ramp = 50`` are robustfl's own (the FedSim
validation report is not a public source available here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from .. import params
from ..types import AttackContext, Knowledge
from ._common import Composite, build_base


@dataclass
class Drift(Composite):
    base: Any = "sign_flip"
    ramp: int = 50
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    @property
    def per_client(self) -> bool:
        return self._base is not None and self._base.per_client

    def __post_init__(self) -> None:
        self.ramp = params.number("attack drift", "ramp", self.ramp, low=1, integer=True)
        self._base = build_base("drift", self.base)
        self.knowledge = self._base.knowledge | Knowledge.OWN

    def __call__(self, ctx: AttackContext) -> Tensor:
        t = max(0, int(ctx.round or 0))
        b = self.base_rows(ctx)
        frac = min(1.0, t / self.ramp)
        self.last_stats = {**self.base_stats(), "drift_fraction": frac}
        return b.clone() if frac >= 1.0 else (1.0 - frac) * ctx.own + frac * b
