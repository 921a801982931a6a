"""fang_trim: a literal per-coordinate transcription with the same b draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.types import Knowledge

from ..factories import attack_ctx as ctx
from ..factories import np_


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fang_trim_matches_literal_loop(seed: int) -> None:
    c = ctx(f=3, n=6, p=25, seed=seed)
    h = np_(c.honest)
    h[:, :8] -= 1.5  # mixed signs: negative directions and extremes of both signs
    c = ctx(f=3, n=6, p=25, seed=seed, honest=torch.from_numpy(h))
    out = np_(attacks.create("fang_trim")(c))
    # b ~ U[1, 2]: 1 + torch.rand((f, P)) from the attack's generator, drawn first
    b = 1 + np_(torch.rand((3, 25), generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    ref = np.empty((3, 25))
    for j in range(25):
        s = np.sign(sum(h[i, j] for i in range(6)))
        e = min(h[:, j]) if s > 0 else max(h[:, j])
        for k in range(3):
            ref[k, j] = e / b[k, j] if s * e > 0 else e * b[k, j]
    np.testing.assert_allclose(out, ref, rtol=1e-14, atol=0)
    # every value lies beyond the honest extreme, against the honest direction
    s = np.sign(h.sum(0))
    assert np.all(np.where(s > 0, out <= h.min(0), out >= h.max(0)))
    assert attacks.create("fang_trim").knowledge == Knowledge.OWN | Knowledge.HONEST
