"""fang_krum: Krum (a slow independent loop) on [malicious; honest] selects a malicious row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robustfl import attacks
from robustfl.types import Knowledge

from ..factories import attack_ctx as ctx
from ..factories import attack_rows as rows
from ..factories import np_


def krum_slow(u: np.ndarray, f: int) -> int:
    """Blanchard et al.: sum of squared distances to the K - f - 2 nearest others; ties -> lowest index."""
    k = len(u)
    scores = []
    for i in range(k):
        d = sorted(float(np.sum((u[i] - u[j]) ** 2)) for j in range(k) if j != i)
        scores.append(sum(d[: k - f - 2]))
    return min(range(k), key=lambda i: (scores[i], i))


def lambda_max_slow(h: np.ndarray, f: int) -> float:
    n, d = h.shape
    k = n + f
    sums = []
    for i in range(n):
        dist = sorted(float(np.linalg.norm(h[l] - h[i])) for l in range(n) if l != i)
        sums.append(sum(dist[: k - f - 2]))
    return min(sums) / ((k - 2 * f - 1) * math.sqrt(d)) + max(np.linalg.norm(h, axis=1)) / math.sqrt(d)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_krum_selects_a_malicious_row(seed: int) -> None:
    f, n, p = 3, 9, 30
    u = rows(f + n, p, seed, loc=0.3, scale=1.0)
    c = ctx(f=f, n=n, p=p, seed=seed, honest=u[f:])
    attack = attacks.create("fang_krum")
    out = np_(attack(c))
    h = np_(c.honest)
    s = np.sign(h.mean(0))
    lam = attack.last_stats["lambda"]
    assert attack.last_stats["succeeded"] == 1.0
    np.testing.assert_allclose(out, np.tile(-lam * s, (f, 1)), rtol=1e-15)
    assert krum_slow(np.vstack([out, h]), f) < f
    # lambda is the first of lambda_max / 2^j that works: twice it fails (unless it is lambda_max)
    lmax = lambda_max_slow(h, f)
    j = math.log2(lmax / lam)
    assert j == pytest.approx(round(j), abs=1e-9)
    if round(j) > 0:
        assert krum_slow(np.vstack([np.tile(-2 * lam * s, (f, 1)), h]), f) >= f


def test_fang_krum_reports_failure() -> None:
    # tight honest cluster far from the origin: no -lambda s row can win
    f, n, p = 2, 8, 20
    u = rows(f + n, p, 0, loc=5.0, scale=0.01)
    c = ctx(f=f, n=n, p=p, honest=u[f:])
    attack = attacks.create("fang_krum")
    out = np_(attack(c))
    assert attack.last_stats["succeeded"] == 0.0
    np.testing.assert_allclose(out, np.tile(-1e-5 * np.sign(np_(c.honest).mean(0)), (f, 1)))
    assert krum_slow(np.vstack([out, np_(c.honest)]), f) >= f
    assert attack.knowledge == Knowledge.OWN | Knowledge.HONEST
