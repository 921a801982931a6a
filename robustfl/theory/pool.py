"""The trajectories of ``robustfl bound`` as jobs, and the processes that run them.

A :class:`Job` names one trajectory (seed, attack, defense, fraction, root set); :func:`canonical`
maps it to the job computing the same trajectory, so each runs once. :func:`execute` runs one job
in this process or a worker (settings cached per process); :func:`open_pool` gives the workers
(forkserver where available, :class:`Inline` for one) and :func:`run_jobs` keeps them fed. Every
trajectory has its own named generators, so the results do not depend on the number of workers.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import torch

from ..capabilities import DefenseBase
from ..scenario import Scenario
from ..simulation import components as C
from ..types import Knowledge
from .plan import FLTRUST, Plan, floor_draws
from .setting import Setting
from .trajectory import Trajectory, run_trajectory

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def inside(defense: DefenseBase, k: int, f: int, f_hat: int) -> bool:
    """Whether the rule's guarantee covers f Byzantine rows out of k (a rule that declares it
    tolerates no Byzantine row, FedAvg: only f = 0)."""
    if not defense.tolerates_byzantine:
        return f == 0
    return f <= f_hat and defense.admits(k, f_hat)


@dataclass(frozen=True)
class Job:
    """One trajectory: a seed, an attack, a defense, a fraction, and the root set -- the scenario's
    (``root`` None) or fresh draw ``draw`` of ``size`` samples (the floor sweep)."""

    seed: int
    attack: Any
    defense: Any
    fraction: float
    root: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        return json.dumps([self.seed, self.attack, self.defense, self.fraction, self.root], sort_keys=True)


def canonical(plan: Plan, job: Job) -> Job:
    """The job that computes the same trajectory: with no Byzantine row (f = 0) or attack "none"
    every attack replays "none"; FLTrust ignores f-hat, so under "none" one fraction serves all."""
    if plan.byzantine(job.fraction) > 0 and C.spec_name(job.attack) != "none":
        return job
    fraction = plan.fractions[0] if C.spec_name(job.defense) == FLTRUST else job.fraction
    return Job(job.seed, "none", job.defense, fraction, job.root)


_SETTINGS: dict[str, Setting] = {}


def setting_for(sc: Scenario, seed: int, device: str) -> Setting:
    """The seed's :class:`Setting`, built once per process (the last few kept)."""
    key = json.dumps([sc.hash(), seed, device, sc.base_dir])
    if key not in _SETTINGS:
        if len(_SETTINGS) > 8:
            _SETTINGS.clear()
        _SETTINGS[key] = Setting.build(sc, seed, torch.device(device))
    return _SETTINGS[key]


def execute(sc: Scenario, plan: Plan, job: Job, device: str = "cpu") -> tuple[Trajectory, bool]:
    """Run one job (in this process or a worker): its trajectory and whether the rule's guarantee
    covers its fraction. The lemma checks are computed on FLTrust's trajectories only."""
    cpu = time.process_time()
    st = setting_for(sc, job.seed, device)
    cs = st.constants(plan.alpha)
    f = plan.byzantine(job.fraction)
    f_hat = plan.assumed_count(f)
    defense = C.build_defense(job.defense)
    is_fl = C.spec_name(job.defense) == FLTRUST
    root = st.root if job.root is None else st.draw_root(*job.root)
    tag = "sweep" if job.root is None else f"floor:{job.root[0]}:{job.root[1]}"
    alabel = C.attack_label(job.attack)
    traj = run_trajectory(
        st,
        C.build_attack(job.attack),
        defense,
        f=f,
        f_hat=f_hat,
        alpha=cs.alpha,
        alpha_lemma=cs.alpha_lemma,
        lemma2_factor=cs.lemma2_factor,
        rounds=plan.rounds,
        root=root,
        attack_gen=C.named_generator(job.seed, f"bound:attack:{alabel}:{job.fraction}:{tag}"),
        defense_gen=C.named_generator(job.seed, f"bound:defense:{job.fraction}:{tag}"),
        granted=Knowledge.grant(plan.knowledge),
        check=is_fl,
    )
    traj.cpu_s = time.process_time() - cpu
    return traj, inside(defense, st.num_clients, f, f_hat)


def _init_worker(threads: int, plugins: Sequence[str]) -> None:
    torch.set_num_threads(threads)
    if plugins:
        from ..plugins import load_plugin

        for spec in plugins:
            load_plugin(spec)


class Inline:
    """An executor that runs each job when it is submitted (workers = 1)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # handed to the caller through the future
            fut.set_exception(exc)
        return fut

    def shutdown(self, cancel_futures: bool = False) -> None:
        return None


def _mp_context() -> Any:
    """Workers fork from a server that has imported this module (and torch) once; else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["robustfl.theory.pool"])
        return ctx
    return multiprocessing.get_context("spawn")


def default_workers(plan: Plan, device: str) -> int:
    """Processes for the trajectories: 1 for small plans or a GPU, else the usable cores (at most 8)."""
    if device != "cpu":
        return 1
    runs = (
        len(plan.seeds)
        * plan.rounds
        * (
            len(plan.attacks) * len(plan.fractions) * len(plan.defenses)
            + len(plan.attacks) * len(plan.root_sizes) * floor_draws(plan.draws)
        )
    )
    if runs < 10_000:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def open_pool(n_workers: int, threads: int, plugins: Sequence[str]) -> Any:
    """``n_workers`` processes (each with ``threads`` torch threads and the plugins loaded), or
    :class:`Inline` for one; the caller shuts it down."""
    if n_workers <= 1:
        return Inline()
    return ProcessPoolExecutor(
        max_workers=n_workers,
        mp_context=_mp_context(),
        initializer=_init_worker,
        initargs=(threads, tuple(plugins)),
    )


def run_jobs(
    sc: Scenario,
    plan: Plan,
    queue: Sequence[Job],
    device: str,
    pool: Any,
    n_workers: int,
    progress: Progress,
    total: int,
) -> dict[str, tuple[Trajectory, bool]]:
    """Every job's (trajectory, inside the guarantee), by key; at most 2 jobs per worker queued."""
    todo = list(queue)
    results: dict[str, tuple[Trajectory, bool]] = {}
    running: dict[Future[Any], Job] = {}
    done = 0
    while todo or running:
        while todo and len(running) < 2 * n_workers:
            job = todo.pop(0)
            running[pool.submit(execute, sc, plan, job, device)] = job
        finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for fut in finished:
            job = running.pop(fut)
            results[job.key] = fut.result()
            done += 1
            progress("root-size sweep (floor)" if job.root else "Byzantine-fraction sweep", done, total)
    return results
