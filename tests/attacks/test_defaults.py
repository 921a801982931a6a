"""Every attack's defaults, pinned to the values docs/attacks.md documents with their sources; the
Min-Max / Min-Sum reproduction knobs (gamma_max, ddof) checked against independent references."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.attacks._common import mean_std
from robustfl.errors import ParameterError

from ..factories import attack_ctx as ctx
from ..factories import np_

# attack -> {parameter: default}; the sources are in docs/attacks.md (one row per parameter)
DEFAULTS: dict[str, dict[str, Any]] = {
    "alie": {"z": None},
    "backdoor": {"target_label": 0, "trigger_size": 3, "poison_fraction": 0.5, "position": "corner"},
    "drift": {"base": "sign_flip", "ramp": 50},
    "fang_krum": {},
    "fang_trim": {},
    "fltrust_adaptive": {"steps": 10, "lr": 0.01, "variant": "gradient"},
    "gaussian": {"std": 200.0, "mean": "zero"},
    "ipm": {"epsilon": 0.1},
    "label_flip": {},
    "mimic": {"target": None},
    "min_max": {"perturbation": "std", "gamma_max": None, "ddof": 0},
    "min_sum": {"perturbation": "std", "bound": "min", "gamma_max": None, "ddof": 0},
    "mpaf": {"scale": 1e6},
    "none": {},
    "optimal": {"base": "alie", "parameter": None, "low": 0.0, "high": 10.0, "steps": 30},
    "orthogonal": {"norm_factor": 1.0, "angle": None},
    "rop": {"z": None, "angle": 270.0, "pi": 1.0, "lam": 0.9, "server_lr": 1.0},
    "scaling": {"factor": None, "base": None},
    "sign_flip": {"scale": 1.0, "source": "own"},
    "similarity_poisoning": {"target_similarity": None, "target": "update"},
    "sybil": {"identities": None, "base": "sign_flip", "jitter": 0.0},
    "worst_case": {"budget": 200, "gradient": True},
}

DOC = Path(__file__).resolve().parents[2] / "docs" / "attacks.md"


def init_fields(obj: object) -> dict[str, Any]:
    assert dataclasses.is_dataclass(obj)
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}


def test_every_builtin_is_pinned() -> None:
    assert set(DEFAULTS) == {n for n in attacks.names() if attacks.origin(n) == "built-in"}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_defaults_are_the_documented_ones(name: str) -> None:
    got = init_fields(attacks.create(name))
    assert set(got) == set(DEFAULTS[name]), "a parameter was added or removed: document it and pin it"
    for p, want in DEFAULTS[name].items():
        assert type(got[p]) is type(want) and got[p] == want, (name, p, got[p], want)


def doc_rows() -> dict[tuple[str, str], str]:
    """(attack, parameter) -> the 'robustfl default' cell of docs/attacks.md's table."""
    rows: dict[tuple[str, str], str] = {}
    pat = re.compile(r"^\|\s*`(\w+)`\s*\|\s*(`(\w+)`|—)\s*\|\s*([^|]*?)\s*\|")
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = pat.match(line)
        if m:
            rows[(m.group(1), m.group(3) or "—")] = m.group(4)
    return rows


def test_doc_table_matches_the_code() -> None:
    rows = doc_rows()
    for name, params in DEFAULTS.items():
        if not params:
            assert (name, "—") in rows, f"docs/attacks.md: no row for {name}"
        for p, want in params.items():
            assert (name, p) in rows, f"docs/attacks.md: no row for {name}.{p}"
            assert rows[(name, p)] == f"`{want!r}`", (name, p, rows[(name, p)])
    documented = {k for k in rows if k[1] != "—"}
    assert documented == {(n, p) for n, ps in DEFAULTS.items() for p in ps}


# -- ddof: against numpy ------------------------------------------------------------------------
@pytest.mark.parametrize("ddof", [0, 1])
def test_mean_std_ddof_is_numpys(ddof: int) -> None:
    u = torch.randn(7, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mu, sigma = mean_std(u, ddof)
    np.testing.assert_allclose(np_(mu), np_(u).mean(0), rtol=1e-12)
    np.testing.assert_allclose(np_(sigma), np_(u).std(0, ddof=ddof), rtol=1e-12)


def test_mean_std_one_row_unbiased_is_zero() -> None:
    mu, sigma = mean_std(torch.ones(1, 3, dtype=torch.float64), 1)
    assert torch.equal(sigma, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(mu, torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
def test_ddof_does_not_move_the_uncapped_row(name: str) -> None:
    c = ctx(f=2, n=6, p=9, seed=4)
    a0, a1 = attacks.create(name, ddof=0), attacks.create(name, ddof=1)
    m0, m1 = np_(a0(c)), np_(a1(c))
    np.testing.assert_allclose(m0, m1, rtol=1e-10, atol=1e-12)
    n = 6  # gamma scales back by sigma_0 / sigma_1 = sqrt((n - 1) / n)
    assert a1.last_stats["gamma"] == pytest.approx(a0.last_stats["gamma"] * math.sqrt((n - 1) / n), rel=1e-10)


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
@pytest.mark.parametrize("ddof", [0, 1])
def test_binding_cap_sends_mu_minus_cap_sigma(name: str, ddof: int) -> None:
    c = ctx(f=2, n=6, p=9, seed=4)
    u = np_(c.honest)
    cap = 0.05  # far below the constraint's gamma for these rows
    m = np_(attacks.create(name, gamma_max=cap, ddof=ddof)(c))
    np.testing.assert_allclose(m[0], u.mean(0) - cap * u.std(0, ddof=ddof), rtol=1e-12)


# -- gamma_max: against an independent bisection and a hand-computed case ----------------------
def feasible(name: str, m: np.ndarray, u: np.ndarray) -> bool:
    d = ((u[:, None, :] - u[None, :, :]) ** 2).sum(-1)
    to_m = ((u - m) ** 2).sum(1)
    if name == "min_max":
        return bool(to_m.max() <= d.max() * (1 + 1e-12))
    return bool(to_m.sum() <= d.sum(1).min() * (1 + 1e-12))


def bisect_gamma(name: str, u: np.ndarray, p: np.ndarray, hi: float) -> float:
    """Largest feasible gamma in [0, hi] by plain bisection (the feasible set is an interval from 0)."""
    mu = u.mean(0)
    if feasible(name, mu + hi * p, u):
        return hi
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if feasible(name, mu + mid * p, u) else (lo, mid)
    return lo


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
@pytest.mark.parametrize("scale", [1.0, 100.0])  # gamma below the cap, then far above it
def test_capped_gamma_is_the_capped_search(name: str, scale: float) -> None:
    c = ctx(f=2, n=7, p=11, seed=8)
    assert c.honest is not None
    honest = c.honest * scale
    c = dataclasses.replace(c, honest=honest)
    u = np_(honest)
    mu = u.mean(0)
    p = -mu / np.linalg.norm(mu)
    attack = attacks.create(name, perturbation="unit", gamma_max=20.0)
    m = np_(attack(c))
    want = bisect_gamma(name, u, p, hi=20.0)
    assert attack.last_stats["gamma"] == pytest.approx(want, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(m[0], mu + want * p, rtol=1e-9, atol=1e-9)
    assert (want == 20.0) == (scale == 100.0)


def test_min_max_hand_computed() -> None:
    # honest rows (0, 0) and (2, 0): mu = (1, 0), unit p = (-1, 0), D = 4, a_i = 1, b_i = -1, +1:
    # gamma = min(-(-1) + sqrt(1 + 3), -1 + sqrt(1 + 3)) = min(3, 1) = 1, so m = (0, 0)
    honest = torch.tensor([[0.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    c = dataclasses.replace(ctx(f=1, n=2, p=2, seed=0), honest=honest)
    m = np_(attacks.create("min_max", perturbation="unit")(c))
    np.testing.assert_allclose(m[0], [0.0, 0.0], atol=1e-12)
    m = np_(attacks.create("min_max", perturbation="unit", gamma_max=0.5)(c))
    np.testing.assert_allclose(m[0], [0.5, 0.0], atol=1e-12)


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
@pytest.mark.parametrize(("p", "value"), [("gamma_max", -1.0), ("gamma_max", float("nan")), ("ddof", 2),
                                          ("ddof", True), ("ddof", 1.0)])
def test_new_parameters_are_validated(name: str, p: str, value: object) -> None:
    with pytest.raises(ParameterError, match=rf"^attack {name}: parameter {p} must be "):
        attacks.create(name, **{p: value})
