"""Bulyan's selection (``repeated_krum``, compiled fast path) against the plain loop of
``select_lowest`` it replaces: the same picks, in the same order, on random, offset, tied,
duplicated and non-finite inputs, float32 and float64."""

from __future__ import annotations

import math

import pytest
import torch

from robustfl.defenses._select import Distances, repeated_krum, select_lowest
from robustfl.kernels import krum_neighbours


def _loop(updates: torch.Tensor, f: int, count: int) -> list[int]:
    dist, pool, picks = Distances.of(updates), torch.arange(updates.shape[0]), []
    for _ in range(count):
        sel = int(select_lowest(dist, pool, krum_neighbours(len(pool), f), 1)[0][0])
        picks.append(sel)
        pool = pool[pool != sel]
    return picks


def _cases() -> list[tuple[str, torch.Tensor, int]]:
    g = torch.Generator().manual_seed(7)
    out = []
    for i in range(40):
        k = int(torch.randint(7, 40, (1,), generator=g))
        p = int(torch.randint(1, 300, (1,), generator=g))
        f = int(torch.randint(0, (k - 3) // 4 + 1, (1,), generator=g))
        scale = 10.0 ** float(torch.randint(-10, 13, (1,), generator=g))
        u = torch.randn(k, p, generator=g, dtype=torch.float64) * scale
        kind = ("plain", "offset", "ties", "dupes", "nan", "f32")[i % 6]
        if kind == "offset":  # rows close relative to their norms: Gram rounding decides
            u = u * 1e-6 + scale
        elif kind == "ties":  # integer grid: many exactly equal distances
            u = torch.randint(-2, 3, (k, p), generator=g).double()
        elif kind == "dupes":
            u[1::3] = u[0]
        elif kind == "nan":
            u[2, 0] = math.nan
            u[3, -1] = math.inf
        elif kind == "f32":
            u = u.float()
        out.append((f"{kind}-{i}", u, f))
    return out


@pytest.mark.parametrize(("name", "updates", "f"), _cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_repeated_krum_picks_what_select_lowest_picks(name: str, updates: torch.Tensor, f: int) -> None:
    count = updates.shape[0] - 2 * f
    fast = repeated_krum(Distances.of(updates), f, count).tolist()
    assert fast == _loop(updates, f, count), name
