"""Engine round time vs the fastest per-client loop of the same maths.

Setup (the engine issue): K clients x 50 samples, one local epoch at batch 10 (5 SGD steps), a
digits-shaped MLP (64 -> 32 -> 10). The baseline reuses one nn.Module, copies each client's
parameters in, and runs torch.optim.SGD over that client's shuffled minibatches: the fastest
per-client loop we could write. The engine trains all K clients in one vmap(grad) per step.
Both run in this process, alternating, best of ``repeats``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as tf
from torch import nn

from robustfl.simulation.engine import local_train
from robustfl.tasks._flat import FlatModel, classifier_loss, fltrust_cnn, meta_module, mlp, small_cnn


def _loop_round(
    module: nn.Module,
    w: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    bsz: int,
    g: torch.Generator,
) -> torch.Tensor:
    k, n = y.shape
    out = torch.empty(k, w.numel())
    params = list(module.parameters())
    opt = torch.optim.SGD(params, lr=lr)
    for c in range(k):
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(w, params)
        perm = torch.randperm(n, generator=g)
        for s in range(0, n, bsz):
            idx = perm[s : s + bsz]
            opt.zero_grad(set_to_none=True)
            tf.cross_entropy(module(x[c, idx]), y[c, idx]).backward()
            opt.step()
        with torch.no_grad():
            out[c] = torch.nn.utils.parameters_to_vector(params)
    return out


def bench_engine(
    clients: int = 100, samples: int = 50, bsz: int = 10, repeats: int = 5, threads: int | None = None
) -> dict[str, Any]:
    if threads is not None:
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(clients, samples, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (clients, samples), generator=g)
    mask = torch.ones(clients, samples, dtype=torch.bool)
    flat = FlatModel(meta_module(lambda: mlp(64, 32, 10)))
    loss = classifier_loss(flat, 0.0)
    module = mlp(64, 32, 10)
    w = torch.randn(flat.numel, generator=g) * 0.1
    steps = (samples + bsz - 1) // bsz
    t_engine, t_loop = float("inf"), float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        local_train(
            loss, w.expand(clients, -1), (x, y), mask, steps=steps, lr=0.1, batch_size=bsz, generator=g
        )
        t_engine = min(t_engine, time.perf_counter() - t0)
        t0 = time.perf_counter()
        _loop_round(module, w, x, y, 0.1, bsz, g)
        t_loop = min(t_loop, time.perf_counter() - t0)
    return {
        "name": f"engine round K={clients}",
        "clients": clients,
        "params": flat.numel,
        "threads": torch.get_num_threads(),
        "engine_s": t_engine,
        "loop_s": t_loop,
        "speedup": t_loop / t_engine,
    }


def bench_one_step(
    clients: int = 100, samples: int = 80, bsz: int = 32, model: str = "cnn", repeats: int = 5
) -> dict[str, Any]:
    """The reproduction's round (issue 11): K clients, one local step on a minibatch of ``bsz``
    from the shared global model, MNIST-shaped CNN, one torch thread (as a matrix cell runs).

    Three timings, alternating, best of ``repeats``:
    * ``engine``: :func:`local_train` with ``point=w`` (gradients at the shared point);
    * ``previous``: the previous release's path, the same call without ``point`` (every client's
      parameters batched through ``vmap(grad)``), outputs compared;
    * ``floor``: one ordinary forward + backward of a single ``nn.Module`` over all K x bsz
      samples at once (one gradient, no per-client gradients): nothing per-client can be cheaper.
    """
    build = small_cnn if model == "cnn" else fltrust_cnn
    g = torch.Generator().manual_seed(0)
    x = torch.rand(clients, samples, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (clients, samples), generator=g)
    mask = torch.ones(clients, samples, dtype=torch.bool)
    flat = FlatModel(meta_module(lambda: build(28, 10)))
    loss = classifier_loss(flat, 0.0)
    module = build(28, 10)
    w = torch.randn(flat.numel, generator=g) * 0.1
    xf = x[:, :bsz].reshape(clients * bsz, 1, 28, 28)
    yf = y[:, :bsz].reshape(-1)

    def run(point: torch.Tensor | None) -> torch.Tensor:
        gen = torch.Generator().manual_seed(1)  # the same minibatches for both paths
        return local_train(
            loss, w.expand(clients, -1), (x, y), mask, steps=1, lr=0.1, batch_size=bsz, generator=gen,
            point=point,
        )

    def floor() -> None:
        module.zero_grad(set_to_none=True)
        tf.cross_entropy(module(xf), yf).backward()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = run(w), run(None)  # warm-up, and the agreement check
        diff = float((a - b).abs().max() / (b - w).abs().max())
        times = {"engine": float("inf"), "previous": float("inf"), "floor": float("inf")}
        for _ in range(repeats):
            for name, fn in (("engine", lambda: run(w)), ("previous", lambda: run(None)), ("floor", floor)):
                t0 = time.perf_counter()
                fn()
                times[name] = min(times[name], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return {
        "name": f"{model} one step K={clients}",
        "clients": clients,
        "batch_size": bsz,
        "params": flat.numel,
        "engine_s": times["engine"],
        "previous_s": times["previous"],
        "floor_s": times["floor"],
        "ratio_floor": times["engine"] / times["floor"],
        "speedup_previous": times["previous"] / times["engine"],
        "max_rel_diff": diff,
    }


if __name__ == "__main__":
    for k in (100, 1000):
        r = bench_engine(clients=k, repeats=3 if k > 100 else 5)
        print(
            f"{r['name']}: engine {r['engine_s'] * 1e3:.1f} ms, loop {r['loop_s'] * 1e3:.1f} ms, "
            f"speedup {r['speedup']:.1f}x ({r['threads']} threads)"
        )
