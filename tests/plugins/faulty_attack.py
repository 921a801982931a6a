"""Test-only attack (loaded with --plugin) for fault injection: a sign flip that misbehaves on cue.

``faulty`` sends ``-own`` (a sign flip) every round, except that while the file ``marker`` exists
it does its ``mode`` at round ``at_round`` (0-based): ``raise`` raises RuntimeError, ``nan`` sends
NaN rows, ``sleep`` sleeps ``sleep`` seconds first (so a ``--cell-timeout`` fires) -- in one cell
only: the cell that gets to delete the marker (atomic across processes) sleeps, the others go
on. Deleting the marker makes a fault transient: a retried cell then gives exactly the plain
sign flip.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from robustfl.types import AttackContext, Knowledge


@dataclass
class FaultyAttack:
    mode: str = "raise"
    at_round: int = 0
    marker: str = ""
    sleep: float = 30.0
    knowledge: Knowledge = Knowledge.OWN

    def __call__(self, ctx: AttackContext) -> torch.Tensor:
        if ctx.round == self.at_round and self.marker and os.path.exists(self.marker):
            if self.mode == "raise":
                raise RuntimeError(f"injected fault at round {self.at_round}")
            if self.mode == "sleep":
                try:
                    os.remove(self.marker)
                except FileNotFoundError:  # another cell took it
                    return -ctx.own
                time.sleep(self.sleep)
            if self.mode == "nan":
                return torch.full_like(ctx.own, float("nan"))
        return -ctx.own


ATTACKS = {"faulty": FaultyAttack}
