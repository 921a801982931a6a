"""Every kind a user can add is one new file: a --plugin file adds an attack, a defense, a
pre-aggregator, an algorithm, a sharing scheme and a task, and a matrix runs them together.

The file below is all a user writes (no registry edit); each component derives from its kind's
base and declares what it does. The numbers are checked against hand-computed consequences:
the plugin FedAvg-with-a-twist must equal the built-in algorithm when its twist is off.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from robustfl import plugins
from robustfl.cli import main
from robustfl.plugins import plugin_tables

PLUGIN = '''
"""One file, six kinds."""
from dataclasses import dataclass

import torch

from robustfl.capabilities import AttackBase, DefenseBase, PreAggregatorBase
from robustfl.defenses.pre import identity
from robustfl.federation import Algorithm, Sharing
from robustfl.tasks.quadratic import Quadratic
from robustfl.types import Aggregate, Knowledge


@dataclass
class Negate(AttackBase):
    """Byzantine rows: -factor x own."""
    factor: float = 1.0
    knowledge = Knowledge.OWN

    def __call__(self, ctx):
        return -self.factor * ctx.own


@dataclass
class CoordMedian(DefenseBase):
    """Coordinate-wise median (lower middle for even K)."""
    name = "coord_median_p"

    def min_clients(self, f_hat):
        return 2 * f_hat + 1

    def __call__(self, updates, ctx):
        return Aggregate(updates.median(dim=0).values)


@dataclass
class Halve(PreAggregatorBase):
    """Every row halved (a linear, row-wise map)."""
    name = "halve_p"
    preserves = frozenset({"permutation_invariant"})

    def __call__(self, updates, ctx):
        return updates / 2, ctx, identity


@dataclass
class Momentum(Algorithm):
    """FedAvg with server momentum beta (beta = 0: FedAvg)."""
    beta: float = 0.0
    name = "momentum_p"

    def setup(self, *, num_clients, dim, dtype, device):
        self.v = torch.zeros(dim, dtype=dtype, device=device)

    def server_step(self, w, delta, *, rows, ids, valid, server_lr):
        self.v = self.beta * self.v + delta
        return w + server_lr * self.v


class FullCopy(Sharing):
    """Full sharing under another name."""
    name = "full_p"


@dataclass
class Quad5(Quadratic):
    """The built-in quadratic with dim 5."""
    dim: int = 5


ATTACKS = {"negate_p": Negate}
DEFENSES = {"coord_median_p": CoordMedian}
PRE_AGGREGATORS = {"halve_p": Halve}
ALGORITHMS = {"momentum_p": Momentum}
SHARING = {"full_p": FullCopy}
TASKS = {"quad5_p": Quad5}
'''


def _scenario(tmp_path: Path, algorithm: str, sharing: str, extra: str = "") -> Path:
    text = f"""
    [task]
    name = "quad5_p"
    [federation]
    clients = 10
    rounds = 8
    local_lr = 0.5
    [algorithm]
    name = "{algorithm}"
    {extra}
    [sharing]
    name = "{sharing}"
    [threat]
    byzantine = 0.2
    [matrix]
    attacks = ["none", "negate_p"]
    defenses = ["fedavg", {{ name = "coord_median_p", pre = ["halve_p"] }}]
    seeds = [0]
    """
    path = tmp_path / f"{algorithm}-{sharing}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def _finals(store: Path) -> dict[tuple[str, str], float]:
    con = sqlite3.connect(str(store))
    out = {}
    for attack, defense, cell in con.execute("SELECT attack, defense, cell FROM cells"):
        out[(attack, defense)] = json.loads(cell)["final"]["relative_drift"]
    con.close()
    return out


@pytest.fixture
def plugin_file(tmp_path: Path) -> Iterator[Path]:
    """The plugin file; every registry is restored afterwards (later tests see only built-ins)."""
    path = tmp_path / "six_kinds.py"
    path.write_text(PLUGIN)
    saved = [(reg, dict(reg._entries)) for _, reg in plugin_tables()]
    loaded = dict(plugins._LOADED)
    try:
        yield path
    finally:
        for reg, entries in saved:
            reg._entries = entries
        plugins._LOADED.clear()
        plugins._LOADED.update(loaded)


def test_plugin_tables_cover_every_kind() -> None:
    assert [t for t, _ in plugin_tables()] == [
        "ATTACKS", "DEFENSES", "PRE_AGGREGATORS", "TASKS", "ALGORITHMS", "SHARING"
    ]


def test_one_file_adds_six_kinds_and_a_matrix_runs_them(tmp_path: Path, plugin_file: Path) -> None:
    runs = {}
    for algorithm, sharing, extra in (
        ("momentum_p", "full_p", "beta = 0.0"),
        ("fedavg", "full", ""),
        ("momentum_p", "full_p", "beta = 0.5"),
    ):
        store = tmp_path / f"{algorithm}-{sharing}-{extra[-3:]}.db"
        argv = ["matrix", str(_scenario(tmp_path, algorithm, sharing, extra)), "--plugin", str(plugin_file),
                "--store", str(store), "--workers", "1", "--quiet"]
        assert main(argv) == 0
        runs[(algorithm, extra)] = _finals(store)
    plugin_run = runs[("momentum_p", "beta = 0.0")]
    builtin, momentum = runs[("fedavg", "")], runs[("momentum_p", "beta = 0.5")]
    defenses = ("fedavg", "halve_p+coord_median_p")
    assert set(plugin_run) == {(a, d) for a in ("none", "negate_p") for d in defenses}
    # momentum 0 and a renamed full sharing are FedAvg: the same numbers, bit for bit
    assert plugin_run == builtin
    # the plugin attack and the plugin defense do something: negation hurts FedAvg, and momentum moves
    assert builtin[("negate_p", "fedavg")] > builtin[("none", "fedavg")]
    assert momentum != builtin
