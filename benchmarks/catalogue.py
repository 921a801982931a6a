"""The catalogue matrix's hot paths, each against the path it replaced, side by side in one process.

``python -m benchmarks.catalogue [--repeats N] [--rounds T]``

* ``cell``: one cell of ``scenarios/defenses.toml`` (logistic regression, 50 clients, alie x median,
  ``--rounds`` rounds, one thread) with the task's closed forms (``Problem.shared_grad``, the
  batched loss behind the objective) against the same cell with ``vmap(grad(loss))`` and the
  vmapped loss, i.e. the problem with those two replaced; final models checked identical;
* ``bulyan``: Bulyan's selection at K = 50, P = 105, f = 10 (``repeated_krum``, compiled) against
  the ``select_lowest`` loop it replaced, on rows like an ``optimal`` round's (the 10 Byzantine
  rows identical: every other pick needs the exact re-scoring); picks checked identical.

* ``flame``: FLAME's clustering on the cosine distances of such a round (K = 50): HDBSCAN's closed
  form at FLAME's settings (``flame.majority_cluster``, compiled) against scikit-learn's HDBSCAN,
  which FLAME called before; masks checked identical;
* ``dnc``: DnC at P = 105 <= ``subsample``, where every draw is all the coordinates, with the
  filter computed once against the five-fold loop it replaced; weights checked identical;
* ``optimal``: one round of the ``optimal`` attack (alie, 51 evaluations) against a mean oracle,
  with alie's ``along`` line (statistics once) against building the attack for each value;
  rows checked identical.

Ratio = old / new (> 1: the new path is faster); best of N, the two alternating (``rules.alternate``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from robustfl.defenses._select import Distances, repeated_krum, select_lowest
from robustfl.kernels import krum_neighbours
from robustfl.scenario import load_scenario
from robustfl.simulation.runner import Simulation
from robustfl.tasks._data import weighted_objective

from .rules import alternate


def _compare(
    case: str, new: tuple[str, Callable[[], Any]], old: tuple[str, Callable[[], Any]], same: bool,
    repeats: int, per: int = 1,
) -> dict[str, Any]:
    """Time ``new`` and ``old`` alternating (best of ``repeats``; each call runs the path ``per``
    times) and report them with the ratio old / new and whether the results were identical."""
    best, ran = alternate(dict([new, old]), repeats)
    t_new, t_old = best[new[0]], best[old[0]]
    return {"case": case, "new_s": t_new / per, "old_s": t_old / per, "ratio": t_old / t_new,
            "identical": same, "repeats": ran}


def krum_loop(updates: torch.Tensor, f: int, count: int) -> list[int]:
    """The selection Bulyan made before ``repeated_krum``: ``select_lowest`` on a shrinking pool
    (also the reference of tests/defenses/test_repeated_krum.py)."""
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
    case = f"cell alie x median, logreg, 50 clients, {rounds} rounds"
    return _compare(case, ("closed form", fast.run), ("vmap", slow.run), same, repeats)


def bench_bulyan(k: int = 50, p: int = 105, f: int = 10, repeats: int = 20) -> dict[str, Any]:
    u = _optimal_like(k, p, f, torch.float64)
    count = k - 2 * f
    new = lambda: repeated_krum(Distances.of(u), f, count).tolist()  # noqa: E731
    old = lambda: krum_loop(u, f, count)  # noqa: E731
    case = f"bulyan selection, K={k}, P={p}, f={f}, {f} identical rows"
    return _compare(case, ("repeated_krum", new), ("select_lowest loop", old), new() == old(), repeats)


def _optimal_like(k: int, p: int, f: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """K rows like an ``optimal`` round's: K - f Gaussian rows and f identical ones, as ALIE sends."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(k, p, generator=g, dtype=torch.float64)
    u[k - f :] = u[: k - f].mean(0) + 1.5 * u[: k - f].std(0)
    return u.to(dtype)


def bench_flame(k: int = 50, p: int = 105, f: int = 10, repeats: int = 20) -> dict[str, Any]:
    import warnings

    import numpy as np
    from sklearn.cluster import HDBSCAN

    from robustfl.defenses._select import gram64
    from robustfl.defenses.flame import majority_cluster

    u = _optimal_like(k, p, f)
    n = torch.linalg.vector_norm(u, dim=1).double()
    dist = (1 - gram64(u) / (n[:, None] * n[None, :])).clamp(0.0, 2.0).fill_diagonal_(0.0).numpy()

    def scikit() -> np.ndarray:
        hdb = HDBSCAN(min_cluster_size=k // 2 + 1, min_samples=1, metric="precomputed",
                      allow_single_cluster=True, copy=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            labels = hdb.fit_predict(dist)
        out: np.ndarray = labels == int(np.argmax(np.bincount(labels[labels >= 0])))
        return out

    same = bool((majority_cluster(dist) == scikit()).all())
    loops = 20  # microseconds a call: time 20 calls in a row, both sides alike
    new = lambda: [majority_cluster(dist) for _ in range(loops)]  # noqa: E731
    old = lambda: [scikit() for _ in range(loops)]  # noqa: E731
    case = f"flame clustering, K={k}, {f} identical rows"
    return _compare(case, ("closed form", new), ("scikit-learn", old), same, repeats, per=loops)


def _dnc_every_draw(rule: Any, updates: torch.Tensor, ctx: Any) -> torch.Tensor:
    """DnC's good set as computed before the one-filter case: the filter on every draw."""
    from robustfl.defenses._select import f_hat, generator_for

    k, p = updates.shape
    keep_n = max(1, k - int(rule.c * f_hat(ctx) + 1e-9))
    good = torch.ones(k, dtype=torch.bool)
    g = generator_for(ctx)
    for _ in range(rule.iterations):
        r = torch.sort(torch.randperm(p, generator=g)[: rule.subsample]).values
        sub = updates[:, r].to(torch.float64)
        centred = sub - sub.mean(0)
        lam, vecs = torch.linalg.eigh(centred @ centred.T)
        scores = lam[-1].clamp(min=0) * vecs[:, -1].square()
        keep = torch.zeros_like(good)
        keep[torch.sort(scores, stable=True).indices[:keep_n]] = True
        good &= keep
    return good


def bench_dnc(k: int = 50, p: int = 105, f: int = 10, repeats: int = 20) -> dict[str, Any]:
    from robustfl import defenses
    from robustfl.types import DefenseContext

    u = _optimal_like(k, p, f)
    rule = defenses.create("dnc")

    def ctx() -> DefenseContext:
        return DefenseContext(assumed_byzantine=f, generator=torch.Generator().manual_seed(1))

    new = lambda: rule(u, ctx()).weights  # noqa: E731
    old = lambda: _dnc_every_draw(rule, u, ctx())  # noqa: E731
    w = new()
    same = w is not None and torch.equal(w > 0, old())
    case = f"dnc, K={k}, P={p} <= subsample, f={f}"
    return _compare(case, ("once", new), ("every draw", old), same, repeats)


def bench_optimal_line(k: int = 50, p: int = 105, f: int = 10, repeats: int = 10) -> dict[str, Any]:
    from robustfl import attacks
    from robustfl.types import Aggregate, AttackContext

    u = _optimal_like(k, p, f)
    honest = u[: k - f]

    def oracle(rows: torch.Tensor) -> Aggregate:
        return Aggregate(vector=torch.cat([rows, honest]).mean(0))

    ctx = AttackContext(own=u[k - f :], honest=honest, num_clients=k, round=0, oracle=oracle,
                        generator=torch.Generator().manual_seed(0))
    fast, slow = attacks.create("optimal"), attacks.create("optimal")
    slow._line = lambda c, device, state: (lambda x: slow._rows(c, device, state, x))
    same = torch.equal(fast(ctx), slow(ctx))
    case = f"optimal (alie) round, K={k}, P={p}, mean oracle"
    return _compare(case, ("line", lambda: fast(ctx)), ("per value", lambda: slow(ctx)), same, repeats)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.catalogue", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="best of N (default 5; the selection 4 N)")
    ap.add_argument("--rounds", type=int, default=60, help="rounds of the cell (default 60)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = [
        bench_cell(args.rounds, args.repeats),
        bench_bulyan(repeats=4 * args.repeats),
        bench_flame(repeats=4 * args.repeats),
        bench_dnc(repeats=4 * args.repeats),
        bench_optimal_line(repeats=2 * args.repeats),
    ]
    print("| case | new | old | old / new | identical |\n|---|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['new_s'] * 1e3:.2f} ms | {r['old_s'] * 1e3:.2f} ms | {r['ratio']:.2f}x "
            f"| {'yes' if r['identical'] else 'NO'} |"
        )
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
