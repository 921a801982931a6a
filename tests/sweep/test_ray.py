"""The Ray executor and resuming after a kill.

* ``--executor ray`` gives the local executor's cells bit for bit (everything but ``elapsed_s``),
  on a Ray instance it starts and stops itself and on one already running (a task without an exact
  optimum, so the clean-run reference travels through Ray's object store too).
* A task whose worker dies, or that runs past ``cell_timeout``, is a ``failed`` cell.
* SIGKILL of a running ``robustfl matrix`` (its whole process group) leaves a partial store; the
  same command then runs only the missing cells: the stored ones keep their JSON (``elapsed_s``
  included) and their write time, none is duplicated or lost. Once with the local executor, once
  with ``--executor ray --address`` against a running Ray instance (the killed driver's tasks
  die with it; the rerun goes to the same instance).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from robustfl.cli import main
from robustfl.scenario import load_scenario
from robustfl.simulation.store import Store
from robustfl.sweep.plan import plan

from ..conftest import ROOT

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="needs the ray extra: pip install 'robustfl[ray]'")

QUICK = str(ROOT / "scenarios" / "quick.toml")
RIDGE = [
    "--set", "task.name=ridge", "--set", "task.dim=5", "--set", "task.samples_per_client=20",
    "--set", "federation.clients=10", "--set", "federation.rounds=20", "--set", "server.root_size=30",
    "--set", "federation.local_lr=0.1",
]  # fmt: skip
# a neural task: no exact optimum, so each seed's clean-run reference is computed first
DIGITS = [
    "--set", "task.name=digits", "--set", "task.model=logreg", "--set", "federation.clients=10",
    "--set", "federation.rounds=5", "--set", "server.root_size=30", "--set", "federation.local_lr=0.5",
]  # fmt: skip
# 12 cells of under a second each (ridge, 40-dimensional, 120 rounds): long enough to kill midway
SLOW = [
    "--set", "task.name=ridge", "--set", "task.dim=40", "--set", "task.samples_per_client=50",
    "--set", "federation.clients=40", "--set", "federation.rounds=120", "--set", "server.root_size=50",
    "--set", "federation.local_lr=0.05",
    "--attacks", "sign_flip,alie,ipm", "--defenses", "fedavg,median", "--seeds", "0,1",
]  # fmt: skip
SLOW_CELLS = 12


def _cells(store: Path) -> dict[str, dict[str, Any]]:
    """Every stored cell's JSON by key, without its run time (the one thing allowed to differ)."""
    with Store(store) as st:
        out = {c.key: c.to_json() for c in st.cells()}
    for doc in out.values():
        doc.pop("elapsed_s")
    return out


def _same_cells(a: Path, b: Path, n: int) -> None:
    ca, cb = _cells(a), _cells(b)
    assert len(ca) == n and ca.keys() == cb.keys()
    for key in ca:
        assert ca[key] == cb[key], key
    assert all(doc["status"] == "ok" for doc in ca.values())


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray instance started by this process (2 CPUs); its GCS address."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


@needs_ray
@pytest.mark.slow
def test_ray_matches_local_bit_for_bit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    was_running = ray.is_initialized()
    matrix = ["matrix", QUICK, *RIDGE, "--attacks", "sign_flip,alie", "--defenses", "fedavg,median",
              "--seeds", "0,1", "--workers", "2"]  # fmt: skip
    assert main([*matrix, "--executor", "ray", "--store", str(tmp_path / "ray.db")]) == 0
    captured = capsys.readouterr()
    # the progress ran on Ray's results (piped here: plain lines on stderr): all 8 cells done, none
    # left running, none failed
    last = [line for line in captured.err.splitlines() if line.startswith("[")][-1]
    assert last.startswith("[8/8 cells") and "running" not in last and "failed" not in last
    assert "failed" not in captured.out
    assert ray.is_initialized() == was_running  # an instance it started, it stopped
    assert main([*matrix, "--store", str(tmp_path / "local.db"), "--quiet"]) == 0
    _same_cells(tmp_path / "ray.db", tmp_path / "local.db", 8)


@needs_ray
@pytest.mark.slow
def test_ray_reference_runs_match_local(ray_address: str, tmp_path: Path) -> None:
    matrix = ["matrix", QUICK, *DIGITS, "--attacks", "sign_flip,alie", "--defenses", "median",
              "--seeds", "0,1", "--workers", "2", "--quiet"]  # fmt: skip
    assert main([*matrix, "--executor", "ray", "--store", str(tmp_path / "ray.db")]) == 0
    assert main([*matrix, "--store", str(tmp_path / "local.db")]) == 0
    _same_cells(tmp_path / "ray.db", tmp_path / "local.db", 4)
    cells = _cells(tmp_path / "ray.db")
    assert {doc["reference"] for doc in cells.values()} == {"clean_run"}


def test_missing_ray_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    rc = main(["matrix", QUICK, *RIDGE, "--attacks", "none", "--defenses", "fedavg", "--seeds", "0",
               "--executor", "ray", "--store", ":memory:", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "--executor ray needs the ray extra: pip install 'robustfl[ray]'" in err


# -- kill and resume ------------------------------------------------------------------------------


def _rows(store: Path) -> list[tuple[str, str, float]]:
    """(key, cell JSON, write time) of every stored cell, read-only; [] while there is no table."""
    if not store.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)) as conn:
            return list(conn.execute("SELECT key, cell, created FROM cells ORDER BY rowid"))
    except sqlite3.OperationalError:  # created, schema not written yet
        return []


def _kill_midway(cmd: list[str], store: Path, env: dict[str, str], limit_s: float = 240.0) -> None:
    log = store.with_suffix(".stderr")
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_rows(store)) >= 1:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before it could be killed: {log.read_text()}"
        assert 1 <= len(_rows(store)) < SLOW_CELLS
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and every worker it started
        proc.wait(30)


def _resume_after_kill(tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.db"
    argv = ["matrix", QUICK, *SLOW, "--workers", "2", "--store", str(store), "--quiet", *extra]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    _kill_midway([sys.executable, "-m", "robustfl", *argv], store, env)
    before = _rows(store)
    assert 1 <= len(before) < SLOW_CELLS  # partial: the kill came mid-sweep
    with Store(store) as st:  # the killed store opens cleanly
        assert len(st.cells()) == len(before)

    # the same command again (in this process, which is quicker: no new interpreter, warm Ray workers)
    capsys.readouterr()
    assert main([*argv, "--json", str(tmp_path / "m.json")]) == 0
    table = capsys.readouterr().out
    after = _rows(store)
    keys = [k for k, _, _ in after]
    args = [a for a in SLOW[: SLOW.index("--attacks")] if a != "--set"]
    expected = {j.key for j in plan(load_scenario(QUICK, args), ["sign_flip", "alie", "ipm"],
                                    ["fedavg", "median"], [0, 1])}  # fmt: skip
    assert len(after) == SLOW_CELLS and len(set(keys)) == SLOW_CELLS and set(keys) == expected
    # the cells finished before the kill were skipped: same JSON (elapsed_s too), same write time
    now = {k: (cell, created) for k, cell, created in after}
    for key, cell, created in before:
        assert now[key] == (cell, created), key
    doc = json.loads((tmp_path / "m.json").read_text())
    assert len(doc["cells"]) == SLOW_CELLS and all(c["status"] == "ok" for c in doc["cells"])
    for name in ("sign_flip", "alie", "ipm", "fedavg", "median", "over 2 seeds"):
        assert name in table, table
    assert "—" not in table  # every attack x defense cell has its value


@pytest.mark.slow
def test_local_sweep_resumes_after_sigkill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _resume_after_kill(tmp_path, [], capsys)


@needs_ray
@pytest.mark.slow
def test_ray_sweep_resumes_after_sigkill(
    ray_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # killed: a driver connected to a running Ray instance; resumed: on that instance again
    _resume_after_kill(tmp_path, ["--executor", "ray", "--address", ray_address], capsys)


def _jobs(n: int = 1) -> list[Any]:
    sc = load_scenario(QUICK, [a for a in RIDGE if a != "--set"])
    return plan(sc, ["sign_flip"], ["median"], list(range(n)))


@needs_ray
@pytest.mark.slow
def test_ray_dead_worker_and_timeout_are_failed_cells(ray_address: str, tmp_path: Path) -> None:
    """Last in the file: it kills the instance's workers, so the tests after it would start cold."""
    from robustfl.sweep.ray_executor import ray_execute

    # A "plugin" the worker loads before the cell: one kills its worker process, one hangs.
    exits, hangs = tmp_path / "exits.py", tmp_path / "hangs.py"
    exits.write_text("import os\nos._exit(3)\n")
    hangs.write_text("import time\ntime.sleep(120)\n")
    job = _jobs()[0]
    [cell] = ray_execute([job], lambda j: None, [str(exits)], False, "cpu", None, None)
    assert cell.status == "failed" and cell.key == job.key and cell.attack == "sign_flip"
    assert "died" in (cell.error or "").lower() or "crash" in (cell.error or "").lower(), cell.error

    t0 = time.monotonic()
    [cell] = ray_execute([job], lambda j: None, [str(hangs)], False, "cpu", None, None, cell_timeout=1.0)
    assert cell.status == "failed" and cell.error == "timeout after 1 s" and cell.elapsed_s >= 1.0
    assert time.monotonic() - t0 < 60  # cancelled, not waited for
