"""Wall time of a whole matrix from the command line, ``--workers N`` against ``--workers 1``.

Each run is what a user types: ``python -m robustfl matrix SCENARIO --workers N --store
<fresh> --json <file> --quiet`` in a fresh process (interpreter start, imports, the worker pool's
start-up and the store's commits included). Runs alternate (1, N, N, 1, 1, N, ...) so a slow
spell on the machine hits both; best-of and median ratios are reported. The cells of every run
must be identical (everything but ``elapsed_s``), else the group fails.

The machine's own ceiling is measured beside it: a fixed CPU-bound torch job (a loop of small
matrix products, single-threaded, like a cell) run once alone and then as N copies at once;
``ceiling = N * alone / together`` is the most N processes can gain on this machine (below N
when the CPUs share caches, memory bandwidth or a hypervisor's time). That loop lives in the
first-level caches; a cell does not (its data and temporaries are hundreds of KB to MB), so a
second ceiling runs the matrix's own work the same way (``cells_ceiling``: every ``sample_step``-th
cell of the matrix being timed, in its planned order, run in-process on one thread as a worker
runs it, once alone and as N copies at once): what the machine gives N processes doing this
work. Both are reported, each with its efficiency. (An earlier second ceiling ran one cell,
``defenses``' alie x median, over and over: one kind of work, more memory-bound than the mix,
it gave the pool 102-113% of itself.)

Ceilings measured before a pair miss the drift during it (on a shared machine a run's speed can
move by a third within minutes). So each run also reports how busy its processes were: ``busy_w``
= the sum of the cells' own times / (w x wall), the fraction of the processes' time spent inside
cells, measured within the run itself. ``pool_efficiency = busy_N / busy_1`` is what the pool
achieves against a single process: whatever the machine takes from concurrent cells (they run
slower) is inside the cells' times and cancels; what is left is the pool's own cost -- start-up,
dispatch, results, an idle process at the tail.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_SPIN = """
import time, torch
torch.set_num_threads(1)
a = torch.randn(64, 64, dtype=torch.float64)
t = time.perf_counter()
for _ in range({n}):
    a = torch.tanh(a @ a / 64)
print(time.perf_counter() - t)
"""


_CELLS = """
import sys, time, torch
from robustfl.scenario import load_scenario
from robustfl.sweep.jobs import run_job
from robustfl.sweep.plan import plan
torch.set_num_threads(1)
extra = {extra!r}
def given(flag):
    return extra[extra.index(flag) + 1].split(",") if flag in extra else None
sets = [extra[i + 1] for i, a in enumerate(extra) if a == "--set"]
seeds = given("--seeds")
jobs = plan(load_scenario({scenario!r}, sets), given("--attacks"), given("--defenses"),
            [int(s) for s in seeds] if seeds else None)
sample = jobs[::{step}]
run_job(sample[0], None)  # imports, compiled kernels, the first seed's data
t = time.perf_counter()
for job in sample:
    run_job(job, None)
print(time.perf_counter() - t)
"""


def _cells(path: Path) -> tuple[list[dict[str, Any]], float]:
    """The run's cells without their times, in a fixed order, and the sum of those times."""
    cells = json.loads(path.read_text())["cells"]
    busy = sum(float(c.pop("elapsed_s", 0.0) or 0.0) for c in cells)
    return sorted(cells, key=lambda c: (c["attack"], c["defense"], c["seed"])), busy


def _run(
    scenario: str, workers: int, tmp: Path, i: int, extra: Sequence[str] = ()
) -> tuple[float, list[dict[str, Any]], float]:
    store, js = tmp / f"s{i}.db", tmp / f"m{i}.json"
    cmd = [sys.executable, "-m", "robustfl", "matrix", scenario, "--workers", str(workers), *extra]
    cmd += ["--store", str(store), "--json", str(js), "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):  # 1: some cell failed, still a finished matrix
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return (wall, *_cells(js))


def ceiling(
    n: int, iterations: int = 20_000, rounds: int = 4, code: str | None = None
) -> dict[str, float]:
    """N copies of a single-threaded CPU-bound torch loop (``code``: a script printing its own
    timed seconds; default the spin loop) at once against one alone, interleaved ``rounds`` times
    (alone, together, alone, ...) and the best of each kept: a shared machine's speed drifts from
    second to second, and a single slow 'alone' would give a ceiling above N."""
    code = code if code is not None else _SPIN.format(n=iterations)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def together(k: int) -> float:
        procs = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(k)
        ]
        return max(float(p.communicate()[0]) for p in procs)

    alone, both = math.inf, math.inf
    for _ in range(rounds):
        alone = min(alone, together(1))
        both = min(both, together(n))
    return {"alone_s": alone, "together_s": both, "ceiling": n * alone / both}


def bench_matrix(
    scenario: str = "quick",
    workers: int = 2,
    repeats: int = 3,
    extra: Sequence[str] = (),
    spin_iterations: int = 20_000,
    sample_step: int = 12,
    ceiling_rounds: int = 4,
) -> dict[str, Any]:
    """``repeats`` pairs of runs, ``--workers 1`` and ``--workers N`` (``extra``: more CLI
    arguments, e.g. a subset of the matrix; the pair's order alternates), each pair beside its own
    measurements of the machine's ceilings (the speed of a shared machine drifts between minutes:
    a pair is compared with the ceilings measured just before it). ``efficiency`` = (wall 1 /
    wall N) / ceiling per pair, ``cells_efficiency`` the same against the ceiling of the
    matrix's own cells (every ``sample_step``-th; ``ceiling_rounds`` interleaved measurements of
    each ceiling); the medians are reported, and ``machine`` is the spin-loop measurement of the pair
    with the middle ceiling (none is taken again)."""
    times: dict[int, list[float]] = {1: [], workers: []}
    pairs: list[dict[str, float]] = []
    first: list[dict[str, Any]] | None = None
    identical = True
    with tempfile.TemporaryDirectory(prefix="robustfl-bench-") as d:
        for r in range(repeats):
            machine = ceiling(workers, spin_iterations, ceiling_rounds)
            code = _CELLS.format(extra=list(extra), scenario=scenario, step=sample_step)
            cell = ceiling(workers, rounds=ceiling_rounds, code=code)["ceiling"]
            walls: dict[int, float] = {}
            busy: dict[int, float] = {}
            for w in ((1, workers) if r % 2 == 0 else (workers, 1)):
                wall, cells, cell_s = _run(scenario, w, Path(d), 2 * r + (w != 1), extra)
                times[w].append(wall)
                walls[w] = wall
                busy[w] = cell_s / (w * wall)
                first = cells if first is None else first
                identical = identical and cells == first
                print(f"  matrix {scenario} --workers {w}: {wall:.2f} s", file=sys.stderr, flush=True)
            speedup = walls[1] / walls[workers]
            pairs.append(
                {
                    **machine,
                    "speedup": speedup,
                    "efficiency": speedup / machine["ceiling"],
                    "cells_ceiling": cell,
                    "cells_efficiency": speedup / cell,
                    "busy_1": busy[1],
                    f"busy_{workers}": busy[workers],
                    "pool_efficiency": busy[workers] / busy[1],
                }
            )
            print(
                f"  pair {r + 1}: speed-up {speedup:.2f}, ceiling {machine['ceiling']:.2f}, "
                f"efficiency {speedup / machine['ceiling']:.0%}; cells ceiling {cell:.2f}, "
                f"efficiency {speedup / cell:.0%}; in cells {busy[1]:.0%} / {busy[workers]:.0%} of "
                f"the processes' time, pool efficiency {busy[workers] / busy[1]:.0%}",
                file=sys.stderr,
                flush=True,
            )
    if not identical:
        raise RuntimeError(f"--workers {workers} and --workers 1 gave different cells")
    return {
        "scenario": scenario,
        "workers": workers,
        "cells": len(first or []),
        "wall_1_s": times[1],
        f"wall_{workers}_s": times[workers],
        "ratio_best": min(times[1]) / min(times[workers]),
        "ratio_median": statistics.median(times[1]) / statistics.median(times[workers]),
        "pairs": pairs,
        "efficiency_median": statistics.median(p["efficiency"] for p in pairs),
        "ceiling_median": statistics.median(p["ceiling"] for p in pairs),
        "cells_efficiency_median": statistics.median(p["cells_efficiency"] for p in pairs),
        "cells_ceiling_median": statistics.median(p["cells_ceiling"] for p in pairs),
        "pool_efficiency_median": statistics.median(p["pool_efficiency"] for p in pairs),
        "identical": identical,
        "extra": list(extra),
        "machine": sorted(pairs, key=lambda p: p["ceiling"])[len(pairs) // 2],  # the middle pair's
    }
