"""MPAF: fake clients drag the global model towards an attacker-chosen base model.

Paper: Cao, Gong, "MPAF: Model Poisoning Attacks to Federated Learning based on Fake Clients",
CVPR Workshops 2022 (arXiv 2203.08669)

Every fake (Byzantine) client sends

    ``scale * (w_base - w_t)``,

w_t the round's global model (``ctx.global_model``) and w_base the base model: robustfl draws it
as a standard Gaussian vector N(0, I_P) of the global model's size P from the attack's generator at
the first call of a run, and keeps it in the attack instance for the whole run (a call at round 0
after a call at another round starts a new run and draws a new one). The paper's base model is a
randomly initialised model of low accuracy; a flat N(0, 1) draw is also what Blades' MPAF wrapper
(``torch.randn_like`` per parameter) uses. The rows ignore the clients' own updates and know
nothing about the honest ones (knowledge OWN): the attack needs only the global model, which every
client receives. Against the mean the global model moves by ``server_lr * (f/K) * scale`` times
(w_base - w_t) a round; median- and trimmed-mean-type rules bound a round's step but all fake rows
point the same way, round after round.

``per_client``: True -- row i is a function of the global model and the generator alone (not even
of own[i]). In a Flower client mod each attack instance draws its own base model, so fake clients
served by different instances pull towards different random models (a weaker attack).

Needs ``ctx.global_model`` (a vector of the rows' length): an InputError names it otherwise; the
global model may not change size within a run (partial sharing restricts it to a round's
coordinates, which MPAF cannot follow).

Defaults (docs/attacks.md): ``scale = 1e6`` (the paper's lambda; the paper's text was not available
here to re-check the value, see docs/attacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..types import AttackContext, Knowledge
from ._common import generator, randn


@dataclass
class MPAF(AttackBase):
    scale: float = 1e6
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)
    last_stats: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _base: Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _last_round: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def per_client(self) -> bool:
        return True

    def __post_init__(self) -> None:
        self.scale = params.number("attack mpaf", "scale", self.scale, low=0)

    def base_model(self, ctx: AttackContext) -> Tensor:
        """w_base for this run: drawn at the run's first call (see the module's docstring)."""
        w = ctx.global_model
        p = ctx.own.shape[1]
        if w is None:
            raise InputError("attack mpaf: needs the global model (ctx.global_model)")
        if tuple(w.shape) != (p,):
            raise InputError(f"attack mpaf: global model has shape {tuple(w.shape)}, expected ({p},)")
        t = ctx.round
        new_run = self._base is None or (t == 0 and self._last_round != 0)
        if new_run:
            self._base = randn(generator(ctx), (p,), ctx.own)
        assert self._base is not None
        if self._base.shape[0] != p:
            raise InputError(
                f"attack mpaf: the global model changed size within a run ({self._base.shape[0]} -> {p});"
                " the base model is fixed per run (partial sharing is not supported)"
            )
        self._last_round = t
        return self._base.to(ctx.own)

    def __call__(self, ctx: AttackContext) -> Tensor:
        base = self.base_model(ctx)
        assert ctx.global_model is not None
        diff = base - ctx.global_model.to(ctx.own)
        self.last_stats = {"distance_to_base": float(torch.linalg.vector_norm(diff))}
        return (self.scale * diff).expand_as(ctx.own).clone()
