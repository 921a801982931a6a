"""none, sign_flip, scaling, ipm: the defining identities, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.errors import ParameterError
from robustfl.types import Knowledge

from ..factories import attack_ctx as ctx
from ..factories import np_


def test_none_sends_own() -> None:
    c = ctx()
    out = attacks.create("none")(c)
    np.testing.assert_array_equal(np_(out), np_(c.own))
    assert out.data_ptr() != c.own.data_ptr()  # a copy: the runner may write into it


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_sign_flip_negates_own(scale: float) -> None:
    c = ctx()
    out = attacks.create("sign_flip", scale=scale)(c)
    np.testing.assert_allclose(np_(out), -scale * np_(c.own), rtol=0, atol=1e-15)


@pytest.mark.parametrize("granted", [True, False])
def test_sign_flip_mean_source(granted: bool) -> None:
    c = ctx(honest=granted)
    out = attacks.create("sign_flip", scale=2, source="mean")(c)
    known = np_(c.honest) if granted else np_(c.own)
    ref = -2 * known.mean(0)
    np.testing.assert_allclose(np_(out), np.tile(ref, (3, 1)), rtol=1e-13, atol=1e-14)


def test_sign_flip_validation_message() -> None:
    with pytest.raises(ParameterError, match=r"^attack sign_flip: parameter scale must be .*>= 0, got -1"):
        attacks.create("sign_flip", scale=-1)
    with pytest.raises(ParameterError, match=r"^attack sign_flip: parameter source must be one of"):
        attacks.create("sign_flip", source="median")


def test_scaling_default_factor_is_k() -> None:
    c = ctx(f=3, n=7)
    out = attacks.create("scaling")(c)
    np.testing.assert_allclose(np_(out), 10 * np_(c.own), rtol=1e-15)
    out = attacks.create("scaling", factor=3)(c)
    np.testing.assert_allclose(np_(out), 3 * np_(c.own), rtol=1e-15)


def test_scaling_of_a_base() -> None:
    c = ctx(f=2, n=5)
    out = attacks.create("scaling", factor=4, base={"name": "sign_flip", "scale": 2})(c)
    np.testing.assert_allclose(np_(out), -8 * np_(c.own), rtol=1e-15)
    ipm = attacks.create("scaling", factor=4, base="ipm")
    np.testing.assert_allclose(np_(ipm(c)), np.tile(-0.4 * np_(c.honest).mean(0), (2, 1)), rtol=1e-13)


def test_scaling_takes_its_base_knowledge_and_poisoning() -> None:
    assert attacks.create("scaling").knowledge == Knowledge.OWN
    assert attacks.create("scaling", base="fang_trim").knowledge == Knowledge.OWN | Knowledge.HONEST
    boosted = attacks.create("scaling", base={"name": "backdoor", "target_label": 4})
    assert boosted.poisons_data is True and boosted.backdoor is True and boosted.target_label == 4
    x = torch.zeros(4, 1, 6, 6, dtype=torch.float64)
    assert float(boosted.trigger(x)[0, 0, -1, -1]) == 1.0
    assert attacks.create("scaling").poisons_data is False
    plain = attacks.create("scaling")
    assert plain.backdoor is False and plain.sybil is False  # declared, not probed
    with pytest.raises(NotImplementedError, match="no base attack"):
        plain.trigger(x)
    assert attacks.create("sybil").sybil is True and attacks.create("sybil", base="backdoor").backdoor is True
    with pytest.raises(ParameterError, match="scaling"):
        attacks.create("scaling", base={"scale": 2})


@pytest.mark.parametrize("eps", [0.1, 100.0])
@pytest.mark.parametrize("granted", [True, False])
def test_ipm_is_minus_eps_mean(eps: float, granted: bool) -> None:
    c = ctx(honest=granted)
    out = attacks.create("ipm", epsilon=eps)(c)
    known = np_(c.honest) if granted else np_(c.own)
    np.testing.assert_allclose(np_(out), np.tile(-eps * known.mean(0), (3, 1)), rtol=1e-13, atol=1e-14)
    assert attacks.create("ipm").epsilon == 0.1
