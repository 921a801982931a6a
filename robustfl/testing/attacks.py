"""Conformance checks for any attack (built-in or plugin), in plain torch.

:func:`check_attack` builds a synthetic round and asserts what every attack owes the runner
(docs/design.md, "An attack"):

* ``knowledge`` is a :class:`~robustfl.types.Knowledge`;
* with a context holding only the granted fields (``honest``, ``reference``, ``oracle`` are None
  unless granted; default grant = the attack's declared ``knowledge``) it returns an ``(f, P)``
  tensor of the input dtype and device -- so it needs no more than it declares;
* it also works when everything is granted (a "better with honest" attack must take both);
* it never mutates the context's tensors;
* two calls with equal-seeded generators return identical rows;
* a data-poisoning attack (``poisons_data``) returns new tensors of the input shapes from
  ``poison`` without mutating its inputs, deterministically per generator.

Each failure is an ``AssertionError`` naming the attack and the broken rule; arguments the
checks cannot run on (``f`` outside [1, k - 1], a non-floating dtype) are a one-line
:class:`~robustfl.errors.ConfigError` or :class:`~robustfl.errors.InputError` instead. The oracle given to
the attack is the plain mean of [candidate rows; honest rows].
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..types import Aggregate, AttackContext, Knowledge, TaskInfo
from .defenses import same

__all__ = ["check_attack", "make_context"]


def make_context(
    *,
    f: int,
    k: int,
    p: int,
    dtype: torch.dtype,
    grant: Knowledge | str,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> AttackContext:
    """A synthetic round: honest rows around a common direction, own rows likewise, a reference
    update near the honest mean, a non-zero global model, and (if granted) a mean-of-rows oracle.
    ``grant``: a :class:`Knowledge` or a level name (``"own"``, ``"honest"``, ``"full"``)."""
    if isinstance(grant, str) and grant in ("own", "honest", "full"):
        grant = Knowledge.grant(grant)
    if not isinstance(grant, Knowledge):
        raise InputError(f"make_context: grant must be a Knowledge or 'own', 'honest', 'full', got {grant!r}")
    k = params.number("make_context", "k", k, low=2, integer=True)
    f = params.number("make_context", "f", f, low=1, high=k - 1, integer=True)
    p = params.number("make_context", "p", p, low=1, integer=True)
    g = torch.Generator().manual_seed(1000 + seed)
    direction = torch.randn(p, generator=g, dtype=torch.float64)
    honest = (direction + 0.5 * torch.randn(k - f, p, generator=g, dtype=torch.float64)).to(dtype).to(device)
    own = (direction + 0.5 * torch.randn(f, p, generator=g, dtype=torch.float64)).to(dtype).to(device)
    reference = (direction + 0.3 * torch.randn(p, generator=g, dtype=torch.float64)).to(dtype).to(device)
    model = torch.randn(p, generator=g, dtype=torch.float64).to(dtype).to(device)

    def oracle(rows: Tensor) -> Aggregate:
        return Aggregate(vector=torch.cat([rows.to(honest), honest]).mean(0))

    return AttackContext(
        own=own,
        round=3,
        num_clients=k,
        global_model=model,
        generator=torch.Generator().manual_seed(seed),
        honest=honest if Knowledge.HONEST in grant else None,
        reference=reference if Knowledge.REFERENCE in grant else None,
        oracle=oracle if Knowledge.ORACLE in grant else None,
    )


def _tensors(ctx: AttackContext) -> dict[str, Tensor]:
    names = ("own", "global_model", "honest", "reference")
    return {n: getattr(ctx, n) for n in names if getattr(ctx, n) is not None}


def _call(attack: Any, ctx: AttackContext, label: str, what: str) -> Tensor:
    before = {n: t.clone() for n, t in _tensors(ctx).items()}
    try:
        out = attack(ctx)
    except Exception as exc:
        raise AssertionError(f"{label}: raised {type(exc).__name__} with {what}: {exc}") from exc
    for n, t in _tensors(ctx).items():
        assert same(t, before[n]), f"{label}: mutated ctx.{n} ({what})"
    own = ctx.own
    assert isinstance(out, Tensor), f"{label}: returned {type(out).__name__}, expected a Tensor ({what})"
    assert tuple(out.shape) == tuple(own.shape), (
        f"{label}: returned shape {tuple(out.shape)}, expected (f, P) = {tuple(own.shape)} ({what})"
    )
    assert out.dtype == own.dtype, f"{label}: returned dtype {out.dtype}, input was {own.dtype} ({what})"
    assert out.device == own.device, f"{label}: returned device {out.device}, input was {own.device} ({what})"
    return out


def check_attack(
    attack: Any,
    *,
    f: int = 3,
    k: int = 10,
    p: int = 50,
    dtype: torch.dtype = torch.float64,
    knowledge: Knowledge | None = None,
) -> None:
    """Assert that ``attack`` honours the attack contract; ``knowledge`` = the grant to test under
    (default: what the attack declares)."""
    if isinstance(attack, str) or not callable(attack):
        raise InputError(f"check_attack takes the attack itself (robustfl.attacks.create({attack!r})?), "
                         f"got {attack!r}")
    params.number("check_attack", "k", k, low=2, integer=True)
    params.number("check_attack", "f", f, low=1, high=k - 1, integer=True)  # one honest row at least
    params.number("check_attack", "p", p, low=1, integer=True)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise InputError(f"check_attack: dtype must be a floating torch.dtype, got {dtype!r}")
    if knowledge is not None and not isinstance(knowledge, Knowledge):
        raise InputError(f"check_attack: knowledge must be a Knowledge or None, got {knowledge!r}")
    label = f"attack {type(attack).__name__}"
    declared = getattr(attack, "knowledge", None)
    assert isinstance(declared, Knowledge), f"{label}: knowledge must be a Knowledge, got {declared!r}"
    grant = (declared if knowledge is None else knowledge) | Knowledge.OWN
    full = Knowledge.OWN | Knowledge.HONEST | Knowledge.REFERENCE | Knowledge.ORACLE
    missing = declared & ~grant
    assert not missing, f"{label}: needs {missing.describe()} which the grant {grant.describe()} lacks"

    for g, what in ((grant, f"only {grant.describe()} granted"), (full, "everything granted")):
        ctx = make_context(f=f, k=k, p=p, dtype=dtype, grant=g)
        first = _call(attack, ctx, label, what)
        again = _call(attack, replace(ctx, generator=torch.Generator().manual_seed(0)), label, what)
        assert same(first, again), f"{label}: two calls with equal-seeded generators differ ({what})"

    if getattr(attack, "poisons_data", False):
        _check_poison(attack, label, dtype)


def _check_poison(attack: Any, label: str, dtype: torch.dtype) -> None:
    setup = getattr(attack, "setup", None)
    if setup is not None:
        setup(TaskInfo(name="check", num_classes=10, input_shape=(1, 8, 8), is_image=True))
    poison = getattr(attack, "poison", None)
    assert callable(poison), f"{label}: poisons_data is True but there is no poison(x, y, generator)"
    g = torch.Generator().manual_seed(7)
    x = torch.rand(20, 1, 8, 8, generator=g, dtype=dtype)
    y = torch.randint(0, 10, (20,), generator=g)
    x0, y0 = x.clone(), y.clone()
    out = [poison(x, y, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert torch.equal(x, x0) and torch.equal(y, y0), f"{label}: poison mutated its inputs"
    (xa, ya), (xb, yb) = out
    assert xa.shape == x.shape and ya.shape == y.shape, f"{label}: poison changed the shapes"
    assert xa.dtype == x.dtype, f"{label}: poison changed the image dtype to {xa.dtype}"
    assert xa is not x and ya is not y, f"{label}: poison must return new tensors"
    assert torch.equal(xa, xb) and torch.equal(ya, yb), f"{label}: poison is not deterministic per generator"
