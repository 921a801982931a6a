"""Vectorised local training: every participant's local SGD in one batched computation.

``local_train`` runs ``steps`` SGD steps for all S clients at once with
``torch.func.vmap(torch.func.grad(loss))`` over the client dimension. Clients hold different
numbers of samples: their data are padded to a common length and a mask marks the real
samples. Minibatches follow per-client epochs: each client draws a fresh permutation of its own
samples at the start of each of its epochs (``ceil(n_k / B)`` steps), so a client with 50 samples
at batch 10 sees every sample once in 5 steps; the last batch of an epoch may be smaller.
``batch_size = 0`` (or >= the client's size) is full-batch gradient descent.
There is no Python loop over clients: only over local steps, and -- when S x P is large (P in
the millions) -- over chunks of clients, so that the gradient's temporaries stay within
``CHUNK_ELEMENTS`` values instead of several copies of the (S, P) matrix.

One local step from a shared point (``point``: every client starts at the same global model, the
papers' "one local iteration" setting) is one per-client gradient at that point:
``vmap(grad(loss), in_dims=(None, 0, 0))`` with the parameters unbatched, so every layer runs as one
ordinary batched kernel over all clients' samples with one set of weights and only the weight
gradients are kept per client. Same batches, same values up to float rounding (the kernels sum in
another order), bit for bit from run to run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import grad, vmap

from ..tasks.base import LossFn, SharedGrad

ExtraGrad = Callable[[Tensor], Tensor | None]
CHUNK_ELEMENTS = 1 << 26  # values per gradient chunk (256 MB of float32)


def gather_clients(data: tuple[Tensor, ...], ids: Tensor) -> tuple[Tensor, ...]:
    return tuple(t.index_select(0, ids) for t in data)


def local_train(
    loss: LossFn,
    start: Tensor,
    data: tuple[Tensor, ...],
    mask: Tensor,
    *,
    steps: int,
    lr: float,
    batch_size: int,
    generator: torch.Generator,
    extra_grad: ExtraGrad | None = None,
    inplace: bool = False,
    point: Tensor | None = None,
    shared_grad: SharedGrad | None = None,
) -> Tensor:
    """Train S clients from ``start`` (S, P); ``data`` tensors are (S, n_max, ...), ``mask`` (S, n_max).

    Returns the trained models (S, P). ``extra_grad(theta)`` adds the algorithm's term
    (FedProx's proximal pull, FedDyn's linear and quadratic terms) to each step's gradient.
    With ``inplace`` the caller hands over ``start`` (a fresh tensor) and gets it back trained,
    saving one (S, P) copy. ``point`` (P,): every row of ``start`` equals it; with ``steps == 1``
    and no ``extra_grad`` the gradients are taken at it (see the module docstring), by the task's
    closed form ``shared_grad`` where it has one (bit for bit the same gradients).
    """
    shared = point if steps == 1 and extra_grad is None else None  # gradients taken at one point
    if shared is not None:
        per_client_grad = shared_grad if shared_grad is not None else vmap(grad(loss), in_dims=(None, 0, 0))
    else:
        per_client_grad = vmap(grad(loss))
    theta = start if inplace else start.clone()
    s_count, n_max = mask.shape
    if s_count == 0:
        return theta
    width = max(1, theta.shape[1])
    chunk = s_count if extra_grad is not None else max(1, min(s_count, CHUNK_ELEMENTS // width))
    counts = mask.sum(1)
    full = batch_size <= 0 or batch_size >= int(counts.max())

    def step(batch: tuple[Tensor, ...], bmask: Tensor) -> None:
        if chunk >= s_count:
            g = per_client_grad(theta if shared is None else shared, batch, bmask)
            extra = extra_grad(theta) if extra_grad is not None else None
            if extra is not None:
                g = g + extra
            theta.sub_(g, alpha=lr)
            return
        for lo in range(0, s_count, chunk):  # large P: bounded temporaries
            sl = slice(lo, lo + chunk)
            at = theta[sl] if shared is None else shared
            g = per_client_grad(at, tuple(t[sl] for t in batch), bmask[sl])
            theta[sl].sub_(g, alpha=lr)

    if full:
        for _ in range(steps):
            step(data, mask)
        return theta

    bsz = batch_size
    batches_per_epoch = torch.clamp((counts + bsz - 1) // bsz, min=1)
    rows = torch.arange(s_count, device=mask.device)[:, None]
    offsets = torch.arange(bsz, device=mask.device)[None, :]
    perm = torch.zeros(s_count, n_max, dtype=torch.long, device=mask.device)
    for s in range(steps):
        b = s % batches_per_epoch  # (S,) which batch of its epoch each client is on
        keys = torch.rand(s_count, n_max, generator=generator, dtype=torch.float64).to(mask.device)
        starts = b == 0  # clients starting an epoch draw a new permutation (keys drawn regardless)
        if bool(starts.any()):
            keys = torch.where(mask, keys, torch.full_like(keys, 2.0))  # padding sorts last
            perm = torch.where(starts[:, None], torch.argsort(keys, dim=1), perm)
        pos = b[:, None] * bsz + offsets  # (S, B)
        bmask = pos < counts[:, None]
        idx = perm.gather(1, pos.clamp(max=n_max - 1))
        step(tuple(t[rows, idx] for t in data), bmask)
    return theta
