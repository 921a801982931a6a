"""The vectorised engine against a per-client loop, and its minibatch/epoch semantics."""

from __future__ import annotations

import torch

from robustfl.simulation.engine import local_train


def _lsq(w: torch.Tensor, batch: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
    x, y = batch
    r = (x @ w - y) ** 2 * mask
    return 0.5 * r.sum() / mask.sum().clamp(min=1)


def test_full_batch_matches_per_client_gradient_descent() -> None:
    g = torch.Generator().manual_seed(0)
    s, n, p = 7, 9, 4
    x = torch.randn(s, n, p, generator=g, dtype=torch.float64)
    y = torch.randn(s, n, generator=g, dtype=torch.float64)
    counts = torch.tensor([9, 3, 5, 1, 9, 7, 2])
    mask = torch.arange(n)[None, :] < counts[:, None]
    start = torch.randn(s, p, generator=g, dtype=torch.float64)
    out = local_train(_lsq, start, (x, y), mask, steps=5, lr=0.1, batch_size=0, generator=g)
    for k in range(s):  # literal per-client loop with autograd
        w = start[k].clone()
        xk, yk = x[k, : counts[k]], y[k, : counts[k]]
        for _ in range(5):
            w.requires_grad_(True)
            loss = 0.5 * ((xk @ w - yk) ** 2).mean()
            (gk,) = torch.autograd.grad(loss, w)
            w = (w - 0.1 * gk).detach()
        torch.testing.assert_close(out[k], w, rtol=1e-12, atol=1e-12)


def test_extra_grad_is_added_each_step() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.zeros(2, 3, 2, dtype=torch.float64)
    y = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.bool)
    start = torch.ones(2, 2, dtype=torch.float64)
    # zero loss gradient; extra = mu * theta -> theta_{t+1} = (1 - lr mu) theta_t
    out = local_train(
        _lsq, start, (x, y), mask, steps=3, lr=0.5, batch_size=0, generator=g, extra_grad=lambda th: 0.2 * th
    )
    torch.testing.assert_close(out, start * (1 - 0.5 * 0.2) ** 3)


def _indicator_loss(w: torch.Tensor, batch: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
    (x,) = batch
    return ((x @ w) * mask).sum() / mask.sum().clamp(min=1)


def test_minibatches_follow_per_client_epochs() -> None:
    """With x_i = e_i, one epoch at lr 1 leaves -1/|batch of i| on every real sample's coordinate."""
    n_max, bsz = 7, 3
    counts = torch.tensor([7, 5, 2, 3])
    s = counts.numel()
    mask = torch.arange(n_max)[None, :] < counts[:, None]
    x = torch.eye(n_max, dtype=torch.float64).expand(s, n_max, n_max).clone()
    g = torch.Generator().manual_seed(3)
    for k in range(s):
        steps = int((counts[k] + bsz - 1) // bsz)  # exactly one epoch for client k
        out = local_train(
            _indicator_loss,
            torch.zeros(s, n_max, dtype=torch.float64),
            (x,),
            mask,
            steps=steps,
            lr=1.0,
            batch_size=bsz,
            generator=g,
        )[k]
        n = int(counts[k])
        assert torch.all(out[n:] == 0), "padding was trained on"
        assert torch.all(out[:n] < 0), "a sample was skipped in the epoch"
        sizes = sorted(set((-1 / out[:n]).round().tolist()))
        expect = {bsz} if n % bsz == 0 else {bsz, n % bsz}
        assert set(sizes) <= expect | {float(n)}


def test_same_generator_same_result_bit_for_bit() -> None:
    def run() -> torch.Tensor:
        g = torch.Generator().manual_seed(11)
        x = torch.randn(5, 20, 3, generator=g)
        y = torch.randn(5, 20, generator=g)
        mask = torch.ones(5, 20, dtype=torch.bool)
        return local_train(_lsq, torch.zeros(5, 3), (x, y), mask, steps=9, lr=0.05, batch_size=4, generator=g)

    assert torch.equal(run(), run())


def test_one_step_at_a_shared_point_matches_a_literal_per_client_loop() -> None:
    """``point``: one minibatch step from the shared model, each client's gradient taken at it.

    Reference: the per-client loop with autograd on the same minibatches (drawn by the batched
    path from the same generator), float64; and the batched path itself (the previous engine).
    """
    g = torch.Generator().manual_seed(3)
    s, n, p, bsz = 6, 8, 5, 3
    x = torch.randn(s, n, p, generator=g, dtype=torch.float64)
    y = torch.randn(s, n, generator=g, dtype=torch.float64)
    counts = torch.tensor([8, 2, 5, 1, 8, 3])
    mask = torch.arange(n)[None, :] < counts[:, None]
    w = torch.randn(p, generator=g, dtype=torch.float64)
    start = w.expand(s, -1)

    def train(point: torch.Tensor | None) -> torch.Tensor:
        gen = torch.Generator().manual_seed(11)
        return local_train(
            _lsq, start, (x, y), mask, steps=1, lr=0.3, batch_size=bsz, generator=gen, point=point
        )

    at_point, batched = train(w), train(None)
    torch.testing.assert_close(at_point, batched, rtol=1e-13, atol=1e-13)
    assert torch.equal(train(w), at_point)  # bit for bit from run to run
    # the literal loop: the batch each client drew (the first of its epoch's permutation)
    gen = torch.Generator().manual_seed(11)
    keys = torch.rand(s, n, generator=gen, dtype=torch.float64)
    keys = torch.where(mask, keys, torch.full_like(keys, 2.0))
    perm = torch.argsort(keys, dim=1)
    for k in range(s):
        idx = perm[k, : min(bsz, int(counts[k]))]
        wk = w.clone().requires_grad_(True)
        loss = 0.5 * ((x[k, idx] @ wk - y[k, idx]) ** 2).mean()
        (gk,) = torch.autograd.grad(loss, wk)
        torch.testing.assert_close(at_point[k], w - 0.3 * gk, rtol=1e-12, atol=1e-12)


def test_point_is_ignored_with_several_steps_or_an_extra_term() -> None:
    """Two steps leave the shared point, and an algorithm's extra term needs each row: the batched path."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    y = torch.randn(3, 4, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 4, dtype=torch.bool)
    w = torch.randn(2, generator=g, dtype=torch.float64)
    for kw in ({"steps": 2}, {"steps": 1, "extra_grad": lambda th: 0.1 * th}):
        a = local_train(_lsq, w.expand(3, -1), (x, y), mask, lr=0.1, batch_size=0, generator=g, point=w, **kw)
        b = local_train(_lsq, w.expand(3, -1), (x, y), mask, lr=0.1, batch_size=0, generator=g, **kw)
        assert torch.equal(a, b)
