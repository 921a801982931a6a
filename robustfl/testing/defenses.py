"""The shared property suite for aggregation rules (built-ins, compositions and plugins).

``check_defense(defense, k=..., p=..., seed=...)`` runs, on one seeded (K, P) input, the universal
checks every rule must pass, plus a check for each property the rule declares in its
``properties`` attribute (a set of names from :data:`PROPERTIES`). It raises AssertionError with
a message naming the failed check, and returns the names of the checks it ran. Arguments it
cannot run on (``k = 0``, ``scale = nan``, 1-D ``updates``) are a one-line
:class:`~robustfl.errors.ConfigError` or :class:`~robustfl.errors.InputError` instead.

Universal checks: the output is a (P,) tensor in the input's dtype and device; the inputs (rows
and context tensors) are not modified (a NaN left as NaN is unmodified); two runs with equal
generators (after ``reset()``) agree bit for bit (NaN where the other has NaN); ``weights``,
when not None, are (K,), finite, >= 0 and sum to 1 or are all 0; ``stats`` maps strings to real
numbers; ``reset()`` undoes the state a run leaves behind.

Declared properties are promised inside the rule's regime: they are checked only when the rule
admits (K, f) (``admits(K, f)``, else ``K >= min_clients(f)``, else always), from a fresh state
(``reset()`` before each run); ``A`` is the rule,
``U`` the rows, the context's ``reference`` (a server update) transformed with the rows:
- ``permutation_invariant``: ``A(U[pi]) = A(U)`` and weights permute with the rows (client ids and
  sample counts permuted too); skipped when either run (original or permuted) reports the stat
  ``tie_break`` = 1 (its choice fell to an index tie-break, as Krum's does for K = 3, f = 0) or a
  ``score_gap`` within 64 machine epsilons (a near tie: a pre-aggregation stage before a selection
  rounds differently for permuted rows, e.g. NNM's equal neighbourhoods summed in another order;
  the same near-tie guard applies to the two equivariance checks below);
- ``translation_equivariant``: ``A(U + 1 t^T) = A(U) + t``;
- ``scale_equivariant``: ``A(cU) = c A(U)`` for c > 0 (weights unchanged);
- ``scale_invariant_rows``: ``A(diag(c) U) = A(U)`` for per-row c > 0;
- ``convex_combination``: weights given and ``A(U) = weights^T U`` (all-zero weights: the zero
  update);
- ``coordinate_bounded``: each output coordinate lies in ``[min_k u_kj, max_k u_kj]`` (except the
  zero update with all-zero weights, a rule abstaining).
Comparisons use ``|x - y| <= rtol * max|inputs|`` (rtol default 1e-6 in float64, 1e-3 below).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..types import Aggregate, DefenseContext

PROPERTIES = frozenset(
    {
        "permutation_invariant",
        "scale_invariant_rows",
        "translation_equivariant",
        "scale_equivariant",
        "convex_combination",
        "coordinate_bounded",
    }
)


def gaussian_rows(
    k: int, p: int, *, seed: int, scale: float = 1.0, dtype: torch.dtype = torch.float64
) -> Tensor:
    """``scale * (N(0, I) rows + 0.5 * one shared N(0, I) offset)``, from a generator seeded ``seed``."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(k, p, generator=g, dtype=torch.float64)
    offset = torch.randn(1, p, generator=g, dtype=torch.float64)
    return ((rows + 0.5 * offset) * scale).to(dtype)


def make_defense_context(
    k: int,
    p: int,
    *,
    f: int = 0,
    seed: int = 0,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> DefenseContext:
    """A full DefenseContext for K rows of width P, every field from ``seed`` (generator included);
    ``layers`` splits the row in two (one layer when P = 1)."""
    g = torch.Generator().manual_seed(seed + 7919)
    model = (torch.randn(p, generator=g, dtype=torch.float64) * scale).to(dtype=dtype, device=device)
    ref = (torch.randn(p, generator=g, dtype=torch.float64) * scale).to(dtype=dtype, device=device)
    return DefenseContext(
        round=0,
        global_model=model,
        assumed_byzantine=f,
        client_ids=torch.arange(k, device=device),
        num_samples=torch.randint(1, 100, (k,), generator=g).to(device),
        reference=ref,
        coordinates=None,
        generator=torch.Generator().manual_seed(seed),
        layers=tuple(sorted({e for e in (p // 2, p) if e > 0})),
    )


def _fresh(ctx: DefenseContext, seed: int, **changes: Any) -> DefenseContext:
    return dataclasses.replace(ctx, generator=torch.Generator().manual_seed(seed), **changes)


def same(x: Tensor, y: Tensor) -> bool:
    """Equal in shape and value, NaN equal to NaN at the same places (a NaN row left as it was
    is not a modification, and a NaN output twice is deterministic)."""
    if torch.equal(x, y):
        return True
    return x.shape == y.shape and bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all())


def _check_args(k: int, p: int, seed: int, f: int | None, scale: float, dtype: Any, updates: Any,
                rtol: float | None) -> None:
    """One-line errors for arguments the checks cannot run on (not assertion failures: those
    mean the rule broke the contract)."""
    who = "check_defense"
    if updates is None:
        params.number(who, "k", k, low=1, integer=True)
        params.number(who, "p", p, low=1, integer=True)
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise InputError(f"{who}: dtype must be a floating torch.dtype, got {dtype!r}")
    elif not (isinstance(updates, Tensor) and updates.ndim == 2 and updates.is_floating_point()
              and updates.shape[0] >= 1):
        what = f"{type(updates).__name__} of shape {tuple(getattr(updates, 'shape', ()))}"
        raise InputError(f"{who}: updates must be a floating (K, P) tensor with K >= 1, got a {what}")
    params.number(who, "seed", seed, low=0, high=2**63 - 1, integer=True)
    if f is not None:
        params.number(who, "f", f, low=0, integer=True)
    params.number(who, "scale", scale, low=0, strict_low=True)
    if rtol is not None:
        params.number(who, "rtol", rtol, low=0, strict_low=True)


def _close(x: Tensor, y: Tensor, tol: float, what: str) -> None:
    diff = float((x.to(torch.float64) - y.to(torch.float64)).abs().max()) if x.numel() else 0.0
    assert diff <= tol, f"{what}: max difference {diff:.3e} exceeds {tol:.3e}"


def _tied(agg: Aggregate, dtype: torch.dtype) -> bool:
    """The run's choice fell to an index tie-break, or its score gap is within rounding."""
    gap = agg.stats.get("score_gap")
    near = gap is not None and 0 <= gap <= 64 * torch.finfo(dtype).eps
    return bool(agg.stats.get("tie_break", 0)) or near


def _admitted(defense: Any, k: int, f: int) -> bool:
    if hasattr(defense, "admits"):
        return bool(defense.admits(k, f))
    if hasattr(defense, "min_clients"):
        return k >= int(defense.min_clients(f))
    return True


def _clones(ctx: DefenseContext) -> dict[str, Tensor]:
    return {
        f.name: v.clone() for f in dataclasses.fields(ctx) if isinstance(v := getattr(ctx, f.name), Tensor)
    }


def check_defense(
    defense: Any,
    *,
    k: int = 10,
    p: int = 8,
    seed: int = 0,
    f: int | None = None,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    updates: Tensor | None = None,
    rtol: float | None = None,
) -> list[str]:
    """Run the universal checks and those of the declared properties; returns the checks run.

    ``f`` defaults to max(0, (K - 3) // 4) (inside Bulyan's 4f + 3). ``updates`` overrides the
    seeded Gaussian rows (K, P are then taken from it).
    """
    if isinstance(defense, str) or not callable(defense):
        raise InputError(f"check_defense takes the rule itself (robustfl.defenses.create({defense!r})?), "
                         f"got {defense!r}")
    _check_args(k, p, seed, f, scale, dtype, updates, rtol)
    u = updates if updates is not None else gaussian_rows(k, p, seed=seed, scale=scale, dtype=dtype)
    u = u.to(device)
    k, p = u.shape
    f = max(0, (k - 3) // 4) if f is None else f
    ctx = make_defense_context(k, p, f=f, seed=seed, scale=scale, dtype=u.dtype, device=u.device)
    rtol = rtol if rtol is not None else (1e-6 if u.dtype == torch.float64 else 1e-3)
    props = frozenset(getattr(defense, "properties", frozenset()))
    unknown = props - PROPERTIES
    assert not unknown, f"unknown properties declared: {sorted(unknown)}"
    reset: Callable[[], None] = getattr(defense, "reset", lambda: None)

    def run(rows: Tensor, c: DefenseContext) -> Aggregate:
        reset()
        return defense(rows, _fresh(c, seed))

    ran = ["shape_dtype_device", "no_mutation", "deterministic", "weights", "stats", "reset"]
    before, ctx_before = u.clone(), _clones(ctx)
    a = run(u, ctx)
    assert same(u, before), "the rule modified its input rows"
    for name, v in _clones(ctx).items():
        assert same(v, ctx_before[name]), f"the rule modified ctx.{name}"
    v = a.vector
    assert isinstance(v, Tensor) and tuple(v.shape) == (p,), f"vector shape {tuple(v.shape)} != {(p,)}"
    assert v.dtype == u.dtype, f"vector dtype {v.dtype} != input dtype {u.dtype}"
    assert v.device == u.device, f"vector device {v.device} != input device {u.device}"
    w = a.weights
    if w is not None:
        assert tuple(w.shape) == (k,), f"weights shape {tuple(w.shape)} != {(k,)}"
        assert w.device == u.device, f"weights device {w.device} != input device {u.device}"
        assert bool(torch.isfinite(w).all()) and bool((w >= 0).all()), f"weights must be finite and >= 0: {w}"
        total = float(w.to(torch.float64).sum())
        assert abs(total - 1) <= 1e-6 or total == 0, f"weights sum to {total}, not 1 or 0"
    for key, val in a.stats.items():
        assert isinstance(key, str) and isinstance(val, int | float), (
            f"stat {key!r} = {val!r} is not a number"
        )
    b = run(u, ctx)
    assert same(a.vector, b.vector), "two runs with equal generators differ"
    assert (a.weights is None) == (b.weights is None), "weights present in one run only"
    if a.weights is not None and b.weights is not None:
        assert same(a.weights, b.weights), "two runs with equal generators give different weights"
    defense(u, _fresh(ctx, seed + 1))  # leave state behind, then reset
    assert same(run(u, ctx).vector, a.vector), "reset() does not restore the initial behaviour"

    if not _admitted(defense, k, f):
        return ran
    g = torch.Generator().manual_seed(seed + 104729)
    ref = float(u.abs().max()) if u.numel() else 0.0
    tol = rtol * ref
    if "permutation_invariant" in props:
        perm = torch.randperm(k, generator=g).to(u.device)
        assert ctx.client_ids is not None and ctx.num_samples is not None
        c = dataclasses.replace(ctx, client_ids=ctx.client_ids[perm], num_samples=ctx.num_samples[perm])
        b = run(u[perm], c)
        if not (_tied(a, u.dtype) or _tied(b, u.dtype)):
            ran.append("permutation_invariant")
            _close(b.vector, a.vector, tol, "permutation_invariant")
            if a.weights is not None and b.weights is not None:
                _close(b.weights, a.weights[perm], rtol, "permutation_invariant (weights)")
    if "translation_equivariant" in props:
        t = (torch.randn(p, generator=g, dtype=torch.float64) * (ref or 1.0)).to(u.dtype).to(u.device)
        assert ctx.reference is not None
        b = run(u + t, dataclasses.replace(ctx, reference=ctx.reference + t))
        if not (_tied(a, u.dtype) or _tied(b, u.dtype)):
            ran.append("translation_equivariant")
            _close(b.vector, a.vector + t, rtol * (ref + float(t.abs().max())), "translation_equivariant")
    if "scale_equivariant" in props:
        for c_ in (3.7, 0.37):
            assert ctx.reference is not None
            b = run(u * c_, dataclasses.replace(ctx, reference=ctx.reference * c_))
            if _tied(a, u.dtype) or _tied(b, u.dtype):
                continue
            if "scale_equivariant" not in ran:
                ran.append("scale_equivariant")
            _close(b.vector, a.vector * c_, tol * c_, f"scale_equivariant (c = {c_})")
            if a.weights is not None and b.weights is not None:
                _close(b.weights, a.weights, rtol, f"scale_equivariant (weights, c = {c_})")
    if "scale_invariant_rows" in props:
        ran.append("scale_invariant_rows")
        c_rows = (0.5 + 1.5 * torch.rand(k, generator=g, dtype=torch.float64)).to(u.dtype).to(u.device)
        b = run(u * c_rows[:, None], ctx)
        _close(b.vector, a.vector, tol, "scale_invariant_rows")
    abstains = a.weights is not None and bool((a.weights == 0).all())
    if abstains:
        assert bool((a.vector == 0).all()), "all-zero weights but a non-zero update"
    if "convex_combination" in props:
        ran.append("convex_combination")
        assert a.weights is not None, "convex_combination declared but no weights returned"
        if not abstains:
            combo = a.weights.to(torch.float64) @ u.to(torch.float64)
            _close(a.vector, combo, tol, "convex_combination (vector != weights^T U)")
    if "coordinate_bounded" in props and not abstains:
        ran.append("coordinate_bounded")
        lo, hi = u.min(0).values.to(torch.float64), u.max(0).values.to(torch.float64)
        out = a.vector.to(torch.float64)
        excess = float(torch.maximum(lo - out, out - hi).max())
        assert excess <= tol, f"coordinate_bounded: output leaves the rows' range by {excess:.3e}"
    return ran
