"""Bulyan's selection (``repeated_krum``, compiled fast path) against the plain loop of
``select_lowest`` it replaces: the same picks, in the same order, on random, offset, tied,
duplicated and non-finite inputs, float32 and float64."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.catalogue import krum_loop
from robustfl.defenses._select import Distances, repeated_krum


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
    assert fast == krum_loop(updates, f, count), name


@pytest.mark.parametrize(("offset", "rescored"), [(0.0, 1), (1e4, 18)])
def test_copies_are_settled_in_thekrum_loop(
    offset: float, rescored: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ALIE-like rounds (f identical rows near the honest ones): the first unsettled pick is
    re-scored in Python (it builds the refined matrix), later ties among the copies are settled
    in the compiled loop, and the picks are still the plain loop's. Under a large common offset
    every pick is unsettled among rows that are not copies: each is re-scored in Python."""
    import robustfl.defenses._select as select

    g = torch.Generator().manual_seed(3)
    u = torch.randn(30, 105, generator=g, dtype=torch.float64) + offset
    u = u.float()
    u[:6] = u[6:].mean(0) + 0.1 * u[6:].std(0)  # six copies
    calls = []
    real = select.exact_scores

    def counted(*a):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(select, "exact_scores", counted)
    fast = repeated_krum(Distances.of(u), 6, 18).tolist()
    monkeypatch.setattr(select, "exact_scores", real)
    assert fast == krum_loop(u, 6, 18)
    assert fast[:6] == [0, 1, 2, 3, 4, 5]  # the copies first, lowest index first
    assert len(calls) == rescored


def test_equal_sequences_sum_equally_in_every_row() -> None:
    """The premise of settling copies in the loop: torch sums a row of ``topk`` values the same
    way in every row, so rows holding the same sequence get the same score."""
    g = torch.Generator().manual_seed(5)
    for n in (1, 7, 16, 33, 48):
        for r in (1, 3, 9, 17, 50):
            v = torch.sort(torch.rand(n, generator=g, dtype=torch.float64) * 1e3).values
            rows = torch.cat([v.expand(r, n), torch.full((r, 4), math.inf, dtype=torch.float64)], 1)
            s = torch.topk(rows, n, dim=1, largest=False).values.sum(1)
            assert bool((s == s[0]).all()), (n, r)


@pytest.mark.parametrize("name", ["krum", "multi_krum"])
def test_krum_selection_under_autograd(name: str) -> None:
    """Krum and Multi-Krum stay differentiable in the rows (the worst-case search's gradient
    stage): the numpy decision reads detached scores, and the gradient reaches the picked rows."""
    from robustfl import defenses
    from robustfl.types import DefenseContext

    u = torch.randn(12, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    out = defenses.create(name)(u, DefenseContext(assumed_byzantine=2))
    out.vector.sum().backward()
    assert u.grad is not None
    assert u.grad.abs().sum(1).gt(0).tolist() == (out.weights > 0).tolist()
