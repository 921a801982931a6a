"""Scaling (boosting / model replacement): the rows, or a base attack's, multiplied by a factor lambda
(default K).

Paper: Bagdasaryan, Veit, Hua, Estrin, Shmatikov, "How To Backdoor Federated Learning", AISTATS
2020; Bhagoji, Chakraborty, Mittal, Calo, "Analyzing Federated Learning through an Adversarial
Lens", ICML 2019

``rows = factor * x`` with x = ``own`` (no ``base``) or the rows of the ``base`` attack; ``factor``
lambda defaults to K (``ctx.num_clients``), the boost that lets one client replace the mean.
Breaks FedAvg for any lambda large enough; norm-bounding rules (FLTrust's rescaling, clipping)
undo the magnitude by construction. With ``base = "backdoor"`` (data poisoning forwarded) this is
the FLTrust paper's Scaling attack.

Defaults (docs/attacks.md): ``factor = None`` (K) and ``base = None`` are robustfl's own; the factor the
FLTrust and FoundationFL papers use was not found in the sources available here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from .. import params
from ..types import AttackContext, Knowledge
from ._common import Composite, build_base, num_clients


@dataclass
class Scaling(Composite):
    factor: float | None = None
    base: Any = None
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    @property
    def per_client(self) -> bool:
        return self._base is None or self._base.per_client

    def __post_init__(self) -> None:
        if self.factor is not None:
            self.factor = params.number("attack scaling", "factor", self.factor, low=0)
        self._base = None if self.base is None else build_base("scaling", self.base)
        if self._base is not None:
            self.knowledge = self._base.knowledge | Knowledge.OWN

    def __call__(self, ctx: AttackContext) -> Tensor:
        lam = float(num_clients(ctx)) if self.factor is None else self.factor
        x = ctx.own if self._base is None else self.base_rows(ctx)
        self.last_stats = {**(self.base_stats() if self._base is not None else {}), "factor": lam}
        return lam * x
