"""Compile robustfl's numba kernels into numba's on-disk cache: ``python -m robustfl._warm``.

``make setup`` runs it once after installing, so that a fresh clone's first matrix does not
compile them in each worker process (~8 s of wall on the whole catalogue). It calls the rules
that use them (and the order statistics' serial and threaded paths) on small float32 and float64
rows, which compiles exactly the signatures a run uses. Running it again costs a second.
"""

from __future__ import annotations

import time

import torch

from . import _order_stats, defenses
from .types import DefenseContext

RULES = ("median", "trimmed_mean", "meamed", "bulyan", "flame")  # the ones calling robustfl._compiled


def main() -> None:
    start = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        rows = torch.randn(11, 2 * _order_stats.BLOCK + 1, generator=g, dtype=dtype)
        for threads in (1, 2):
            _order_stats.order_stat_mean(rows.numpy(), 3, 7, threads)
        rows[3] = rows[2]  # a copy: Bulyan's repeated Krum meets a tie
        for name in RULES:
            defenses.create(name)(rows, DefenseContext(assumed_byzantine=2, generator=g))
    print(f"robustfl: numba kernels compiled and cached ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
