"""NNM's bounded re-decision (robustfl/defenses/pre/nnm.py, ``_Bounded``) against the plain one:
the same output, bit for bit, as NNM computed with ``Distances`` and ``nearest`` alone (the float64
refined matrix whenever a neighbourhood is within Gram rounding), on random, offset, tied and
non-finite rows in float32 and float64; and the float64 direct-difference kernel against numpy."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import Tensor

import robustfl.defenses.pre.nnm as nnm_mod
from robustfl.defenses._select import Distances, nearest
from robustfl.defenses.pre.nnm import NNM
from robustfl.types import DefenseContext


def plain_nnm(updates: Tensor, f: int) -> tuple[Tensor, Tensor]:
    """NNM as it was before the bounded re-decision: ``nearest`` on ``Distances`` (refined matrix
    computed whenever a row is ambiguous), the same mixing."""
    k = updates.shape[0]
    dist = Distances.of(updates)
    m_ = max(1, k - f)
    mix = torch.zeros(k, k, dtype=torch.float64).scatter_(1, nearest(dist, m_), 1.0 / m_)
    m = mix.to(updates.dtype)
    if not bool(dist.bad.any()):
        mixed = m @ updates
    else:
        mixed = m @ torch.where(dist.bad[:, None], torch.zeros_like(updates), updates)
        for b in torch.nonzero(dist.bad).flatten().tolist():
            users = torch.nonzero(mix[:, b]).flatten()
            mixed[users] += m[users, b, None] * updates[b]
    return mixed, mix


class Paths:
    """Counts how ``_Bounded.refined`` answered: a proxy, or the refined matrix."""

    def __init__(self) -> None:
        self.proxy = 0
        self.refined = 0


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[Paths]:
    seen = Paths()
    orig = nnm_mod._Bounded._settled_proxy

    def spy(self: nnm_mod._Bounded, centre: int) -> Tensor | None:
        out = orig(self, centre)
        if out is None:
            seen.refined += 1
        else:
            seen.proxy += 1
        return out

    monkeypatch.setattr(nnm_mod._Bounded, "_settled_proxy", spy)
    yield seen


def benchmark_rows(k: int, p: int, f: int, seed: int, offset: float = 1.0) -> Tensor:
    """The rules benchmark's shape: honest rows mu + N(0, I), the last f sign-flipped."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(p, generator=g) * offset
    u = torch.randn(k, p, generator=g) + mu
    u[k - f :] *= -1
    return u


def tight_clusters(k: int, p: int, seed: int) -> Tensor:
    """Rows 1e-4 around three random centres: within-cluster distances far below Gram rounding."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(3, p, generator=g)
    return c[torch.randint(0, 3, (k,), generator=g)] + 1e-4 * torch.randn(k, p, generator=g)


def same(updates: Tensor, f: int) -> None:
    out, c, pull = NNM()(updates, DefenseContext(assumed_byzantine=f))
    ref, mix = plain_nnm(updates, f)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert torch.equal(out.view(-1).view(torch.uint8), ref.view(-1).view(torch.uint8))  # bits, NaN too
    w = torch.rand(updates.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(pull(w), (mix.T @ w))
    assert c.assumed_byzantine == f


def cases(dtype: torch.dtype) -> Iterator[tuple[str, Tensor, int]]:
    g = torch.Generator().manual_seed(7)
    for k, p, f in [(50, 20_000, 10), (30, 3_000, 5), (12, 500, 3), (9, 40, 2)]:
        for seed in range(3):
            yield f"benchmark {k}x{p} s{seed}", benchmark_rows(k, p, f, seed).to(dtype), f
    yield "iid", torch.randn(40, 5_000, generator=g).to(dtype), 8
    yield "offset 1e3", (torch.randn(30, 4_000, generator=g) + 1e3).to(dtype), 6
    yield "offset 1e4 clusters", (benchmark_rows(24, 2_000, 4, 3) * 0.01 + 1e4).to(dtype), 4
    for seed in range(3):
        yield f"tight clusters s{seed}", tight_clusters(27, 990, seed).to(dtype), 18
    tied = benchmark_rows(20, 1_000, 4, 4)
    tied[5] = tied[3]
    tied[11] = tied[3]
    tied[17] = tied[16]
    yield "duplicate rows", tied.to(dtype), 4
    grid = torch.zeros(16, 3)
    grid[:, 0] = torch.arange(16) % 4
    grid[:, 1] = torch.arange(16) // 4
    yield "lattice (exact ties)", grid.to(dtype), 5
    spoiled = benchmark_rows(30, 2_000, 6, 5).to(dtype)
    spoiled[2, 7] = math.nan
    spoiled[29] = math.inf
    spoiled[12, 0] = -math.inf
    yield "non-finite rows", spoiled, 6
    spoiled = benchmark_rows(50, 20_000, 10, 0).to(dtype)
    spoiled[42] = math.nan  # two of the sign-flipped rows
    spoiled[47, 9] = math.inf
    yield "benchmark, non-finite rows", spoiled, 10
    yield "benchmark, strided columns", benchmark_rows(50, 40_000, 10, 1).to(dtype)[:, ::2], 10
    many_bad = benchmark_rows(12, 800, 2, 6).to(dtype)
    many_bad[[1, 4, 5, 8, 9, 10]] = math.nan
    yield "more bad rows than f", many_bad, 2
    big = benchmark_rows(16, 1_000, 3, 8).to(dtype) * (1e18 if dtype == torch.float32 else 1e150)
    yield "large (float32 Gram overflow)", big, 3
    yield "one row", torch.randn(1, 10, generator=g).to(dtype), 0
    yield "f = 0", benchmark_rows(10, 300, 0, 9).to(dtype), 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bit_for_bit_as_before(dtype: torch.dtype) -> None:
    for label, u, f in cases(dtype):
        try:
            same(u, f)
        except AssertionError as e:
            raise AssertionError(f"{label} ({dtype})") from e


def test_every_path_is_taken(paths: Paths) -> None:
    """The benchmark's rows settle by bounds (no refined matrix); exact ties fall back to it."""
    same(benchmark_rows(50, 20_000, 10, 0), 10)
    assert paths.proxy >= 1 and paths.refined == 0
    tied = benchmark_rows(20, 1_000, 4, 4)
    tied[5] = tied[3]  # rows 3 and 5 tie as everyone's neighbours
    tied[17] = tied[16]
    before = paths.refined
    for f in range(1, 8):
        same(tied, f)
    assert paths.refined > before


def test_without_the_bounds_the_output_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has teeth: trusting the cheaper distances with no error bounds (every
    slack 0) picks other neighbourhoods than the refined matrix on tightly clustered rows."""
    monkeypatch.setattr(nnm_mod, "_SAFE", 0.0)
    monkeypatch.setattr(nnm_mod, "_U32", 0.0)
    monkeypatch.setattr(nnm_mod, "_U64", 0.0)
    monkeypatch.setattr(nnm_mod, "_gamma", lambda n, unit: 0.0)
    broken = 0
    for seed in range(5):
        try:
            same(tight_clusters(27, 990, seed), 18)
        except AssertionError:
            broken += 1
    assert broken > 0


def test_direct_distances_match_numpy() -> None:
    from robustfl.defenses.pre import _nnm_kernel

    g = torch.Generator().manual_seed(3)
    u = (torch.randn(9, 3_001, generator=g) * 10 + 50).numpy()
    rows = np.array([0, 2, 3, 5, 6, 8], dtype=np.int64)
    cand = np.array([1, 4, 0, 5, 2, 2, 2, 2], dtype=np.int64)  # positions in rows, padded to 8
    for parts in (1, 2, 3):
        out = _nnm_kernel.pair_sq_distances(u, rows, cand, parts)
        x = u.astype(np.float64)[rows]
        exact = ((x[cand][:, None, :] - x[None, :, :]) ** 2).sum(-1)
        np.testing.assert_allclose(out, exact, rtol=1e-13)
        assert np.all(np.diag(out[:, cand[:6]][:6]) == 0)
