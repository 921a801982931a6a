"""The shared property suite (robustfl.testing.defenses) on every robust rule and on compositions,
and Byzantine-resilience properties with Hypothesis-chosen Byzantine rows up to 1e12.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import robustfl.defenses as D
from robustfl.defenses.compose import build_defense
from robustfl.registry import BUILTIN, Entry
from robustfl.testing.defenses import check_defense
from robustfl.testing.strategies import SCALES, update_matrices, with_byzantine
from robustfl.types import DefenseContext

from ..factories import REQUIRED, builtins, create_builtin

COMPOSED: dict[str, dict[str, Any]] = {  # compositions and settings beyond the registry's defaults
    "nnm+krum": {"name": "krum", "pre": ["nnm"]},
    "bucketing+median": {"name": "median", "pre": [{"name": "bucketing", "size": 2}]},
    "arc+trimmed_mean": {"name": "trimmed_mean", "pre": ["arc"]},
    "clipping+geometric_median": {"name": "geometric_median", "pre": [{"name": "clipping", "tau": 1.0}]},
    "nnm+bucketing+multi_krum": {"name": "multi_krum", "pre": ["nnm", {"name": "bucketing", "size": 3}]},
}
PRE_THEN = "fedavg"  # the rule each built-in pre-aggregator is checked in front of (it declares the most)


def _composed(spec: dict[str, Any]) -> Any:
    return build_defense(spec)[1]


def property_cases() -> dict[str, Callable[[], Any]]:
    """What the suite checks, by label: every built-in rule of the defense registry, every built-in
    pre-aggregator of ``pre_registry`` before ``PRE_THEN``, then the hand-picked compositions and
    settings (COMPOSED, centered clipping with tau). Read from the registries when called."""
    cases: dict[str, Callable[[], Any]] = {
        name: partial(create_builtin, D.registry, name) for name in builtins(D.registry)
    }
    for pre in builtins(D.pre_registry):
        stage = {"name": pre, **REQUIRED.get((D.pre_registry.kind, pre), {})}
        cases[f"{pre}+{PRE_THEN}"] = partial(_composed, {"name": PRE_THEN, "pre": [stage]})
    cases.update({label: partial(_composed, spec) for label, spec in COMPOSED.items()})
    cases["centered_clipping(tau=0.5)"] = lambda: D.create("centered_clipping", tau=0.5, iterations=2)
    return cases


FACTORIES = property_cases()


@pytest.mark.parametrize("label", sorted(FACTORIES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(1, 13),
    p=st.integers(1, 9),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from(SCALES),
    float32=st.booleans(),
)
def test_property_suite(label: str, k: int, p: int, seed: int, scale: float, float32: bool) -> None:
    dtype = torch.float32 if float32 else torch.float64
    ran = check_defense(FACTORIES[label](), k=k, p=p, seed=seed, scale=scale, dtype=dtype)
    assert {"no_mutation", "deterministic", "weights"} <= set(ran)


def test_declared_properties() -> None:
    """What each rule declares (the suite checks exactly these)."""
    equi = {"translation_equivariant", "scale_equivariant"}
    sel = {"permutation_invariant", "convex_combination", "coordinate_bounded"} | equi
    expected = {
        "krum": sel,
        "multi_krum": sel,
        "geometric_median": sel,
        "dnc": sel,
        "median": {"permutation_invariant", "coordinate_bounded"} | equi,
        "trimmed_mean": {"permutation_invariant", "coordinate_bounded"} | equi,
        "bulyan": {"coordinate_bounded"} | equi,
        "centered_clipping": {"permutation_invariant", "scale_equivariant"},
        "foolsgold": {
            "permutation_invariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        },
        "flame": {"permutation_invariant", "scale_equivariant"},
    }
    for name, props in expected.items():
        assert D.create(name).properties == props, name
    assert D.create("centered_clipping", tau=1.0).properties == {"permutation_invariant"}
    assert build_defense(COMPOSED["nnm+krum"])[1].properties == sel
    assert build_defense(COMPOSED["bucketing+median"])[1].properties == {"coordinate_bounded"} | equi


@pytest.mark.parametrize("f", [0, 3, 4])
def test_bulyan_permutation_invariant_when_no_pick_ties_structurally(f: int) -> None:
    """f = 0 or f >= 3: every repeated-Krum pick has 0 or >= 2 neighbours, no structural tie."""
    g = torch.Generator().manual_seed(f)
    for _ in range(5):
        u = torch.randn(4 * f + 3 + 2, 6, generator=g, dtype=torch.float64)
        ctx = DefenseContext(assumed_byzantine=f)
        perm = torch.randperm(len(u), generator=g)
        out, pout = D.create("bulyan")(u, ctx).vector, D.create("bulyan")(u[perm], ctx).vector
        torch.testing.assert_close(pout, out, rtol=1e-13, atol=1e-13)


def _honest_and_f(draw: Any, min_k: Callable[[int], int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    f = draw(st.integers(0, 4))
    h_min = min_k(f) - f
    honest = draw(
        update_matrices(min_k=h_min, max_k=h_min + 4, min_p=1, max_p=6, scale=draw(st.sampled_from(SCALES)))
    )
    rows, honest_idx = draw(with_byzantine(honest, f))
    return rows, honest_idx, f


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_median_and_trimmed_mean_stay_in_the_honest_range(data: st.DataObject) -> None:
    rows, hidx, f = _honest_and_f(data.draw, lambda f: 2 * f + 1)
    honest = rows[hidx]
    lo, hi = honest.min(0).values, honest.max(0).values
    tol = 1e-12 * float(honest.abs().max())
    for name in ("median", "trimmed_mean"):
        out = D.create(name)(rows, DefenseContext(assumed_byzantine=f)).vector
        assert bool((out >= lo - tol).all()) and bool((out <= hi + tol).all()), name


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_krum_lands_near_an_honest_row(data: st.DataObject) -> None:
    """K >= 2f + 3, <= f Byzantine: ||Krum - some honest row|| <= sqrt(K - f - 2) diam(honest)."""
    rows, hidx, f = _honest_and_f(data.draw, lambda f: 2 * f + 3)
    k = len(rows)
    out = D.create("krum")(rows, DefenseContext(assumed_byzantine=f)).vector.numpy()
    honest = rows[hidx].numpy()
    diam = max(float(np.linalg.norm(a - b)) for a in honest for b in honest)
    nearest = min(float(np.linalg.norm(out - h)) for h in honest)
    assert nearest <= math.sqrt(k - f - 2) * diam * (1 + 1e-9) + 1e-12 * float(np.abs(honest).max())


def test_the_suite_is_registry_driven(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in rule or pre-aggregator taken out of its registry's table leaves the suite; one
    added joins it; a plugin (another origin) does not."""
    before = property_cases()
    assert {"krum", f"nnm+{PRE_THEN}"} <= set(before)
    rules = dict(D.registry._entries)
    del rules["krum"]
    rules["brand_new"] = Entry("brand_new", "robustfl.defenses.median:Median", BUILTIN)
    rules["someones_plugin"] = Entry("someones_plugin", "robustfl.defenses.median:Median", "plugin file x.py")
    pres = dict(D.pre_registry._entries)
    del pres["nnm"]
    pres["new_pre"] = Entry("new_pre", "robustfl.defenses.pre.arc:ARC", BUILTIN)
    monkeypatch.setattr(D.registry, "_entries", rules)
    monkeypatch.setattr(D.pre_registry, "_entries", pres)
    after = property_cases()
    assert set(after) == set(before) - {"krum", f"nnm+{PRE_THEN}"} | {"brand_new", f"new_pre+{PRE_THEN}"}
    assert "nnm+krum" in after  # the hand-picked compositions stay
