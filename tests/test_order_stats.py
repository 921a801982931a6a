"""The coordinate-wise rules' compiled sorting network against numpy's sort (an independent reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl._order_stats import MAX_K, batcher_pairs, order_stat_mean
from robustfl.defenses._select import mean_of_order_stats


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64, 128])
def test_batchers_network_sorts(n: int) -> None:
    rng = np.random.default_rng(n)
    pairs = batcher_pairs(n)
    for _ in range(50):
        x = rng.standard_normal(n)
        for i, j in pairs:
            if x[i] > x[j]:
                x[i], x[j] = x[j], x[i]
        assert np.all(np.diff(x) >= 0)


def _reference(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """numpy's sort (NaN last), rows lo..hi summed in float64 in order, divided, cast back."""
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as in the kernel
        return (np.sort(a, axis=0)[lo : hi + 1].astype(np.float64).sum(0) / (hi - lo + 1)).astype(a.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_order_statistics_equal_a_sort_bit_for_bit(dtype: type) -> None:
    rng = np.random.default_rng(7)
    for trial in range(120):
        k, p = int(rng.integers(1, 70)), int(rng.integers(1, 600))
        a = (rng.standard_normal((k, p)) * 10.0 ** rng.integers(-10, 13)).astype(dtype)
        if trial % 3 == 0:
            a = np.round(a)  # ties
        if trial % 4 == 0:
            a[rng.random((k, p)) < 0.1] = np.nan  # NaN is the largest value
        if trial % 5 == 0:
            a[rng.random((k, p)) < 0.1] = np.inf
            a[rng.random((k, p)) < 0.05] = -np.inf
        lo = int(rng.integers(0, k))
        hi = int(rng.integers(lo, k))
        got = order_stat_mean(a, lo, hi, threads=1 + trial % 2)
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, _reference(a, lo, hi))


def test_the_result_does_not_depend_on_the_thread_count() -> None:
    a = np.random.default_rng(3).standard_normal((50, 70_001)).astype(np.float32)
    one, two = order_stat_mean(a, 10, 39, threads=1), order_stat_mean(a, 10, 39, threads=2)
    assert one.tobytes() == two.tobytes()


def test_the_rules_use_it_up_to_max_k_and_a_selection_beyond() -> None:
    rng = np.random.default_rng(4)
    for k in (5, MAX_K, MAX_K + 3):
        a = rng.standard_normal((k, 300)).astype(np.float32)
        got = mean_of_order_stats(torch.from_numpy(a), 2, k - 3).numpy()
        np.testing.assert_allclose(got, _reference(a, 2, k - 3), rtol=0, atol=1e-6)  # float32 sums


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="expected 0 <= lo <= hi < K"):
        order_stat_mean(np.zeros((3, 4)), 2, 1)
    with pytest.raises(ValueError, match="power of two"):
        batcher_pairs(6)
