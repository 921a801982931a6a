"""drift interpolates with t/ramp; mimic copies the honest row farthest from mu."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from robustfl import attacks
from robustfl.errors import InputError
from robustfl.types import Knowledge

from ..factories import attack_ctx as ctx
from ..factories import np_


@pytest.mark.parametrize("t", [0, 10, 49, 50, 80])
def test_drift_interpolates(t: int) -> None:
    c = dataclasses.replace(ctx(), round=t)
    out = np_(attacks.create("drift")(c))
    frac = min(1.0, t / 50)
    np.testing.assert_allclose(out, (1 - frac) * np_(c.own) + frac * (-np_(c.own)), rtol=1e-13, atol=1e-14)


def test_drift_with_base_and_ramp() -> None:
    c = dataclasses.replace(ctx(), round=3)
    attack = attacks.create("drift", base={"name": "ipm", "epsilon": 2}, ramp=4)
    b = -2 * np_(c.honest).mean(0)
    np.testing.assert_allclose(np_(attack(c)), 0.25 * np_(c.own) + 0.75 * b, rtol=1e-13)
    assert attacks.create("drift", base="fang_trim").knowledge == Knowledge.OWN | Knowledge.HONEST


def test_mimic_default_target_is_farthest() -> None:
    c = ctx(n=9, seed=3)
    h = np_(c.honest)
    far = int(np.argmax(np.linalg.norm(h - h.mean(0), axis=1)))
    np.testing.assert_array_equal(np_(attacks.create("mimic")(c)), np.tile(h[far], (3, 1)))
    np.testing.assert_array_equal(np_(attacks.create("mimic", target=2)(c)), np.tile(h[2], (3, 1)))
    with pytest.raises(InputError, match="out of range"):
        attacks.create("mimic", target=9)(c)
    assert attacks.create("mimic").knowledge == Knowledge.OWN | Knowledge.HONEST
