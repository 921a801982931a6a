"""Sybil: several Byzantine identities send one crafted vector (near-duplicates).

Paper: Fung, Yoon, Beschastnikh, "The Limitations of Federated Learning in Sybil Settings", RAID
2020

The first ``identities`` of the f Byzantine rows (default all; more than f means all f) send
``v + jitter * z_i`` with v the mean of the ``base`` attack's rows (base default ``sign_flip``, so
v = -mean(own)) and z_i ~ N(0, I) independent per identity (``jitter`` 0 by default: exact
duplicates, so duplicate filters can be tested); the other Byzantine rows send their own honest
rows. :meth:`sybil_rows` marks the Sybil rows so the runner can report their total weight.
Similarity-based rules (FoolsGold) down-weight the near-duplicates; averaging rules give them
f/K of the weight.

Defaults (docs/attacks.md): ``identities = None`` (all), ``base = "sign_flip"``, ``jitter = 0`` are
robustfl's own; FoolsGold's Sybils are label-flipping clients, not a numeric setting to copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..types import AttackContext, Knowledge
from ._common import Composite, build_base, generator, randn


@dataclass
class Sybil(Composite):
    identities: int | None = None
    base: Any = "sign_flip"
    jitter: float = 0.0
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    sybil = True  # sybil_rows(f): which rows are the one identity's copies

    def __post_init__(self) -> None:
        c = "attack sybil"
        if self.identities is not None:
            self.identities = params.number(c, "identities", self.identities, low=1, integer=True)
        self.jitter = params.number(c, "jitter", self.jitter, low=0)
        self._base = build_base("sybil", self.base)
        self.knowledge = self._base.knowledge | Knowledge.OWN

    def sybil_rows(self, f: int) -> Tensor:
        """(f,) bool: True for the rows that are Sybil identities (the first ``identities``)."""
        n = f if self.identities is None else min(self.identities, f)
        return torch.arange(f) < n

    def __call__(self, ctx: AttackContext) -> Tensor:
        f = ctx.own.shape[0]
        v = self.base_rows(ctx).mean(0)
        mask = self.sybil_rows(f).to(ctx.own.device)
        n = int(mask.sum())
        rows = ctx.own.clone()
        crafted = v.expand(n, -1)
        if self.jitter > 0:
            crafted = crafted + self.jitter * randn(generator(ctx), (n, v.shape[0]), v)
        rows[mask] = crafted
        self.last_stats = {**self.base_stats(), "identities": float(n)}
        return rows
