"""similarity_poisoning: ranks first by cosine with the reference, yet is not parallel to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import attacks

from ..factories import attack_ctx as ctx
from ..factories import np_


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a @ b) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))


@pytest.mark.parametrize("with_reference", [True, False])
def test_update_target_ranks_first(with_reference: bool) -> None:
    c0 = ctx(n=8, p=40, seed=1)
    g = torch.Generator().manual_seed(5)
    ref = np_(c0.honest).mean(0) + 0.2 * np_(torch.randn(40, generator=g, dtype=torch.float64))
    ref = torch.from_numpy(ref)
    c = ctx(n=8, p=40, seed=1, reference=ref if with_reference else None)
    attack = attacks.create("similarity_poisoning")
    out = np_(attack(c))
    h = np_(c.honest)
    r = np_(ref) if with_reference else h.mean(0)
    row = out[0]
    np.testing.assert_array_equal(out, np.tile(row, (3, 1)))
    honest_cos = cos(h, r)
    assert cos(row, r) >= honest_cos.max() - 1e-12  # ties for first under a cosine-weighted rule
    assert cos(row, r) < 1 - 1e-6  # ... while not parallel to r
    assert np.linalg.norm(row) == pytest.approx(np.linalg.norm(r), rel=1e-12)
    # the harmful part is the component of -sign(mu) orthogonal to r
    r_hat = r / np.linalg.norm(r)
    d = -np.sign(h.mean(0))
    d -= (d @ r_hat) * r_hat
    side = row - (row @ r_hat) * r_hat
    assert cos(side, d) == pytest.approx(1.0, abs=1e-10)
    assert attack.last_stats["cosine"] == pytest.approx(honest_cos.max(), abs=1e-12)


def test_update_target_given_similarity() -> None:
    c = ctx(p=30)
    row = np_(attacks.create("similarity_poisoning", target_similarity=0.5)(c))[0]
    assert cos(row, np_(c.honest).mean(0)) == pytest.approx(0.5, abs=1e-12)


def test_update_target_degenerate_direction_is_random_orthogonal() -> None:
    c0 = ctx(p=30)
    # -sign(mu) is parallel to r: it has no component orthogonal to r
    ref = 3.0 * torch.sign(torch.from_numpy(np_(c0.honest).mean(0)))
    c = ctx(p=30, reference=ref)
    row = np_(attacks.create("similarity_poisoning", target_similarity=0.8)(c))[0]
    assert cos(row, np_(ref)) == pytest.approx(0.8, abs=1e-12)
    assert np.isfinite(row).all()


@pytest.mark.parametrize("target_similarity", [None, 0.9])
def test_model_target(target_similarity: float | None) -> None:
    w = torch.linspace(-1, 2, 25, dtype=torch.float64)
    c = ctx(p=25, global_model=w)
    attack = attacks.create("similarity_poisoning", target="model", target_similarity=target_similarity)
    delta = np_(attack(c))[0]
    wn, h = np_(w), np_(c.honest)
    want = cos(h + wn, wn).max() if target_similarity is None else target_similarity
    assert cos(wn + delta, wn) == pytest.approx(want, abs=1e-12)
    assert abs(delta @ wn) <= 1e-9 * np.linalg.norm(delta) * np.linalg.norm(wn)  # delta is orthogonal to w
    d = -np.sign(h.mean(0))
    d -= (d @ wn) / (wn @ wn) * wn
    assert cos(delta, d) == pytest.approx(1.0, abs=1e-10)
