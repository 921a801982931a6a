"""gaussian: rows ~ N(m, std^2), checked statistically (seeded) and against the generator's draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import attacks

from ..factories import attack_ctx as ctx
from ..factories import np_


def test_gaussian_zero_mean_statistics() -> None:
    c = ctx(f=3, n=5, p=20000)
    out = np_(attacks.create("gaussian")(c))
    n = out.size
    assert abs(out.mean()) < 5 * 200 / np.sqrt(n)  # 5 sigma of the sample mean
    assert out.std() == pytest.approx(200, rel=5 * np.sqrt(0.5 / n))
    ref = 200 * np_(torch.randn((3, 20000), generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-15)  # drawn from the context's generator only


@pytest.mark.parametrize("granted", [True, False])
def test_gaussian_honest_mean(granted: bool) -> None:
    c = ctx(f=4, n=6, p=10000, honest=granted)
    out = np_(attacks.create("gaussian", std=0.5, mean="honest")(c))
    mu = (np_(c.honest) if granted else np_(c.own)).mean(0)
    noise = out - mu
    assert abs(noise.mean()) < 5 * 0.5 / np.sqrt(noise.size)
    assert noise.std() == pytest.approx(0.5, rel=5 * np.sqrt(0.5 / noise.size))
