"""Helpers shared by the attacks (private).

* :func:`known_rows` -- the rows the attacker knows: the honest rows where HONEST is granted,
  else its own; :func:`mean_std` their coordinate-wise mean and std (population, ddof 0, unless
  an attack passes ``ddof = 1``).
* :func:`generator`, :func:`randn`, :func:`rand` -- randomness from the context's generator only
  (a fresh ``torch.Generator().manual_seed(0)`` when the context has none), drawn on the
  generator's device and moved to the rows' device.
* :func:`build_base` -- a ``base`` parameter (name, ``{"name": ..., **params}`` or an attack
  object) as an attack; :class:`Composite` forwards the base's data poisoning, trigger, setup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..capabilities import AttackBase
from ..errors import InputError
from ..kernels import EPS
from ..registry.adapters import as_attack, declares_knowledge
from ..types import AttackContext, TaskInfo

__all__ = [
    "EPS", "PERTURBATIONS", "Composite", "build_base", "generator",
    "known_rows", "mean_std", "num_clients", "orthogonalise",
    "perturbation", "rand", "randn", "unit",
]


# -- what the attacker knows -------------------------------------------------------------------
def known_rows(ctx: AttackContext) -> Tensor:
    """The honest rows where granted (and non-empty), else the attacker's own rows."""
    if ctx.honest is not None and ctx.honest.shape[0] > 0:
        return ctx.honest.to(ctx.own.dtype)
    return ctx.own


def mean_std(rows: Tensor, ddof: int = 0) -> tuple[Tensor, Tensor]:
    """Coordinate-wise mean and standard deviation with ``ddof`` (0: population, robustfl's default;
    1: unbiased, as ``torch.std`` in Shejwalkar & Houmansadr's code). With fewer than ddof + 1
    rows the deviation is undefined and returned as zeros."""
    if rows.shape[0] <= ddof:
        return rows.mean(0), torch.zeros_like(rows[0])
    return rows.mean(0), rows.std(0, correction=ddof)


def num_clients(ctx: AttackContext) -> int:
    """K: the context's, else f plus the honest rows known, else f."""
    if ctx.num_clients is not None:
        return int(ctx.num_clients)
    return ctx.own.shape[0] + (ctx.honest.shape[0] if ctx.honest is not None else 0)


def unit(v: Tensor) -> Tensor:
    """v / ||v||, or zeros when ||v|| <= eps."""
    n = torch.linalg.vector_norm(v)
    return v / n if float(n) > EPS else torch.zeros_like(v)


def orthogonalise(v: Tensor, a_hat: Tensor) -> Tensor:
    """The component of v orthogonal to the unit vector a_hat (Gram-Schmidt, two passes)."""
    for _ in range(2):
        v = v - (v @ a_hat) * a_hat
    return v


PERTURBATIONS = ("unit", "sign", "std")


def perturbation(kind: str, mu: Tensor, sigma: Tensor) -> Tensor:
    """Shejwalkar & Houmansadr's p: unit -mu/||mu||, sign -sign(mu), std -sigma."""
    if kind == "unit":
        return -unit(mu)
    if kind == "sign":
        return -torch.sign(mu)
    return -sigma


# -- randomness --------------------------------------------------------------------------------
def generator(ctx: AttackContext) -> torch.Generator:
    g = ctx.generator
    return g if g is not None else torch.Generator().manual_seed(0)


def randn(g: torch.Generator, shape: tuple[int, ...], like: Tensor) -> Tensor:
    return torch.randn(shape, generator=g, dtype=like.dtype, device=g.device).to(like.device)


def rand(g: torch.Generator, shape: tuple[int, ...], like: Tensor) -> Tensor:
    return torch.rand(shape, generator=g, dtype=like.dtype, device=g.device).to(like.device)


# -- composite attacks -------------------------------------------------------------------------
def build_base(attack: str, spec: Any) -> AttackBase:
    """A ``base`` parameter as an attack: a registered name, {"name": ..., **params}, or an attack
    object (a plugin's, not deriving from AttackBase, is adapted as the engine adapts it)."""
    from . import create  # here, not at module level: robustfl.attacks imports nothing eagerly

    if isinstance(spec, str):
        return as_attack(create(spec), spec)
    if isinstance(spec, Mapping):
        kw = dict(spec)
        name = kw.pop("name", None)
        if not isinstance(name, str):
            raise params.error(f"attack {attack}", "base", 'a name or a table with a "name" key', dict(spec))
        return as_attack(create(name, **kw), name)
    if isinstance(spec, AttackBase) or (callable(spec) and declares_knowledge(spec)):
        return as_attack(spec, f"{attack}.base")
    raise params.error(f"attack {attack}", "base", "an attack name or a table with a name", spec)


class Composite(AttackBase):
    """Base of the attacks built on a ``base`` attack: answers for its base's data poisoning,
    backdoor trigger, Sybil identities and setup. The subclass stores the base in ``self._base``
    (None where the base is optional and absent). ``scaling`` with ``base = "backdoor"`` thus
    poisons the data like backdoor and scales the trained rows.
    """

    _base: AttackBase | None

    def _the_base(self, what: str) -> AttackBase:
        base = self.__dict__.get("_base")
        if base is None:
            raise NotImplementedError(f"{type(self).__name__} has no base attack to {what}")
        return base

    @property
    def poisons_data(self) -> bool:
        base = self.__dict__.get("_base")
        return base is not None and base.poisons_data

    @property
    def backdoor(self) -> bool:
        base = self.__dict__.get("_base")
        return base is not None and base.backdoor

    @property
    def sybil(self) -> bool:
        base = self.__dict__.get("_base")
        return base is not None and base.sybil

    @property
    def target_label(self) -> int:
        base = self.__dict__.get("_base")
        return 0 if base is None else base.target_label

    def setup(self, info: TaskInfo) -> None:
        base = self.__dict__.get("_base")
        if base is not None:
            base.setup(info)

    def poison(self, x: Tensor, y: Tensor, generator: Any) -> tuple[Tensor, Tensor]:
        return self._the_base("poison data").poison(x, y, generator)

    def trigger(self, x: Tensor) -> Tensor:
        return self._the_base("stamp a trigger").trigger(x)

    def sybil_rows(self, f: int) -> Tensor:
        return self._the_base("mark Sybil rows").sybil_rows(f)

    def base_rows(self, ctx: AttackContext) -> Tensor:
        rows: Tensor = self._the_base("craft rows")(ctx)
        if tuple(rows.shape) != tuple(ctx.own.shape):
            got, want = tuple(rows.shape), tuple(ctx.own.shape)
            raise InputError(f"base attack returned shape {got}, expected {want}")
        return rows.to(dtype=ctx.own.dtype, device=ctx.own.device)

    def base_stats(self) -> dict[str, float]:
        base = self.__dict__.get("_base")
        return {} if base is None else dict(base.last_stats)
