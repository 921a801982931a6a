"""The SQLite results store: round trips, resumability, refusals, concurrent writers."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from robustfl.errors import StoreError
from robustfl.simulation.results import Cell
from robustfl.simulation.store import SCHEMA_VERSION, Store

from .. import factories


def make_cell(attack: str = "sign_flip", defense: str = "krum", seed: int = 0, status: str = "ok",
              drift: float = 0.25, **kw: object) -> Cell:
    final = {"round": 3, "drift": 2 * drift, "relative_drift": drift, "loss_gap": None,
             "defense": {"selected": 4.0}, "algorithm": {}, "sharing": {}}
    rounds = [dict(final, round=r, relative_drift=drift * (4 - r)) for r in (1, 2, 3)]
    return Cell(attack=attack, defense=defense, seed=seed, status=status,
                error="boom" if status == "failed" else None, elapsed_s=1.5, final=final, rounds=rounds,
                **kw)  # type: ignore[arg-type]


def test_cell_round_trip_and_order(tmp_path: Path) -> None:
    cells = [
        make_cell("none", "fedavg", 0, sweep={"threat.byzantine": 0.1}),
        make_cell("alie", "median", 1, status="diverged", drift=float("inf")),
        make_cell("ipm", "fltrust", 2, status="failed", outside_guarantee=True),
    ]
    keys = ["k-b", "k-a", "k-c"]  # not sorted: cells() must follow insertion order, not key order
    with Store(tmp_path / "runs.db") as store:
        for k, c in zip(keys, cells, strict=True):
            store.put_cell(k, c, {"attack": {"name": c.attack}, "seed": c.seed})
        assert store.get_cell("missing") is None
        for k, c in zip(keys, cells, strict=True):
            assert store.get_cell(k) == dataclasses.replace(c, key=k)
            assert store.get_config(k) == {"attack": {"name": c.attack}, "seed": c.seed}
        assert [c.key for c in store.cells()] == keys
        assert store.finished_keys() == {"k-b", "k-a"}  # ok and diverged; failed is retried
        got = store.get_cell("k-a")
        assert got is not None and got.final["relative_drift"] == float("inf")

        # Retrying the failed cell replaces it in place.
        store.put_cell("k-c", make_cell("ipm", "fltrust", 2, drift=0.5), {})
        assert [c.key for c in store.cells()] == keys
        assert [c.status for c in store.cells()] == ["ok", "diverged", "ok"]
        assert store.finished_keys() == set(keys)

    # Persisted, and the file is what the design says it is.
    with Store(tmp_path / "runs.db") as store:
        assert [c.key for c in store.cells()] == keys
    con = sqlite3.connect(tmp_path / "runs.db")
    assert dict(con.execute("SELECT key, value FROM meta")) == {
        "schema_version": str(SCHEMA_VERSION), "application": "robustfl"}
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    sql = "SELECT attack, defense, seed, status, error, sweep, cell FROM cells WHERE key = 'k-b'"
    row = con.execute(sql).fetchone()
    assert row[:5] == ("none", "fedavg", 0, "ok", None)
    assert json.loads(row[5]) == {"threat.byzantine": 0.1}
    assert json.loads(row[6])["rounds"][0]["relative_drift"] == 0.75
    con.close()


def test_refs_bit_exact(tmp_path: Path) -> None:
    import torch

    rng = np.random.default_rng(0)
    v = rng.standard_normal(257) * 10.0 ** rng.integers(-300, 300, 257)
    v[:4] = [-0.0, 5e-324, np.finfo(np.float64).max, 1.0 / 3.0]
    with Store(tmp_path / "s.db") as store:
        assert store.get_ref("w*") is None
        store.put_ref("w*", v, {"rounds": 100})
        store.put_ref("t", torch.from_numpy(v.reshape(-1, 1)), {})
        f32 = torch.tensor([0.1, -2.5, 3e-8], dtype=torch.float32)
        store.put_ref("f32", f32, {})
    with Store(tmp_path / "s.db") as store:
        for k in ("w*", "t"):
            got = store.get_ref(k)
            assert got is not None and got.dtype == np.float64 and got.shape == (257,)
            assert got.tobytes() == v.tobytes()  # bit for bit, -0.0 and the subnormal included
            got[0] = 1.0  # a writable copy
        f = store.get_ref("f32")
        assert f is not None and f.tolist() == [float(x) for x in np.array([0.1, -2.5, 3e-8], np.float32)]
        assert store.get_ref_meta("w*") == {"rounds": 100}


def test_runs(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        assert store.latest_run() is None
        i = store.add_run({"task": {"name": "ridge"}}, {"robustfl": "0.1.0"})
        j = store.add_run({"task": {"name": "mnist"}}, {"robustfl": "0.1.1", "torch": np.str_("2.13")})
        assert j > i
        assert store.latest_run() == ({"task": {"name": "mnist"}}, {"robustfl": "0.1.1", "torch": "2.13"})


def test_newer_schema_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError) as e:
        Store(path)
    assert str(e.value) == (f"store {path} has schema version 99, newer than this robustfl's "
                            f"{SCHEMA_VERSION}; upgrade robustfl")


def test_foreign_and_garbage_files_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    other_meta = tmp_path / "other.db"
    con = sqlite3.connect(other_meta)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('application', 'someone-else'), ('schema_version', '1')")
    con.commit()
    con.close()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all\n" * 100)
    for path in (foreign, other_meta, garbage):
        with pytest.raises(StoreError) as e:
            Store(path)
        msg = str(e.value)
        assert str(path) in msg and "not a robustfl results store" in msg and "\n" not in msg
    # The foreign database is left as it was.
    con = sqlite3.connect(foreign)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["users"]
    con.close()


def test_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "empty.db"
    path.parent.mkdir(parents=True)
    path.touch()
    with Store(path) as store:
        store.put_cell("k", make_cell(), {})
    with Store(path) as store:
        assert len(store.cells()) == 1


def _writer(path: str, worker: int, n: int, barrier: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]  # both open the (new) file at the same moment
    with Store(path) as store:
        store.add_run({"worker": worker}, {})
        for i in range(n):
            c = make_cell(f"a{worker}", "d", i, drift=worker + i / 1000)
            store.put_cell(f"w{worker}-{i}", c, {"i": i})


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    # spawn, not fork: by now the test process may run threads (torch pools, earlier tests), and a
    # forked child of a threaded process can deadlock; a few seconds of imports buy reliability.
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(path, w, 50, barrier)) for w in (0, 1)]  # type: ignore[attr-defined]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Store(path) as store:
        cells = store.cells()
        assert len(cells) == 100
        assert store.finished_keys() == {f"w{w}-{i}" for w in (0, 1) for i in range(50)}
        for w in (0, 1):
            mine = [c for c in cells if c.attack == f"a{w}"]
            assert [c.seed for c in mine] == list(range(50))  # each writer's cells in its order
            assert [c.final["relative_drift"] for c in mine] == [w + i / 1000 for i in range(50)]
        assert store.latest_run() is not None
    con = sqlite3.connect(path)
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
    con.close()



class _LockedTwice:
    """A connection whose first two attempts to switch to WAL answer "database is locked", as
    SQLite does (without calling the busy handler) when two processes open a new store at once
    and both hold a read lock while asking for the exclusive one."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.refused = 0

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql.replace(" ", "").upper() == "PRAGMAJOURNAL_MODE=WAL" and self.refused < 2:
            self.refused += 1
            raise sqlite3.OperationalError("database is locked")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def test_opening_retries_a_refused_switch_to_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI once failed test_two_processes_write_concurrently this way: one of the two writers got
    # "cannot open store ...: database is locked" from the WAL switch.
    connect = sqlite3.connect
    proxies: list[_LockedTwice] = []

    def fake_connect(*args: object, **kwargs: object) -> _LockedTwice:
        proxies.append(_LockedTwice(connect(*args, **kwargs)))  # type: ignore[arg-type]
        return proxies[-1]

    monkeypatch.setattr("robustfl.simulation.store.sqlite3.connect", fake_connect)
    with Store(tmp_path / "new.db") as store:
        store.put_cell("k", make_cell(), {})
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert proxies[0].refused == 2


def test_bad_arguments_are_refused_and_a_read_only_store_is_never_written(tmp_path: Path) -> None:
    """A path that is no path, a None run or meta (every later read would call the store corrupt),
    a bad key or seed, and any write to a store opened read-only: one StoreError line each, and the
    file is byte-identical afterwards."""
    for path in ("", None, 5, b"x.db"):
        with pytest.raises(StoreError, match="a store is a file path"):
            Store(path)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="read_only must be True or False, got 'no'"):
        Store(tmp_path / "a.db", read_only="no")  # type: ignore[arg-type]
    path = tmp_path / "s.db"
    good = factories.cell("none", "fedavg", 0, 0.5)
    with Store(path) as st:
        st.add_run({"task": {}}, {"robustfl": "x"})
        st.put_cell("k", good, {})
        bad = [
            (lambda: st.add_run(None, {}), "scenario must be a dict, got None"),  # type: ignore[arg-type]
            (lambda: st.put_ref("r", [1.0], None), "meta must be a dict, got None"),  # type: ignore[arg-type]
            (lambda: st.put_cell("", good, {}), "key must be a non-empty string"),
            (lambda: st.put_cell("k2", good.to_json(), {}), "cannot write a dict"),  # type: ignore[arg-type]
            (lambda: st.put_cell("k3", dataclasses.replace(good, seed=-1), {}), "with seed -1"),
        ]
        for call, needle in bad:
            with pytest.raises(StoreError, match=re.escape(needle)):
                call()
    before = path.read_bytes()
    with Store(path, read_only=True) as ro:
        for call in (lambda: ro.add_run({}, {}), lambda: ro.put_cell("k9", good, {}),
                     lambda: ro.put_ref("r", [1.0], {})):
            with pytest.raises(StoreError, match="is open read-only"):
                call()
        assert [c.key for c in ro.cells()] == ["k"] and len(ro.runs()) == 1
    assert path.read_bytes() == before
