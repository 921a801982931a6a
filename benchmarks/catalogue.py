"""The catalogue matrix's hot paths, each against the path it replaced, side by side in one process.

``python -m benchmarks.catalogue [--repeats N] [--rounds T]``

* ``cell``: one cell of ``scenarios/defenses.toml`` (logistic regression, 50 clients, alie x median,
  ``--rounds`` rounds, one thread) with the task's closed forms (``Problem.shared_grad``, the
  batched loss behind the objective) against the same cell with ``vmap(grad(loss))`` and the
  vmapped loss, i.e. the problem with those two replaced; final models checked identical;
* ``bulyan``: Bulyan's selection at K = 50, P = 105, f = 10 (``repeated_krum``, compiled) against
  the ``select_lowest`` loop it replaced, on rows like an ``optimal`` round's (the 10 Byzantine
  rows identical: every other pick needs the exact re-scoring); picks checked identical.

Ratio = old / new (> 1: the new path is faster); best of N, the two alternating (``rules.alternate``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import torch

from robustfl.defenses._select import Distances, repeated_krum, select_lowest
from robustfl.kernels import krum_neighbours
from robustfl.scenario import load_scenario
from robustfl.simulation.runner import Simulation
from robustfl.tasks._data import weighted_objective

from .rules import alternate


def _krum_loop(updates: torch.Tensor, f: int, count: int) -> list[int]:
    """The selection Bulyan made before ``repeated_krum``: ``select_lowest`` on a shrinking pool."""
    dist, pool, picks = Distances.of(updates), torch.arange(updates.shape[0]), []
    for _ in range(count):
        pick = int(select_lowest(dist, pool, krum_neighbours(len(pool), f), 1)[0][0])
        picks.append(pick)
        pool = pool[pool != pick]
    return picks


def bench_cell(rounds: int = 60, repeats: int = 5) -> dict[str, Any]:
    sc = load_scenario("defenses", [f"federation.rounds={rounds}"])
    fast = Simulation(sc, "alie", "median", 0)
    slow = Simulation(sc, "alie", "median", 0)
    p = slow.problem
    objective = weighted_objective(p.loss, p.client_data, p.client_mask, p.num_samples)
    slow.problem = dataclasses.replace(p, shared_grad=None, objective=objective)
    same = torch.equal(fast.run().final_model, slow.run().final_model)
    best, ran = alternate({"closed_form": fast.run, "vmap": slow.run}, repeats)
    return {
        "case": f"cell alie x median, logreg, 50 clients, {rounds} rounds",
        "new_s": best["closed_form"],
        "old_s": best["vmap"],
        "ratio": best["vmap"] / best["closed_form"],
        "identical": same,
        "repeats": ran,
    }


def bench_bulyan(k: int = 50, p: int = 105, f: int = 10, repeats: int = 20) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    u = torch.randn(k, p, generator=g, dtype=torch.float64)
    u[k - f :] = u[: k - f].mean(0) + 1.5 * u[: k - f].std(0)  # f identical rows, as ALIE sends
    count = k - 2 * f
    new = lambda: repeated_krum(Distances.of(u), f, count).tolist()  # noqa: E731
    old = lambda: _krum_loop(u, f, count)  # noqa: E731
    same = new() == old()
    best, ran = alternate({"repeated_krum": new, "select_lowest loop": old}, repeats)
    return {
        "case": f"bulyan selection, K={k}, P={p}, f={f}, {f} identical rows",
        "new_s": best["repeated_krum"],
        "old_s": best["select_lowest loop"],
        "ratio": best["select_lowest loop"] / best["repeated_krum"],
        "identical": same,
        "repeats": ran,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.catalogue", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="best of N (default 5; the selection 4 N)")
    ap.add_argument("--rounds", type=int, default=60, help="rounds of the cell (default 60)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = [bench_cell(args.rounds, args.repeats), bench_bulyan(repeats=4 * args.repeats)]
    print("| case | new | old | old / new | identical |\n|---|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['new_s'] * 1e3:.2f} ms | {r['old_s'] * 1e3:.2f} ms | {r['ratio']:.2f}x "
            f"| {'yes' if r['identical'] else 'NO'} |"
        )
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
