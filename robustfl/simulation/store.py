"""The results store: one SQLite file holding finished cells, cached reference models and runs.

A matrix writes each finished cell in its own transaction, keyed by the hash of the cell's
full configuration, so an interrupted sweep resumes where it stopped and loses nothing; the
table, CSV, JSON and plots are all views of this file.

Format (``SCHEMA_VERSION`` 1)::

    meta(key TEXT PRIMARY KEY, value TEXT)       schema_version = 1, application = "robustfl"
    cells(key TEXT PRIMARY KEY, attack TEXT, defense TEXT, seed INTEGER, status TEXT,
          error TEXT, sweep TEXT, cell TEXT, config TEXT, created REAL)
    refs(key TEXT PRIMARY KEY, data BLOB, dim INTEGER, meta TEXT)
    runs(id INTEGER PRIMARY KEY, started REAL, scenario TEXT, provenance TEXT)

``sweep``, ``cell`` (``Cell.to_json()``), ``config``, ``meta``, ``scenario`` and
``provenance`` are JSON text; a reference model's ``data`` is its raw little-endian float64
bytes. Nothing is pickled, so a store written by one version can be read (or refused with a
clear message) by another, and opening a store never runs code from it.

The file is opened in WAL mode with a 30 s busy timeout and ``synchronous=NORMAL``: several
processes (workers, or two ``robustfl matrix`` commands on one store) may write at once; each
write waits for the others instead of failing. Every problem with the file itself -- not an
SQLite database, an SQLite database that is not ours, a newer schema -- is a
:class:`~robustfl.errors.StoreError` with a one-line message naming the path.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from robustfl.errors import StoreError
from robustfl.simulation.results import Cell

SCHEMA_VERSION = 1
APPLICATION = "robustfl"
FINISHED = ("ok", "diverged")
BUSY_TIMEOUT_S = 30.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS cells (key TEXT PRIMARY KEY, attack TEXT, defense TEXT, seed INTEGER,"
    " status TEXT, error TEXT, sweep TEXT, cell TEXT, config TEXT, created REAL)",
    "CREATE TABLE IF NOT EXISTS refs (key TEXT PRIMARY KEY, data BLOB, dim INTEGER, meta TEXT)",
    "CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, started REAL, scenario TEXT,"
    " provenance TEXT)",
)


def _json_default(x: Any) -> Any:
    """numpy scalars and arrays, 0-d tensors and paths, which scenarios and provenance may hold."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "tolist"):  # a torch tensor
        return x.tolist()
    raise TypeError(f"cannot store a value of type {type(x).__name__} as JSON: {x!r}")


def _dumps(x: Any) -> str:
    # Non-finite floats are written as NaN/Infinity, which json.loads reads back: a cell is
    # stored as it was produced (the views clean it), never lost for a stray inf.
    return json.dumps(x, default=_json_default, separators=(",", ":"))


def _as_float64(vector: Any) -> np.ndarray:
    if hasattr(vector, "detach"):  # torch.Tensor, without importing torch here
        vector = vector.detach().cpu().double().numpy()
    return np.asarray(vector, dtype=np.float64).reshape(-1)


class Store:
    """A results store at ``path`` (created, with its parent folders, when missing).

    ``read_only``: the views' way in (``robustfl report`` / ``compare``): the file must already be
    a robustfl store, and nothing is written to it (an empty or foreign file is refused as it is).
    SQLite opens it ``mode=rw`` all the same (never ``create``), so that closing it removes the
    WAL files a read leaves, as a store opened for writing does."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        if isinstance(path, bytes) or not isinstance(path, str | os.PathLike) or not str(path):
            raise StoreError(f"a store is a file path (or ':memory:'), got {path!r}")
        if not isinstance(read_only, bool):
            raise StoreError(f"Store: read_only must be True or False, got {read_only!r}")
        self.path = Path(path)
        self.read_only = read_only
        memory = str(path) == ":memory:"
        if read_only and not self.path.is_file():
            raise StoreError(f"store {str(path)!r} does not exist")
        if not memory and not read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the folder for store {self.path}: {e.strerror}") from None
        try:
            if read_only:
                uri = f"{self.path.resolve().as_uri()}?mode=rw"
                self._conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            else:
                self._conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open store {self.path}: {e}") from None
        try:
            self._open()
        except StoreError:
            self._conn.close()
            raise
        except sqlite3.DatabaseError as e:
            self._conn.close()
            if "not a database" in str(e) or "malformed" in str(e):
                msg = f"{self.path} is not a robustfl results store (not an SQLite file)"
                raise StoreError(msg) from None
            raise StoreError(f"cannot open store {self.path}: {e}") from None

    # -- opening ------------------------------------------------------------------------------

    def _open(self) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "meta" not in tables:
            raise StoreError(f"{self.path} is not a robustfl results store (another program's SQLite file)")
        if not tables and self.read_only:
            raise StoreError(f"{self.path} is not a robustfl results store (an empty file)")
        if not tables:
            # A new (or empty) file: create the schema. Two processes may race here; the
            # IMMEDIATE transaction serialises them and IF NOT EXISTS / OR IGNORE make it idempotent.
            with self._transaction():
                for stmt in _SCHEMA:
                    c.execute(stmt)
                c.executemany(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("application", APPLICATION)],
                )
        self._check_meta()
        if self.read_only:
            return
        if str(self.path) != ":memory:":
            self._use_wal()
        c.execute("PRAGMA synchronous = NORMAL")

    def _use_wal(self) -> None:
        """Switch the file to WAL mode, waiting out other openers.

        Changing the journal mode needs an exclusive lock, and SQLite answers "database is
        locked" at once rather than calling the busy handler while another connection reads
        the file (two processes opening a new store together); so retry until the busy timeout.
        """
        c = self._conn
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        delay = 0.005
        while True:
            try:
                if c.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    c.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def _check_meta(self) -> None:
        meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("application") != APPLICATION:
            raise StoreError(f"{self.path} is not a robustfl results store (its meta table is foreign)")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise StoreError(
                f"store {self.path} has an unreadable schema version {meta.get('schema_version')!r}"
            ) from None
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"store {self.path} has schema version {version}, newer than this robustfl's "
                f"{SCHEMA_VERSION}; upgrade robustfl"
            )
        if version < 1:
            raise StoreError(f"store {self.path} has an invalid schema version {version}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE (take the write lock up front, waiting up to the busy timeout)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.ProgrammingError:
            raise  # a closed store: a bug in the caller, not in the file
        except sqlite3.Error as e:
            raise StoreError(f"store {self.path}: cannot {what}: {e}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # undecodable or mis-shaped JSON
            raise StoreError(f"store {self.path} is corrupt: cannot {what}: {e}") from None

    # -- cells --------------------------------------------------------------------------------

    def _writable(self, what: str, **tables: Any) -> None:
        """Refuse a write to a store opened read-only, or one whose JSON columns would not be
        tables (a ``None`` run would make every later read fail as corrupt)."""
        if self.read_only:
            raise StoreError(f"store {self.path} is open read-only: cannot {what}")
        for name, value in tables.items():
            if not isinstance(value, Mapping):
                raise StoreError(f"store {self.path}: cannot {what}: {name} must be a dict, got {value!r}")

    def put_cell(self, key: str, cell: Cell, config: dict[str, Any]) -> None:
        """Write (or replace) one finished cell in one transaction; a replaced cell keeps its place."""
        self._writable("write a cell", config=config)
        if not isinstance(key, str) or not key:
            raise StoreError(f"store {self.path}: a cell's key must be a non-empty string, got {key!r}")
        if not isinstance(cell, Cell) or not 0 <= int(cell.seed) < 2**63:
            seed = getattr(cell, "seed", None)
            raise StoreError(f"store {self.path}: cannot write a {type(cell).__name__} with seed {seed!r} "
                             "as a cell (a Cell, its seed in [0, 2**63))")
        doc = cell.to_json()
        doc["key"] = key
        row = (
            key, cell.attack, cell.defense, int(cell.seed), cell.status, cell.error,
            _dumps(cell.sweep), _dumps(doc), _dumps(config), time.time(),
        )
        with self._errors("write a cell"), self._transaction() as c:
            # An upsert rather than INSERT OR REPLACE: the row keeps its rowid, so a retried
            # failed cell stays where it was in cells()' order.
            c.execute(
                "INSERT INTO cells (key, attack, defense, seed, status, error, sweep, cell, config, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET"
                " attack = excluded.attack, defense = excluded.defense, seed = excluded.seed,"
                " status = excluded.status, error = excluded.error, sweep = excluded.sweep,"
                " cell = excluded.cell, config = excluded.config, created = excluded.created",
                row,
            )

    def get_cell(self, key: str) -> Cell | None:
        """The cell stored under ``key`` (its ``key`` field set), or None."""
        with self._errors("read a cell"):
            r = self._conn.execute("SELECT cell FROM cells WHERE key = ?", (key,)).fetchone()
            return None if r is None else Cell.from_json(json.loads(r[0]))

    def cells(self) -> list[Cell]:
        """Every stored cell, in the order first written."""
        with self._errors("read the cells"):
            rows = self._conn.execute("SELECT cell FROM cells ORDER BY rowid").fetchall()
            return [Cell.from_json(json.loads(r[0])) for r in rows]

    def cells_with_configs(self) -> list[tuple[Cell, dict[str, Any]]]:
        """Every stored cell with the configuration it was keyed by, in the order first written."""
        with self._errors("read the cells"):
            rows = self._conn.execute("SELECT cell, config FROM cells ORDER BY rowid").fetchall()
            return [(Cell.from_json(json.loads(c)), dict(json.loads(k) or {})) for c, k in rows]

    def get_config(self, key: str) -> dict[str, Any] | None:
        """The configuration stored with the cell ``key``, or None."""
        with self._errors("read a configuration"):
            r = self._conn.execute("SELECT config FROM cells WHERE key = ?", (key,)).fetchone()
            return None if r is None else dict(json.loads(r[0]))

    def finished_keys(self) -> set[str]:
        """Keys of cells that ran to the end (``ok`` or ``diverged``); ``failed`` ones are retried."""
        with self._errors("read the cells"):
            rows = self._conn.execute("SELECT key FROM cells WHERE status IN (?, ?)", FINISHED).fetchall()
            return {r[0] for r in rows}

    # -- reference models ---------------------------------------------------------------------

    def put_ref(self, key: str, vector: Any, meta: dict[str, Any]) -> None:
        """Cache a reference model (a torch tensor or numpy array, flattened, kept as float64)."""
        self._writable("write a reference model", meta=meta)
        v = _as_float64(vector)
        with self._errors("write a reference model"), self._transaction() as c:
            c.execute(
                "INSERT OR REPLACE INTO refs (key, data, dim, meta) VALUES (?, ?, ?, ?)",
                (key, v.astype("<f8").tobytes(), int(v.size), _dumps(meta)),
            )

    def get_ref(self, key: str) -> np.ndarray | None:
        """The cached reference model ``key`` as a float64 (dim,) array, bit for bit, or None."""
        with self._errors("read a reference model"):
            r = self._conn.execute("SELECT data, dim FROM refs WHERE key = ?", (key,)).fetchone()
        if r is None:
            return None
        data, dim = bytes(r[0]), int(r[1])
        if len(data) != 8 * dim:
            raise StoreError(
                f"store {self.path} is corrupt: reference {key!r} has {len(data)} bytes, not 8 x {dim}"
            )
        return np.frombuffer(data, dtype="<f8").astype(np.float64)  # a writable native copy

    def get_ref_meta(self, key: str) -> dict[str, Any] | None:
        """The metadata stored with reference ``key``, or None."""
        with self._errors("read a reference model"):
            r = self._conn.execute("SELECT meta FROM refs WHERE key = ?", (key,)).fetchone()
            return None if r is None else dict(json.loads(r[0]))

    # -- runs ---------------------------------------------------------------------------------

    def add_run(self, scenario: dict[str, Any], provenance: dict[str, Any]) -> int:
        """Record one matrix invocation (its scenario and provenance); returns the run's id."""
        self._writable("write a run", scenario=scenario, provenance=provenance)
        with self._errors("write a run"), self._transaction() as c:
            cur = c.execute(
                "INSERT INTO runs (started, scenario, provenance) VALUES (?, ?, ?)",
                (time.time(), _dumps(scenario), _dumps(provenance)),
            )
            return int(cur.lastrowid or 0)

    def runs(self) -> list[dict[str, Any]]:
        """Every recorded run, oldest first: ``{"id", "started", "scenario", "provenance"}``."""
        with self._errors("read the runs"):
            sql = "SELECT id, started, scenario, provenance FROM runs ORDER BY id"
            rows = self._conn.execute(sql).fetchall()
            return [
                {
                    "id": int(i),
                    "started": float(t),
                    "scenario": dict(json.loads(s)),
                    "provenance": dict(json.loads(p)),
                }
                for i, t, s, p in rows
            ]

    def latest_run(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(scenario, provenance)`` of the last recorded run, or None."""
        with self._errors("read the runs"):
            sql = "SELECT scenario, provenance FROM runs ORDER BY id DESC LIMIT 1"
            r = self._conn.execute(sql).fetchone()
            return None if r is None else (dict(json.loads(r[0])), dict(json.loads(r[1])))

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"
