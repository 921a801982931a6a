"""FedAvg (SPEC.md §1): weighted and plain means against numpy, weights, edge cases, properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import robustfl.defenses as defenses
from robustfl.defenses.fedavg import FedAvg
from robustfl.errors import InputError, ParameterError, RobustFLError
from robustfl.types import DefenseContext


def _data(seed: int, k: int, p: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    u = (torch.randn(k, p, generator=g, dtype=torch.float64) * 3 + 1).to(dtype)
    n = torch.randint(1, 500, (k,), generator=g)
    return u, n


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k", [1, 2, 7, 40])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_mean_matches_numpy(seed: int, k: int, dtype: torch.dtype) -> None:
    u, n = _data(seed, k, 17, dtype)
    out = FedAvg()(u, DefenseContext(num_samples=n))
    u64, n64 = u.double().numpy(), n.double().numpy()
    expected = np.average(u64, axis=0, weights=n64)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert out.vector.dtype == dtype and out.weights is not None and out.weights.dtype == dtype
    np.testing.assert_allclose(out.vector.double().numpy(), expected, rtol=tol, atol=tol * np.abs(u64).max())
    np.testing.assert_allclose(out.weights.double().numpy(), n64 / n64.sum(), rtol=tol, atol=0)
    assert abs(float(out.weights.double().sum()) - 1) < tol
    assert dict(out.stats) == {}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_unweighted_mean_ignores_sample_counts(dtype: torch.dtype) -> None:
    u, n = _data(5, 9, 11, dtype)
    out = FedAvg(weighted=False)(u, DefenseContext(num_samples=n))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(out.vector.double().numpy(), u.double().numpy().mean(0), rtol=tol, atol=tol)
    assert out.weights is not None
    np.testing.assert_allclose(out.weights.double().numpy(), np.full(9, 1 / 9), rtol=tol)


def test_weighted_without_counts_is_plain_mean() -> None:
    u, _ = _data(3, 6, 5, torch.float64)
    out = FedAvg()(u, DefenseContext())
    np.testing.assert_allclose(out.vector.numpy(), u.numpy().mean(0), rtol=1e-13, atol=1e-13)


def test_hand_computed_weighted_case() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 4.0], [3.0, 3.0]], dtype=torch.float64)
    out = FedAvg()(u, DefenseContext(num_samples=torch.tensor([1, 2, 1])))
    # (1·(1,0) + 2·(0,4) + 1·(3,3)) / 4 = (1, 2.75)
    assert out.vector.tolist() == [1.0, 2.75]
    assert out.weights is not None and out.weights.tolist() == [0.25, 0.5, 0.25]


def test_single_row_returns_it() -> None:
    u = torch.tensor([[1.5, -2.0, 0.25]], dtype=torch.float64)
    out = FedAvg()(u, DefenseContext(num_samples=torch.tensor([7])))
    assert torch.equal(out.vector, u[0])


def test_zero_count_row_has_no_weight() -> None:
    u = torch.tensor([[1.0, 1.0], [100.0, -100.0]], dtype=torch.float64)
    out = FedAvg()(u, DefenseContext(num_samples=torch.tensor([3, 0])))
    assert out.vector.tolist() == [1.0, 1.0]
    assert out.weights is not None and out.weights.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_row_is_not_hidden(bad: float) -> None:
    u, n = _data(0, 5, 4, torch.float64)
    u[2, 1] = bad
    out = FedAvg()(u, DefenseContext(num_samples=n))
    assert not bool(torch.isfinite(out.vector).all())


def test_inputs_not_mutated() -> None:
    u, n = _data(1, 6, 8, torch.float64)
    u0, n0 = u.clone(), n.clone()
    FedAvg()(u, DefenseContext(num_samples=n))
    assert torch.equal(u, u0) and torch.equal(n, n0)


@pytest.mark.parametrize(
    "counts",
    [
        torch.tensor([1, 2]),
        torch.tensor([1, -1, 3]),
        torch.tensor([0, 0, 0]),
        torch.tensor([1.0, float("nan"), 1]),
    ],
)
def test_bad_sample_counts_raise(counts: torch.Tensor) -> None:
    u, _ = _data(0, 3, 4, torch.float64)
    with pytest.raises(InputError, match="fedavg: num_samples"):
        FedAvg()(u, DefenseContext(num_samples=counts))


@pytest.mark.parametrize("bad", [torch.zeros(3), torch.zeros(0, 4), torch.zeros(2, 3, dtype=torch.int64)])
def test_bad_update_matrix_raises(bad: torch.Tensor) -> None:
    with pytest.raises(InputError, match="fedavg"):
        FedAvg()(bad, DefenseContext())


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_parameter_validation(value: object) -> None:
    with pytest.raises(ParameterError, match="fedavg: parameter weighted must be a boolean"):
        FedAvg(weighted=value)  # type: ignore[arg-type]


def test_registry_and_interface() -> None:
    rule = defenses.create("fedavg", weighted=False)
    assert isinstance(rule, FedAvg) and rule.weighted is False
    with pytest.raises(RobustFLError):
        defenses.create("fedavg", weigthed=False)
    assert rule.min_clients(0) == 1 and rule.min_clients(10) == 1
    u, n = _data(2, 4, 3, torch.float64)
    before = rule(u, DefenseContext(num_samples=n)).vector
    rule.reset()  # stateless: nothing to forget
    assert torch.equal(rule(u, DefenseContext(num_samples=n)).vector, before)


# -- declared properties, checked on random inputs ----------------------------------------------------


def test_declared_properties_hold() -> None:
    assert FedAvg.properties == {
        "permutation_invariant",
        "translation_equivariant",
        "scale_equivariant",
        "convex_combination",
        "coordinate_bounded",
    }
    rule = FedAvg()
    for seed in range(5):
        u, n = _data(seed, 8, 13, torch.float64)
        g = torch.Generator().manual_seed(100 + seed)
        ctx = DefenseContext(num_samples=n)
        out = rule(u, ctx)
        assert out.weights is not None
        # permutation: weights permute with the rows (and their counts), the vector stays
        perm = torch.randperm(8, generator=g)
        pout = rule(u[perm], DefenseContext(num_samples=n[perm]))
        assert pout.weights is not None
        torch.testing.assert_close(pout.vector, out.vector, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(pout.weights, out.weights[perm], rtol=1e-12, atol=0)
        # translation and scale equivariance
        t = torch.randn(13, generator=g, dtype=torch.float64)
        torch.testing.assert_close(rule(u + t, ctx).vector, out.vector + t, rtol=1e-12, atol=1e-12)
        c = float(torch.rand(1, generator=g)) * 5 + 0.1
        torch.testing.assert_close(rule(c * u, ctx).vector, c * out.vector, rtol=1e-12, atol=1e-12)
        # convex combination of the rows, hence coordinate bounded
        assert bool((out.weights >= 0).all()) and abs(float(out.weights.sum()) - 1) < 1e-12
        torch.testing.assert_close(out.vector, out.weights @ u, rtol=1e-12, atol=1e-12)
        assert bool((out.vector <= u.max(0).values + 1e-12).all())
        assert bool((out.vector >= u.min(0).values - 1e-12).all())
