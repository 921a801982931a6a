"""Oracle-optimised attack: tune one parameter of a base attack against the actual defense.

After ByzFL's "optimal" attacks: a line search over ``parameter`` (default: the base's natural
knob, alie's ``z`` / ipm's ``epsilon`` / ...) of the ``base`` attack (default ``alie``) in
[``low``, ``high``] (default [0, 10]) maximising the deviation

    J(x) = || oracle(base_x(ctx)).vector - mean(honest) ||.

Search: a grid of 21 evenly spaced points (ends included), then ``steps`` (default 30)
golden-section steps inside the bracket around the best grid point (two grid spacings wide, shrunk
by 0.618 a step, one evaluation a step after the first two; 0: the grid alone); the best value ever
evaluated wins (ties: the first). J need not be unimodal (selection rules jump), so the grid gives
global cover and golden-section the local precision. Every evaluation replays the same generator
state, so the rows sent are exactly the rows scored; a base that offers the parameter as a line
(``AttackBase.along``: alie's z, ipm's epsilon) computes what does not depend on it once, the
same rows. Needs ORACLE (the reference case of full knowledge) and the honest rows for the
objective, plus whatever the base needs. ``last_stats``: ``parameter``, ``deviation``,
``evaluations``.

Defaults (docs/attacks.md): ``low = 0`` is ByzFL's ``start = 0.0`` (LPD-EPFL/byzfl,
``Optimal_ALittleIsEnough`` / ``Optimal_InnerProductManipulation``); ByzFL's search is unbounded
(expansion from step ``delta = 10.0``, doubling, then contraction by ``ratio = 0.8``, 20
evaluations), so ``high = 10`` (one ByzFL step) is robustfl's bounded-search choice; ``steps =
30`` (the bracket to 0.618^30 ~ 5e-7 of itself) is robustfl's own too. A search's steps run in the
same order whatever their number, so fewer steps evaluate a prefix of the same sequence: the
result can only be weaker, by what the last steps would have found.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge
from ._common import Composite, build_base, generator

GRID = 21
GOLDEN_STEPS = 30
DEFAULT_PARAMETER = {"alie": "z", "ipm": "epsilon", "scaling": "factor", "sign_flip": "scale",
                     "gaussian": "std", "orthogonal": "norm_factor"}


@dataclass
class Optimal(Composite):
    base: Any = "alie"
    parameter: str | None = None
    low: float = 0.0
    high: float = 10.0
    steps: int = GOLDEN_STEPS
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        c = "attack optimal"
        self.low = params.number(c, "low", self.low)
        self.high = params.number(c, "high", self.high, low=self.low, strict_low=True)
        self.steps = params.number(c, "steps", self.steps, low=0, integer=True)
        self._base = build_base("optimal", self.base)
        spec = self.base if isinstance(self.base, dict) else {"name": self.base}
        self._base_params = {k: v for k, v in spec.items() if k != "name"}
        self._base_name = spec.get("name") if isinstance(spec.get("name"), str) else None
        name = self.parameter or DEFAULT_PARAMETER.get(self._base_name or "")
        if name is None or self._base_name is None:
            raise params.error(c, "parameter", "given for this base (no default)", self.parameter)
        self._param = name
        for x in (self.low, self.high):  # the base must accept the parameter over the whole range
            self._make(x)
        self.knowledge = self._base.knowledge | Knowledge.OWN | Knowledge.HONEST | Knowledge.ORACLE

    def _make(self, x: float) -> Any:
        from . import create

        return create(self._base_name or "", **{**self._base_params, self._param: x})

    def _rows(self, ctx: AttackContext, device: torch.device, state: Tensor, x: float) -> Tensor:
        gen = torch.Generator(device=device)
        gen.set_state(state)
        rows: Tensor = self._make(x)(dataclasses.replace(ctx, generator=gen))
        return rows.to(ctx.own)

    def _line(self, ctx: AttackContext, device: torch.device, state: Tensor) -> Callable[[float], Tensor]:
        """x -> the base's rows with the parameter at x (the base's own line where it offers one)."""
        probe = self._make(self.low)
        if isinstance(probe, AttackBase):
            gen = torch.Generator(device=device)
            gen.set_state(state)
            line = probe.along(dataclasses.replace(ctx, generator=gen), self._param)
            if line is not None:
                return lambda x: line(x).to(ctx.own)
        return lambda x: self._rows(ctx, device, state, x)

    def __call__(self, ctx: AttackContext) -> Tensor:
        if ctx.oracle is None or ctx.honest is None:
            raise InputError("attack optimal: needs the oracle and the honest rows (full knowledge)")
        oracle, target = ctx.oracle, ctx.honest.to(ctx.own).mean(0)
        g = generator(ctx)
        device, state = g.device, g.get_state()
        rows = self._line(ctx, device, state)
        cache: dict[float, float] = {}

        def j(x: float) -> float:
            if x not in cache:
                agg = oracle(rows(x)).vector.to(target)
                dev = float(torch.linalg.vector_norm(agg - target))
                cache[x] = dev if math.isfinite(dev) else -math.inf
            return cache[x]

        grid = [self.low + (self.high - self.low) * i / (GRID - 1) for i in range(GRID)]
        vals = [j(x) for x in grid]
        i = max(range(GRID), key=lambda k: (vals[k], -k))
        a, b = grid[max(i - 1, 0)], grid[min(i + 1, GRID - 1)]
        r = (math.sqrt(5) - 1) / 2
        c, d = b - r * (b - a), a + r * (b - a)
        for _ in range(self.steps):
            if j(c) >= j(d):
                b, d = d, c
                c = b - r * (b - a)
            else:
                a, c = c, d
                d = a + r * (b - a)
        best = max(cache, key=cache.__getitem__)  # the first evaluated among equals
        self.last_stats = {"parameter": best, "deviation": cache[best], "evaluations": float(len(cache))}
        return rows(best)
