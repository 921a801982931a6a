"""Attack x defense x seed (x sweep point) matrices, resumable through the SQLite store.

Every cell is validated before anything runs (unknown names, missing knowledge, a rule below
its ``min_clients``: exit 2). Finished cells (``ok`` or ``diverged``) already in the store are
skipped; ``failed`` ones are retried. Tasks without an exact optimum first get their clean-run
reference (attack none, defense fedavg) per seed and sweep point, cached in the store too.
Each finished cell is written in one transaction as soon as it arrives, so an interrupted sweep
loses nothing.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import platform
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from ..errors import RobustFLError
from ..scenario import Scenario
from . import components as C
from .results import Cell, MatrixResult
from .runner import Simulation, build_problem, cell_config, cell_key, clean_reference, reference_key, simulate


class Progress(Protocol):
    def start(self, total: int) -> None: ...
    def cell_started(self, label: str) -> None: ...
    def cell_finished(self, cell: Cell) -> None: ...


@dataclass
class Job:
    key: str
    scenario: Scenario
    attack: C.Spec
    defense: C.Spec
    seed: int
    sweep: dict[str, Any] = field(default_factory=dict)
    outside: bool = False

    @property
    def label(self) -> str:
        point = ",".join(f"{k}={v}" for k, v in self.sweep.items())
        return f"{C.attack_label(self.attack)} × {C.defense_label(self.defense)} seed {self.seed}" + (
            f" [{point}]" if point else ""
        )


def sweep_points(scenario: Scenario) -> list[dict[str, Any]]:
    sweep = scenario.section("matrix")["sweep"]
    if not sweep:
        return [{}]
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(sweep[k] for k in keys))]


def plan(
    scenario: Scenario,
    attacks: Sequence[C.Spec] | None = None,
    defenses: Sequence[C.Spec] | None = None,
    seeds: Sequence[int] | None = None,
    *,
    allow_outside_guarantee: bool = False,
) -> list[Job]:
    """Every cell of the matrix, validated (raises RobustFLError before anything runs)."""
    mx = scenario.section("matrix")
    attacks = list(attacks if attacks is not None else mx["attacks"])
    defenses = list(defenses if defenses is not None else mx["defenses"])
    seeds = list(seeds if seeds is not None else mx["seeds"])
    for a in attacks:  # every name and parameter first: cheap, and before any data is built
        C.build_attack(a)
    for d in defenses:
        C.build_defense(d)
    jobs: list[Job] = []
    for point in sweep_points(scenario):
        sc = scenario.with_values(point) if point else scenario
        checked: dict[tuple[str, str], bool] = {}
        for a in attacks:
            for d in defenses:
                sig = (repr(a), repr(d))
                if sig not in checked:
                    sim = Simulation(sc, a, d, seeds[0], allow_outside_guarantee=allow_outside_guarantee)
                    checked[sig] = sim.outside
                for s in seeds:
                    jobs.append(Job(cell_key(sc, a, d, s), sc, a, d, s, dict(point), checked[sig]))
    labels = [(j.label) for j in jobs]
    if len(set(labels)) != len(labels):
        dup = next(lbl for lbl in labels if labels.count(lbl) > 1)
        raise RobustFLError(f'two cells share the label {dup!r}; give one a distinct label = "..."')
    return jobs


def provenance(scenario: Scenario, jobs: Sequence[Job]) -> dict[str, Any]:
    from .. import __version__, attacks, defenses

    origins: dict[str, str] = {}
    for j in jobs:
        for reg, spec in ((attacks, j.attack), (defenses, j.defense)):
            name = C.spec_name(spec)
            origins.setdefault(name, reg.origin(name))
    return {
        "robustfl": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "scenario_hash": scenario.hash(),
        "scenario_path": str(scenario.path) if scenario.path else None,
        "overrides": list(scenario.overrides),
        "origins": origins,
        "created": time.time(),
    }


# --- worker side ----------------------------------------------------------------------------
_LOADED_PLUGINS: set[str] = set()


def _load_plugins(plugins: Sequence[str]) -> None:
    from ..registry import load_plugin

    for p in plugins:
        if p not in _LOADED_PLUGINS:
            load_plugin(p)
            _LOADED_PLUGINS.add(p)


def _failed(job: Job, exc: BaseException) -> Cell:
    msg = f"{type(exc).__name__}: {exc}".strip()
    if not isinstance(exc, RobustFLError):
        tb = traceback.extract_tb(exc.__traceback__)
        if tb:
            msg += f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})"
    return Cell(
        C.attack_label(job.attack), C.defense_label(job.defense), job.seed, status="failed", error=msg
    )


def run_job(
    job: Job,
    reference: np.ndarray | None,
    plugins: Sequence[str] = (),
    allow_outside: bool = False,
    device: str = "cpu",
) -> Cell:
    try:
        _load_plugins(plugins)
        ref = torch.from_numpy(reference) if reference is not None else None
        out = simulate(
            job.scenario,
            job.attack,
            job.defense,
            job.seed,
            reference_model=ref,
            allow_outside_guarantee=allow_outside or job.outside,
            device=device,
        )
        cell = out.cell
    except Exception as exc:  # a failing cell is recorded, the matrix goes on
        cell = _failed(job, exc)
    cell.sweep, cell.key, cell.outside_guarantee = dict(job.sweep), job.key, job.outside
    return cell


def run_reference(
    scenario: Scenario, seed: int, plugins: Sequence[str] = (), device: str = "cpu"
) -> np.ndarray:
    _load_plugins(plugins)
    return clean_reference(scenario, seed, device=device).detach().double().cpu().numpy()


def _mp_context() -> mp.context.BaseContext:
    """Workers fork from a server that has imported robustfl (and torch) once: no per-worker
    re-import, and no fork of a process whose torch thread pools are already running."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["robustfl.simulation.matrix"])
        return ctx
    return mp.get_context("spawn")


# --- driver ---------------------------------------------------------------------------------
def run_matrix(
    scenario: Scenario,
    *,
    attacks: Sequence[C.Spec] | None = None,
    defenses: Sequence[C.Spec] | None = None,
    seeds: Sequence[int] | None = None,
    workers: int | None = None,
    store: str | Path | None = None,
    executor: str = "local",
    address: str | None = None,
    plugins: Sequence[str] = (),
    allow_outside_guarantee: bool = False,
    device: str = "cpu",
    progress: Progress | None = None,
) -> MatrixResult:
    """Run (or resume) a matrix; returns every cell, old and new, in plan order."""
    from .store import Store

    jobs = plan(scenario, attacks, defenses, seeds, allow_outside_guarantee=allow_outside_guarantee)
    prov = provenance(scenario, jobs)
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    db = Store(store) if store is not None else None
    try:
        if db is not None:
            db.add_run(scenario.to_dict(), prov)
        done: dict[str, Cell] = {}
        if db is not None:
            finished = db.finished_keys()
            for j in jobs:
                if j.key in finished:
                    c = db.get_cell(j.key)
                    if c is not None:
                        done[j.key] = c
        todo = [j for j in jobs if j.key not in done]
        if progress is not None:
            progress.start(len(jobs))
            for c in done.values():
                progress.cell_finished(c)
        refs = _references(todo, db, workers, plugins, device, executor, address)

        def record(cell: Cell) -> None:
            done[cell.key] = cell
            if db is not None:
                job = by_key[cell.key]
                db.put_cell(cell.key, cell, cell_config(job.scenario, job.attack, job.defense, job.seed))
            if progress is not None:
                progress.cell_finished(cell)

        by_key = {j.key: j for j in todo}
        for cell in _execute(
            todo, refs, workers, plugins, allow_outside_guarantee, device, executor, address, progress
        ):
            record(cell)
    finally:
        if db is not None:
            db.close()
    return MatrixResult(scenario.to_dict(), prov, [done[j.key] for j in jobs if j.key in done])


def _needs_reference(job: Job) -> bool:
    return build_problem(job.scenario, job.seed).optimum is None


def _references(
    todo: Sequence[Job],
    db: Any,
    workers: int,
    plugins: Sequence[str],
    device: str,
    executor: str,
    address: str | None,
) -> dict[str, np.ndarray]:
    need: dict[str, tuple[Scenario, int]] = {}
    for j in todo:
        if _needs_reference(j):
            need.setdefault(reference_key(j.scenario, j.seed), (j.scenario, j.seed))
    refs: dict[str, np.ndarray] = {}
    missing = []
    for key, (sc, seed) in need.items():
        got = db.get_ref(key) if db is not None else None
        if got is not None:
            refs[key] = got
        else:
            missing.append((key, sc, seed))
    if not missing:
        return refs
    if workers == 1 or len(missing) == 1 or executor != "local":
        results = [run_reference(sc, seed, plugins, device) for _, sc, seed in missing]
    else:
        with ProcessPoolExecutor(min(workers, len(missing)), mp_context=_mp_context()) as pool:
            futs = [pool.submit(run_reference, sc, seed, plugins, device) for _, sc, seed in missing]
            results = [f.result() for f in futs]
    for (key, _, seed), vec in zip(missing, results, strict=True):
        refs[key] = vec
        if db is not None:
            db.put_ref(key, vec, {"seed": seed})
    return refs


def _execute(
    todo: Sequence[Job],
    refs: dict[str, np.ndarray],
    workers: int,
    plugins: Sequence[str],
    allow_outside: bool,
    device: str,
    executor: str,
    address: str | None,
    progress: Progress | None,
) -> Iterator[Cell]:
    def ref_of(j: Job) -> np.ndarray | None:
        return refs.get(reference_key(j.scenario, j.seed))

    if executor == "ray":
        from .executors import ray_execute

        yield from ray_execute(todo, ref_of, plugins, allow_outside, device, address, progress)
        return
    if workers == 1 or len(todo) <= 1:
        for j in todo:
            if progress is not None:
                progress.cell_started(j.label)
            yield run_job(j, ref_of(j), plugins, allow_outside, device)
        return
    with ProcessPoolExecutor(min(workers, len(todo)), mp_context=_mp_context()) as pool:
        pending: dict[Future[Cell], Job] = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < workers:
                j = queue.pop(0)
                pending[pool.submit(run_job, j, ref_of(j), plugins, allow_outside, device)] = j
                if progress is not None:
                    progress.cell_started(j.label)
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                j = pending.pop(fut)
                try:
                    yield fut.result()
                except Exception as exc:  # the worker itself died
                    cell = _failed(j, exc)
                    cell.sweep, cell.key = dict(j.sweep), j.key
                    yield cell
