"""The order-statistic rules under autograd (the worst-case search's gradient stage): rows that
need a gradient take torch's sort, so the output keeps its value and the gradient of
sum(output) reaches exactly the order statistics each coordinate averages (numpy's argsort by
hand); the compiled path, without a gradient, is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl import defenses
from robustfl.types import DefenseContext

K, P, F = 11, 6, 2


def _rows() -> torch.Tensor:
    return torch.randn(K, P, dtype=torch.float64, generator=torch.Generator().manual_seed(5))


def _by_hand(u: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """d sum(out) / d u for out_j = mean of the order statistics lo..hi of column j."""
    grad = np.zeros_like(u)
    order = np.argsort(u, axis=0, kind="stable")
    for j in range(u.shape[1]):
        grad[order[lo : hi + 1, j], j] = 1.0 / (hi - lo + 1)
    return grad


@pytest.mark.parametrize(("name", "lo", "hi"), [("median", K // 2, K // 2), ("trimmed_mean", F, K - F - 1)])
def test_the_gradient_reaches_the_order_statistics_averaged(name: str, lo: int, hi: int) -> None:
    u = _rows().requires_grad_()
    rule = defenses.create(name)
    out = rule(u, DefenseContext(assumed_byzantine=F)).vector
    plain = rule(u.detach(), DefenseContext(assumed_byzantine=F)).vector
    assert out.requires_grad and not plain.requires_grad
    torch.testing.assert_close(out.detach(), plain, rtol=0, atol=1e-15)
    out.sum().backward()
    assert u.grad is not None
    np.testing.assert_allclose(u.grad.numpy(), _by_hand(u.detach().numpy(), lo, hi), rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["bulyan", "meamed"])
def test_selection_rules_built_on_them_carry_a_gradient_too(name: str) -> None:
    u = _rows().requires_grad_()
    rule = defenses.create(name)
    out = rule(u, DefenseContext(assumed_byzantine=F)).vector
    torch.testing.assert_close(out.detach(), rule(u.detach(), DefenseContext(assumed_byzantine=F)).vector,
                               rtol=0, atol=1e-15)
    out.sum().backward()
    assert u.grad is not None
    # each coordinate averages some rows' values: the gradient per column sums to 1, all entries >= 0
    np.testing.assert_allclose(u.grad.sum(0).numpy(), np.ones(P), rtol=0, atol=1e-12)
    assert bool((u.grad >= 0).all())
