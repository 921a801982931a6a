"""alie: mu + z sigma (population std) with the paper's default z."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from robustfl import attacks

from ..factories import attack_ctx as ctx
from ..factories import np_


def paper_z(k: int, f: int) -> float:
    s = math.floor(k / 2 + 1) - f
    return float(norm.ppf((k - s) / k)) if s > 0 else float(norm.ppf((k - 1) / k))


@pytest.mark.parametrize(("f", "n"), [(3, 7), (2, 18), (6, 4), (5, 5)])
def test_alie_default_z(f: int, n: int) -> None:
    c = ctx(f=f, n=n)
    out = np_(attacks.create("alie")(c))
    h = np_(c.honest)
    z = paper_z(f + n, f)
    np.testing.assert_allclose(out, np.tile(h.mean(0) + z * h.std(0, ddof=0), (f, 1)), rtol=1e-12, atol=1e-13)


def test_alie_s_nonpositive_branch() -> None:
    # K = 10, f = 6: s = floor(6) - 6 = 0 -> z = Phi^-1(9/10)
    c = ctx(f=6, n=4)
    attack = attacks.create("alie")
    attack(c)
    assert attack.last_stats["z"] == pytest.approx(norm.ppf(0.9), rel=1e-12)


def test_alie_given_z_and_own_rows() -> None:
    c = ctx(honest=False)
    out = np_(attacks.create("alie", z=1.5)(c))
    o = np_(c.own)
    np.testing.assert_allclose(out[1], o.mean(0) + 1.5 * o.std(0), rtol=1e-12)
