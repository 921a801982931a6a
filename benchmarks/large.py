"""Large K and P: peak resident memory of whole cells, each in its own process.

* ``k1000``: K = 1,000 clients x 50 samples of MNIST-shaped generated data (1x28x28, 10 classes),
  an MLP 784 -> 126 -> 10 (P = 100,180), 10 rounds of FLTrust under sign_flip (20% Byzantine).
  Target: peak RSS < 8 GB.
* ``p10m-<rule>``: K = 100 clients, P = 10,000,000 (task quadratic, diagonal, scalar heterogeneity,
  float32: 4 GB of updates per round), 3 rounds of fedavg / fltrust / median under sign_flip with
  threat.knowledge = "own" (so the honest rows are not copied for the attacker). Target: < 16 GB.

``python -m benchmarks.large`` runs every case in a subprocess and prints/returns their figures.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

import robustfl
from robustfl.tasks._data import image_problem
from robustfl.tasks._flat import meta_module, mlp
from robustfl.tasks.base import Partition, Problem, Task
from robustfl.types import TaskInfo


@dataclass
class SyntheticMNIST(Task):
    """MNIST-shaped random images (benchmark only): ``samples_per_client`` each, ``hidden`` units."""

    samples_per_client: int = 50
    hidden: int = 126
    name = "synthetic_mnist"

    def build(self, *, clients: int, partition: Partition, root_size: int, root_bias: float,
              generator: torch.Generator, base_dir: str | None = None) -> Problem:
        n = clients * self.samples_per_client + root_size + 1000
        x = torch.rand(n, 1, 28, 28, generator=generator)
        y = torch.randint(0, 10, (n,), generator=generator)
        hidden = self.hidden
        return image_problem(
            info=TaskInfo(name=self.name, num_classes=10, input_shape=(1, 28, 28), is_image=True),
            module=meta_module(lambda: mlp(784, hidden, 10)),
            l2=0.0,
            pool=(x[1000:], y[1000:]),
            test=(x[:1000], y[:1000]),
            clients=clients,
            partition=partition,
            root_size=root_size,
            root_bias=root_bias,
            generator=generator,
        )


CASES: dict[str, dict[str, Any]] = {
    "k1000": {
        "scenario": {
            "task": {"name": "synthetic_mnist"},
            "federation": {"clients": 1000, "rounds": 10, "local_lr": 0.1},
            "threat": {"byzantine": 0.2},
            "server": {"root_size": 50},
        },
        "attack": "sign_flip",
        "defense": "fltrust",
        "limit_gb": 8,
    },
}
for _rule in ("fedavg", "fltrust", "median"):
    CASES[f"p10m-{_rule}"] = {
        "scenario": {
            "task": {"name": "quadratic", "dim": 10_000_000, "diagonal": True, "heterogeneity": "scalar",
                     "dtype": "float32"},
            "federation": {"clients": 100, "rounds": 3, "local_lr": 0.5},
            "threat": {"byzantine": 0.2, "knowledge": "own"},
            "server": {"root_size": 1 if _rule == "fltrust" else 0},
        },
        "attack": "sign_flip",
        "defense": _rule,
        "limit_gb": 16,
    }


def run_case(name: str) -> dict[str, Any]:
    """Run one case in this process; returns its figures (peak RSS is this process's)."""
    case = CASES[name]
    robustfl.tasks.register("synthetic_mnist", SyntheticMNIST, "benchmark")
    sc = robustfl.load_scenario(case["scenario"])
    from robustfl.simulation.runner import Simulation

    t0 = time.perf_counter()
    sim = Simulation(sc, case["attack"], case["defense"], 0)
    ref = None if sim.problem.optimum is not None else torch.zeros(sim.problem.dim, dtype=sim.problem.dtype)
    cell = sim.run(ref).cell
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux
    return {
        "name": name,
        "clients": sc.section("federation")["clients"],
        "params": sim.problem.dim,
        "rounds": len(cell.rounds),
        "status": cell.status,
        "seconds": time.perf_counter() - t0,
        "peak_rss_gb": peak_gb,
        "limit_gb": case["limit_gb"],
        "final_relative_drift": cell.final.get("relative_drift"),
    }


def bench_large(names: list[str] | None = None) -> list[dict[str, Any]]:
    out = []
    for name in names or list(CASES):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.large", "--case", name],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            out.append({"name": name, "status": "failed", "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(run_case(sys.argv[2])))
    else:
        for r in bench_large(sys.argv[1:] or None):
            print(json.dumps(r))
