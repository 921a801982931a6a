"""Each rule against the cheapest operation its maths cannot avoid, on the same (K, P) float32 matrix.

* mean-type rules (fedavg, fltrust, fedsim) read every entry once: floor = one ``U.sum(0)``
  (target: within 3x);
* distance rules (krum, multi_krum, bulyan) need every pairwise distance: floor = one
  ``U @ U.T`` in float32 (target: krum within 2x; the others are reported);
* coordinate-wise rules (median, trimmed_mean, meamed): they too must read every entry once:
  floor = one ``U.sum(0)`` (target: within 10x -- issue 16; they were 25-55x with a numpy
  selection along axis 0, and are a compiled sorting network now, robustfl/_order_stats.py).

ratio = rule_s / floor_s (lower is better). Rule and floor alternate, best of N, in one process.
The contexts give each rule what it needs: sample counts (fedavg), a reference update close to
the honest mean (fltrust), the global model (fedsim, model basis), f assumed Byzantine.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from robustfl.defenses import create
from robustfl.types import DefenseContext

from .rules import BIG, alternate, make_updates, progress, verdict

# rule -> (floor name, target ratio or None)
FLOORS: dict[str, tuple[str, float | None]] = {
    "fedavg": ("U.sum(0)", 3.0),
    "fltrust": ("U.sum(0)", 3.0),
    "fedsim": ("U.sum(0)", 3.0),
    "krum": ("U @ U.T", 2.0),
    "multi_krum": ("U @ U.T", None),
    "bulyan": ("U @ U.T", None),
    "median": ("U.sum(0)", 10.0),
    "trimmed_mean": ("U.sum(0)", 10.0),
    "meamed": ("U.sum(0)", None),
}


def floor_fn(floor: str, u: Tensor, f: int) -> Callable[[], Any]:
    """The floor operation as a zero-argument call on ``u``."""
    k = u.shape[0]
    if floor == "U.sum(0)":
        return lambda: u.sum(0)
    if floor == "U @ U.T":
        return lambda: u @ u.T
    a = u.numpy()
    if floor.startswith("np.median"):
        return lambda: np.median(a, axis=0)
    if floor.startswith("np.partition"):
        return lambda: np.partition(a, (f, k - f - 1), axis=0)[f : k - f].mean(axis=0)
    raise KeyError(floor)


def context(u: Tensor, f: int, seed: int = 0) -> DefenseContext:
    """What the server knows: sample counts, a reference near the honest mean, the global model."""
    k, p = u.shape
    g = torch.Generator().manual_seed(seed + 1)
    honest_mean = u[: k - f].mean(0)
    reference = honest_mean + 0.1 * torch.randn(p, generator=g)
    return DefenseContext(
        assumed_byzantine=f,
        num_samples=torch.randint(20, 200, (k,), generator=g).to(torch.float64),
        reference=reference,
        global_model=torch.randn(p, generator=g),
        generator=torch.Generator().manual_seed(seed),
    )


def bench_floors(
    k: int = 50,
    p: int = 1_000_000,
    f: int = 10,
    repeats: int = 5,
    budget_s: float = 60.0,
    names: Sequence[str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Every rule in FLOORS against its floor. Returns {"cases": [...], ...}."""
    u = make_updates(k, p, f, seed)
    ctx = context(u, f, seed)
    cases = []
    for name in names if names is not None else list(FLOORS):
        floor, target = FLOORS[name]
        rule = create(name)
        try:
            best, ran = alternate(
                {"rule": lambda r=rule: r(u, ctx), "floor": floor_fn(floor, u, f)},
                repeats,
                budget_s=budget_s,
                collect=u.numel() >= BIG,
            )
            ratio = best["rule"] / best["floor"]
            rec: dict[str, Any] = {
                "name": name,
                "floor": floor,
                "rule_s": best["rule"],
                "floor_s": best["floor"],
                "ratio": ratio,
                "target": target,
                "verdict": verdict(ratio, target, higher_is_better=False),
                "repeats": ran,
            }
        except Exception as e:  # report and go on
            rec = {"name": name, "floor": floor, "error": f"{type(e).__name__}: {e}", "verdict": "ERR"}
        cases.append(rec)
        progress(
            f"floors {name}: "
            + (
                rec["error"]
                if "error" in rec
                else f"rule {rec['rule_s']:.3g} s, {floor} {rec['floor_s']:.3g} s"
            )
        )
        if u.numel() >= BIG:
            gc.collect()
    return {"k": k, "p": p, "f": f, "dtype": "float32", "threads": torch.get_num_threads(), "cases": cases}
