"""min_max / min_sum: the constraint holds at the returned gamma and fails just beyond it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import attacks

from ..factories import attack_ctx as ctx
from ..factories import np_


def direction(kind: str, u: np.ndarray) -> np.ndarray:
    mu, sigma = u.mean(0), u.std(0, ddof=0)
    return {"unit": -mu / np.linalg.norm(mu), "sign": -np.sign(mu), "std": -sigma}[kind]


def recover_gamma(m: np.ndarray, u: np.ndarray, p: np.ndarray) -> float:
    mu = u.mean(0)
    gamma = float((m - mu) @ p / (p @ p))
    np.testing.assert_allclose(m, mu + gamma * p, rtol=1e-10, atol=1e-12)  # m lies on mu + gamma p
    return gamma


def max_dist(m: np.ndarray, u: np.ndarray) -> float:
    return float(max(np.sum((m - ui) ** 2) for ui in u))


def sum_dist(m: np.ndarray, u: np.ndarray) -> float:
    return float(sum(np.sum((m - ui) ** 2) for ui in u))


@pytest.mark.parametrize("kind", ["unit", "sign", "std"])
@pytest.mark.parametrize("granted", [True, False])
def test_min_max_gamma_is_the_largest(kind: str, granted: bool) -> None:
    c = ctx(f=3, n=8, p=15, seed=2, honest=granted)
    u = np_(c.honest) if granted else np_(c.own)
    m = np_(attacks.create("min_max", perturbation=kind)(c))
    np.testing.assert_array_equal(m, np.tile(m[0], (3, 1)))
    p = direction(kind, u)
    gamma = recover_gamma(m[0], u, p)
    bound = max(np.sum((ui - uj) ** 2) for ui in u for uj in u)
    mu = u.mean(0)
    assert gamma > 0
    assert max_dist(mu + gamma * p, u) <= bound * (1 + 1e-12)
    assert max_dist(mu + gamma * (1 + 1e-6) * p, u) > bound


@pytest.mark.parametrize("kind", ["unit", "sign", "std"])
@pytest.mark.parametrize("bound_kind", ["min", "max"])
def test_min_sum_gamma_is_the_largest(kind: str, bound_kind: str) -> None:
    c = ctx(f=2, n=9, p=12, seed=5)
    u = np_(c.honest)
    m = np_(attacks.create("min_sum", perturbation=kind, bound=bound_kind)(c))
    p = direction(kind, u)
    gamma = recover_gamma(m[0], u, p)
    sums = [sum(np.sum((ui - uj) ** 2) for uj in u) for ui in u]
    bound = min(sums) if bound_kind == "min" else max(sums)
    mu = u.mean(0)
    assert gamma > 0
    assert sum_dist(mu + gamma * p, u) <= bound * (1 + 1e-12)
    assert sum_dist(mu + gamma * (1 + 1e-6) * p, u) > bound


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
def test_identical_rows_send_mu(name: str) -> None:
    c = ctx(f=2, n=4)
    same = torch.from_numpy(np_(c.honest)[:1]).expand(4, -1).clone()
    c2 = ctx(f=2, n=4, honest=same)
    out = np_(attacks.create(name)(c2))  # std perturbation: sigma = 0, so ||p|| = 0
    np.testing.assert_allclose(out, np.tile(np_(same)[0], (2, 1)), rtol=1e-14)
