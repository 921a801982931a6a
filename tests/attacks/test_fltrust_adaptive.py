"""fltrust_adaptive: the attacked FLTrust aggregate moves against s = sign(g) more than at the start."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.attacks.fltrust_adaptive import fltrust_aggregate
from robustfl.types import Knowledge

from ..factories import attack_ctx as ctx
from ..factories import attack_rows as rows
from ..factories import np_


def fltrust_np(u: np.ndarray, g0: np.ndarray) -> np.ndarray:
    """SPEC section 1, literally: TS_i = max(0, cos), rows rescaled to ||g0||, trust-weighted mean."""
    num, den = np.zeros_like(g0), 0.0
    for ui in u:
        c = ui @ g0 / (np.linalg.norm(ui) * np.linalg.norm(g0))
        ts = max(0.0, c)
        num += ts * np.linalg.norm(g0) / np.linalg.norm(ui) * ui
        den += ts
    return num / den if den > 1e-12 else np.zeros_like(g0)


def setup(seed: int, f: int = 3, n: int = 7, p: int = 12):  # type: ignore[no-untyped-def]
    u = rows(f + n, p, seed, loc=0.3, scale=1.0)
    g0 = u[f:].mean(0) + 0.3 * torch.randn(p, generator=torch.Generator().manual_seed(100 + seed),
                                           dtype=torch.float64)
    return ctx(f=f, n=n, p=p, seed=seed, honest=u[f:], reference=g0)


def objective(c, malicious: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    own, h, g0 = np_(c.own), np_(c.honest), np_(c.reference)
    g = fltrust_np(np.vstack([own, h]), g0)
    return float(np.sign(g) @ (g - fltrust_np(np.vstack([malicious, h]), g0)))


def start_rows(c, seed: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Fang-trim rows with the attack's b draws, normalised, tilted to cosine >= 0.1 with g0."""
    h, g0 = np_(c.honest), np_(c.reference)
    f, p = c.own.shape
    b = 1 + np_(torch.rand((f, p), generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    s = np.sign(h.sum(0))
    e = np.where(s > 0, h.min(0), h.max(0))
    t = np.where(s * e > 0, e / b, e * b)
    g_hat = g0 / np.linalg.norm(g0)
    out = []
    for ti in t:
        ti = ti / np.linalg.norm(ti)
        a = ti @ g_hat
        cc = max(0.0, -a + 0.1 * math.sqrt(1 - a * a) / math.sqrt(0.99))
        v = ti + cc * g_hat
        out.append(v / np.linalg.norm(v))
        assert out[-1] @ g_hat >= 0.1 - 1e-12
    return np.linalg.norm(g0) * np.array(out)


def test_differentiable_fltrust_matches_literal() -> None:
    c = setup(0)
    u = torch.cat([c.own, c.honest, -c.honest[:2], torch.zeros(1, 12, dtype=torch.float64)])
    ref = fltrust_np(np_(u)[:-1], np_(c.reference))  # the zero row is invalid: excluded
    np.testing.assert_allclose(np_(fltrust_aggregate(u, c.reference)), ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("seed", "lr"), [(0, 0.01), (1, 0.01), (2, 0.5)])
def test_gradient_variant_improves_on_its_start(seed: int, lr: float) -> None:
    c = setup(seed)
    attack = attacks.create("fltrust_adaptive", lr=lr)
    out = np_(attack(c))
    g0n = np.linalg.norm(np_(c.reference))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), g0n, rtol=1e-12)  # sends ||g0|| e_i
    h_start, h_end = objective(c, start_rows(c, seed)), objective(c, out)
    assert attack.last_stats["start_objective"] == pytest.approx(h_start, rel=1e-10)
    assert attack.last_stats["objective"] == pytest.approx(h_end, rel=1e-10)
    assert h_end > h_start + 1e-6  # farther from the no-attack aggregate along -s


def test_zero_steps_sends_the_start() -> None:
    c = setup(1)
    out = np_(attacks.create("fltrust_adaptive", steps=0)(c))
    np.testing.assert_allclose(out, start_rows(c, 1), rtol=1e-12, atol=1e-14)


def test_angle_variant_beats_a_coarse_grid() -> None:
    c = setup(2)
    attack = attacks.create("fltrust_adaptive", variant="angle")
    out = np_(attack(c))
    g0 = np_(c.reference)
    g_hat = g0 / np.linalg.norm(g0)
    g = fltrust_np(np.vstack([np_(c.own), np_(c.honest)]), g0)
    u = -np.sign(g) - (-np.sign(g) @ g_hat) * g_hat
    u /= np.linalg.norm(u)
    phi = math.radians(attack.last_stats["angle"])
    want = np.linalg.norm(g0) * (math.cos(phi) * g_hat + math.sin(phi) * u)
    np.testing.assert_allclose(out, np.tile(want, (3, 1)), rtol=1e-10, atol=1e-12)
    best = objective(c, out)
    assert attack.last_stats["objective"] == pytest.approx(best, rel=1e-10)
    for deg in range(0, 90, 10):
        r = math.radians(deg)
        row = np.linalg.norm(g0) * (math.cos(r) * g_hat + math.sin(r) * u)
        assert best >= objective(c, np.tile(row, (3, 1))) - 1e-12


def test_knowledge() -> None:
    k = attacks.create("fltrust_adaptive").knowledge
    assert Knowledge.REFERENCE in k and Knowledge.HONEST in k and Knowledge.ORACLE not in k
