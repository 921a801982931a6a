"""sybil: the first `identities` Byzantine rows send one crafted vector (the base rows' mean)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.types import Knowledge

from ..factories import attack_ctx as ctx
from ..factories import np_


@pytest.mark.parametrize("identities", [None, 1, 2, 9])
def test_sybil_identical_rows_without_jitter(identities: int | None) -> None:
    c = ctx(f=4, n=6)
    attack = attacks.create("sybil", identities=identities)
    out = np_(attack(c))
    n = 4 if identities is None else min(identities, 4)
    crafted = -np_(c.own).mean(0)  # base sign_flip: the mean of -own
    np.testing.assert_allclose(out[:n], np.tile(crafted, (n, 1)), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(out[n:], np_(c.own)[n:])
    assert attack.sybil_rows(4).tolist() == [i < n for i in range(4)]
    assert attack.sybil_rows(4).dtype == torch.bool


def test_sybil_jitter_is_independent_noise() -> None:
    c = ctx(f=3, n=5, p=4000)
    out = np_(attacks.create("sybil", jitter=0.5, base="ipm")(c))
    crafted = -0.1 * np_(c.honest).mean(0)
    noise = out - crafted
    assert noise.std() == pytest.approx(0.5, rel=0.03)
    assert abs(noise.mean()) < 5 * 0.5 / np.sqrt(noise.size)
    assert not np.allclose(out[0], out[1])


def test_sybil_knowledge_is_base_s() -> None:
    assert attacks.create("sybil").knowledge == Knowledge.OWN
    assert attacks.create("sybil", base="mimic").knowledge == Knowledge.OWN | Knowledge.HONEST
