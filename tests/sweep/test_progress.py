"""What a matrix reports to its progress while it runs: a cell counts as running from the moment a
process takes it up, so the count never exceeds the processes (the workers, and the driver while
they start) even though each busy worker holds its next cell in its pipe."""

from __future__ import annotations

from robustfl.scenario import load_scenario
from robustfl.simulation.results import Cell
from robustfl.sweep.driver import run_matrix


class _Counts:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.most = 0

    def start(self, total: int) -> None:
        self.total = total

    def cell_started(self, label: str) -> None:
        self.started.append(label)
        self.most = max(self.most, len(self.started) - len(self.finished))

    def cell_finished(self, cell: Cell) -> None:
        self.finished.append(cell.key)


def test_running_never_counts_cells_waiting_in_a_workers_pipe(tmp_path: object) -> None:
    sc = load_scenario(
        {
            "task": {"name": "ridge", "dim": 5, "samples_per_client": 20},
            "federation": {"clients": 10, "rounds": 20},
            "matrix": {"attacks": ["none", "sign_flip", "alie"], "defenses": ["fedavg", "median", "krum"],
                       "seeds": [0, 1, 2]},
        }
    )
    counts = _Counts()
    result = run_matrix(sc, workers=2, store=f"{tmp_path}/m.db", progress=counts)
    assert len(result.cells) == 27 and all(c.status == "ok" for c in result.cells)
    assert len(counts.started) == len(counts.finished) == 27  # every cell started once, finished once
    assert 1 <= counts.most <= 3  # two workers, and the driver's own cells while they start
