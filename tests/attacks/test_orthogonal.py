"""orthogonal: orthogonal to the honest mean with norm norm_factor * ||mu||; angle phi gives cos phi."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robustfl import attacks

from ..factories import attack_ctx as ctx
from ..factories import np_


@pytest.mark.parametrize("norm_factor", [1.0, 3.0])
def test_orthogonal_to_mu(norm_factor: float) -> None:
    c = ctx(p=200)
    out = np_(attacks.create("orthogonal", norm_factor=norm_factor)(c))
    mu = np_(c.honest).mean(0)
    row = out[0]
    np.testing.assert_array_equal(out, np.tile(row, (3, 1)))  # one shared direction
    assert abs(row @ mu) <= 1e-6 * np.linalg.norm(row) * np.linalg.norm(mu)
    assert np.linalg.norm(row) == pytest.approx(norm_factor * np.linalg.norm(mu), rel=1e-12)


@pytest.mark.parametrize("angle", [0.0, 30.0, 60.0, 120.0])
def test_orthogonal_angle(angle: float) -> None:
    c = ctx(p=100, seed=4)
    row = np_(attacks.create("orthogonal", angle=angle, norm_factor=2)(c))[0]
    mu = np_(c.honest).mean(0)
    cos = row @ mu / (np.linalg.norm(row) * np.linalg.norm(mu))
    assert cos == pytest.approx(math.cos(math.radians(angle)), abs=1e-12)
    assert np.linalg.norm(row) == pytest.approx(2 * np.linalg.norm(mu), rel=1e-12)


def test_orthogonal_without_honest_uses_own_and_generator() -> None:
    c = ctx(honest=False, p=50)
    row = np_(attacks.create("orthogonal")(c))[0]
    mu = np_(c.own).mean(0)
    assert abs(row @ mu) <= 1e-6 * np.linalg.norm(row) * np.linalg.norm(mu)
    c9 = ctx(honest=False, p=50, generator=torch.Generator().manual_seed(9))
    other = np_(attacks.create("orthogonal")(c9))
    assert not np.allclose(row, other[0])  # the direction comes from the generator
