"""``robustfl bound``: FLTrust's Theorem 1 (Cao, Fang, Liu, Gong, NDSS 2021) checked empirically.

:func:`run_bound` runs the sweeps in the theorem's setting (docs/bound.md;
:mod:`~robustfl.theory.setting`) and returns the report, a JSON-ready dict (non-finite -> null);
printing it is the CLI's job (``robustfl.cli``). The server step is alpha = ``[bound] alpha``,
default Lemma 2's ``mu / (2 L^2)``.

Per FLTrust round it checks Lemma 1, ``||g - grad F(w)|| <= 3 ||g0 - grad F(w)|| + 2 ||grad F(w)||``
(a violation when LHS > RHS (1 + 1e-9)), Lemma 2 at alpha = mu/(2L^2) on the iterate seen,
``||w - alpha grad F(w) - w*|| <= sqrt(1 - mu^2/(4L^2)) ||w - w*||``, and records the root error
``||grad f_D0(w) - grad F(w)||``; errors are ``||w^t - w*||`` against the population w*. FedAvg,
the median and Krum run beside it on the same rows, flagged where a fraction takes them outside
their guarantee. Sweeps: the Byzantine fraction (every attack x defense), the root size (the
root error at w* over ``draws`` root draws -- Lemma 3's Delta1 term -- and FLTrust's error floor
under every attack at the largest fraction over ``floor_draws(draws)`` draws each; the strongest
attack's is ``floor_slope``), and the fitted linear rate of the first phase.

The parts: :mod:`.plan` (the ``[bound]`` section), :mod:`.setting` (the ridge problem),
:mod:`.trajectory` (one replay), :mod:`.pool` (the jobs and their processes), :mod:`.fits` (the
statistics), :mod:`.claims` (the verdict in words); this module assembles the report and
re-exports their public names.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..scenario import Scenario, load_scenario
from ..simulation import components as C
from ..simulation.runner import check_device
from ..sweep.jobs import load_plugins
from .claims import BREAK, BREAK_FRACTION, WITHIN, claims, floor_meaning, verdict
from .constants import Constants
from .fits import PHASE, TOL, Tally, linear_rate, loglog_slope
from .plan import DEFAULT_SCENARIO, FLTRUST, Plan, floor_draws
from .pool import Job, Progress, canonical, default_workers, execute, open_pool, run_jobs, setting_for
from .setting import Setting
from .trajectory import DIVERGENCE_FACTOR, Trajectory, norm, run_trajectory

__all__ = [
    "BREAK", "BREAK_FRACTION", "DEFAULT_SCENARIO", "DIVERGENCE_FACTOR", "FLTRUST", "PHASE", "TOL", "WITHIN",
    "Job", "Plan", "Progress", "Setting", "Trajectory", "claims", "default_workers", "execute",
    "floor_draws", "linear_rate", "loglog_slope", "run_bound", "run_trajectory", "to_json", "verdict",
]

Results = dict[str, tuple[Trajectory, bool]]  # by job key: (trajectory, inside the guarantee)
Points = tuple[list[float], list[float], list[int]]  # (x, y, group) of a log-log fit
Lookup = Callable[..., tuple[Trajectory, bool]]  # (attack, defense, fraction, root) -> a result


def to_json(obj: Any) -> Any:
    """A JSON-ready copy: non-finite floats -> None, numpy scalars/arrays and tuples -> Python."""
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_json(v) for v in obj.tolist()]
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def run_bound(
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    workers: int | None = None,
    plugins: Sequence[str] = (),
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run every check of ``robustfl bound`` and return the report (JSON-ready, non-finite -> null).

    ``workers`` processes share the trajectories (default :func:`default_workers`); every
    trajectory has its own named generators, so the report does not depend on it."""
    if isinstance(scenario, Scenario):
        sc = scenario
        if overrides:  # applied (they were dropped) and checked as load_scenario does, kept on record
            new = load_scenario(scenario.data, overrides)
            sc = dataclasses.replace(scenario, data=new.data, overrides=[*scenario.overrides, *new.overrides],
                                     settings={**scenario.settings, **new.settings})
    else:  # a name, a path or a dict, as load_scenario takes them (overrides applied there)
        sc = load_scenario(DEFAULT_SCENARIO if scenario is None else scenario, overrides)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be an integer >= 1 (or None), got {workers!r}")
    check_device(device)
    load_plugins(plugins)  # here too: the plan below builds every attack and defense
    plan = Plan.of(sc)
    for spec in plan.attacks:  # validate every component before round 1
        C.check_knowledge(C.build_attack(spec), C.attack_label(spec), plan.knowledge)
    for spec in plan.defenses:
        C.build_defense(spec)
    n_workers = default_workers(plan, device) if workers is None else workers
    threads = torch.get_num_threads()
    torch.set_num_threads(plan.threads)
    start, cpu = time.perf_counter(), time.process_time()
    pool = open_pool(n_workers, plan.threads, plugins)
    try:
        report = _run(sc, plan, device, pool, n_workers, progress or (lambda stage, done, total: None))
    finally:
        pool.shutdown(cancel_futures=True)
        torch.set_num_threads(threads)
    report["elapsed_s"] = time.perf_counter() - start
    report["settings"]["workers"] = n_workers
    # CPU seconds: this process, plus the trajectories run in worker processes
    report["settings"]["cpu_s"] = time.process_time() - cpu + (report["settings"].pop("_worker_cpu_s"))
    return to_json(report)


def _queue(plan: Plan) -> list[Job]:
    """Every trajectory, deduplicated: the fraction sweep (attack x fraction x defense), then the
    floor sweep (FLTrust under every attack at the top fraction, fresh root draws)."""
    fl_spec, top = plan.defenses[0], max(plan.fractions)
    wanted = [
        Job(seed, a, d, x)
        for seed in plan.seeds
        for a in plan.attacks
        for x in plan.fractions
        for d in plan.defenses
    ]
    wanted += [
        Job(seed, a, fl_spec, top, (n0, draw))
        for seed in plan.seeds
        for a in plan.attacks
        for n0 in plan.root_sizes
        for draw in range(floor_draws(plan.draws))
    ]
    return list({(cj := canonical(plan, j)).key: cj for j in wanted}.values())


def _tallies(results: Results, labels: Sequence[str]) -> tuple[Tally, dict[str, Tally]]:
    """Every FLTrust trajectory run, each counted once, in the lemma tallies (overall, per attack)."""
    tally = Tally()
    per_attack = {a: Tally() for a in labels}
    for key, (traj, _) in results.items():
        _, attack, defense, _, _ = json.loads(key)
        if C.spec_name(defense) == FLTRUST:
            tally.add(traj.checks)
            per_attack[C.attack_label(attack)].add(traj.checks)
    return tally, per_attack


def _run(
    sc: Scenario, plan: Plan, device: str, pool: Any, n_workers: int, progress: Progress
) -> dict[str, Any]:
    fl_spec = plan.defenses[0]
    fl_label = C.defense_label(fl_spec)
    top = max(plan.fractions)
    n_floor = floor_draws(plan.draws)
    labels = [C.attack_label(a) for a in plan.attacks]

    queue = _queue(plan)
    total = len(queue) + len(plan.seeds) * len(plan.root_sizes)
    results = run_jobs(sc, plan, queue, device, pool, n_workers, progress, total)
    tally, per_attack = _tallies(results, labels)
    step = itertools.count(len(queue) + 1)  # the root-error sweep's progress continues the count

    fractions_out: list[dict[str, Any]] = []
    trajectories: list[dict[str, Any]] = []
    per_seed: list[dict[str, Any]] = []
    root_rows: list[dict[str, Any]] = []
    root_pts: Points = ([], [], [])
    floor_pts: dict[str, Points] = {a: ([], [], []) for a in labels}
    consts0: Constants | None = None
    rate: dict[str, Any] = {}
    strongest0 = "none"
    for si, seed in enumerate(plan.seeds):
        st = setting_for(sc, seed, device)
        cs = st.constants(plan.alpha)
        consts0 = consts0 or cs

        def get(a: Any, d: Any, x: float, root: Any = None, seed: int = seed) -> tuple[Trajectory, bool]:
            return results[canonical(plan, Job(seed, a, d, x, root)).key]

        for a in plan.attacks:
            for x in plan.fractions:
                for d in plan.defenses:
                    traj, inside = get(a, d, x)
                    fractions_out.append(
                        {
                            "seed": seed,
                            "fraction": x,
                            "byzantine": plan.byzantine(x),
                            "attack": C.attack_label(a),
                            "defense": C.defense_label(d),
                            "final_error": traj.final_error,
                            "status": traj.status,
                            "stopped_at_round": traj.rounds,
                            "inside_guarantee": inside,
                        }
                    )
        no_attack = get("none", fl_spec, plan.fractions[0])[0]
        fl_finals = [get(a, fl_spec, x)[0].final_error for a in plan.attacks for x in plan.fractions]
        fl_worst = max(math.inf if e is None else e for e in fl_finals)
        # the strongest attack: the largest FLTrust final error at the top fraction
        tops = {C.attack_label(a): get(a, fl_spec, top)[0].final_error for a in plan.attacks[1:]}
        strongest = max(
            tops, key=lambda a: math.inf if tops[a] is None else float(tops[a] or 0.0), default="none"
        )
        if si == 0:
            strongest0 = strongest
            rate = linear_rate(no_attack.errors)
            for a in plan.attacks:
                x = plan.fractions[0] if C.spec_name(a) == "none" else top
                trajectories.append(
                    {
                        "attack": C.attack_label(a),
                        "fraction": x,
                        "defense": fl_label,
                        "seed": seed,
                        "errors": get(a, fl_spec, x)[0].errors,
                    }
                )
        per_seed.append(
            {
                "seed": seed,
                "root_optimum_error": float(norm(st.root_optimum(st.root) - st.w_star)),
                "no_attack_error": no_attack.final_error,
                "fltrust_worst_error": fl_worst,
                "strongest_attack": strongest,
                "initial_error": float(no_attack.errors[0]),
            }
        )
        for row in _root_sweep(plan, st, cs, si, strongest, get, labels, root_pts, floor_pts):
            root_rows.append(row)
            progress("root-size sweep (root error)", next(step), total)

    assert consts0 is not None
    floor_fits: dict[str, dict[str, Any]] = {}
    for a in labels:
        fit = loglog_slope(*floor_pts[a])
        fit.update(attack=a, fraction=top, draws=n_floor, meaning=floor_meaning(fit))
        floor_fits[a] = fit
    rate.update(
        attack="none",
        defense=fl_label,
        lemma2_factor=consts0.lemma2_factor,
        gradient_descent_factor=consts0.gradient_descent_factor,
        proof_factor=consts0.proof_factor,
        recursion_factor=1 - consts0.rho,
    )
    report: dict[str, Any] = {
        "rho": consts0.rho,
        "rho_literal": consts0.rho_literal,
        "theorem_vacuous": consts0.rho <= 0,
        "lemma1_violations": tally.violations1,
        "lemma1_max_ratio": tally.max_ratio1,
        "lemma2_violations": tally.violations2,
        "lemma2_max_ratio": tally.max_ratio2,
        "rounds_checked": tally.rounds,
        "fractions": fractions_out,
        "root_optimum_error": per_seed[0]["root_optimum_error"],
        "root_error_slope": loglog_slope(*root_pts),
        "floor_slope": floor_fits[strongest0],
        "floor_slopes": floor_fits,
        "linear_rate": rate,
        "constants": consts0.to_json(),
        "lemmas_by_attack": {a: t.to_json() for a, t in per_attack.items()},
        "max_root_error": tally.max_root_error,
        "per_seed": per_seed,
        "root_sweep": root_rows,
        "trajectories": trajectories,
        "settings": {
            "scenario": sc.name,
            "clients": plan.clients,
            "rounds": plan.rounds,
            "alpha": consts0.alpha,
            "fractions": list(plan.fractions),
            "root_sizes": list(plan.root_sizes),
            "draws": plan.draws,
            "floor_draws": n_floor,
            "seeds": list(plan.seeds),
            "attacks": labels,
            "defenses": [C.defense_label(d) for d in plan.defenses],
            "tolerance": TOL,
            "device": device,
            "trajectories_run": len(results),
            "_worker_cpu_s": sum(t.cpu_s for t, _ in results.values()) if n_workers > 1 else 0.0,
        },
        "scenario": sc.to_dict(),
    }
    report["claims"] = claims(report)
    report["verdict"] = verdict(report)
    return report


def _root_sweep(
    plan: Plan,
    st: Setting,
    cs: Constants,
    si: int,
    strongest: str,
    get: Lookup,
    labels: Sequence[str],
    root_pts: Points,
    floor_pts: dict[str, Points],
) -> Iterator[dict[str, Any]]:
    """One seed's root-size sweep, a row per size: the root error at w* over every draw (Lemma 3's
    Delta1 term) and FLTrust's floors; the points of the fits are appended to ``root_pts`` and
    ``floor_pts`` (group ``si``)."""
    top = max(plan.fractions)
    fl_spec = plan.defenses[0]
    n_floor = floor_draws(plan.draws)
    grad_star = st.grad(st.w_star)
    for n0 in plan.root_sizes:
        errs, opts = [], []
        floors: dict[str, list[float]] = {a: [] for a in labels}
        for draw in range(plan.draws):
            root = st.draw_root(n0, draw)
            errs.append(float(norm(st.root_grad(st.w_star, root) - grad_star)))
            if draw < n_floor:
                opts.append(float(norm(st.root_optimum(root) - st.w_star)))
                for a in plan.attacks:
                    e = get(a, fl_spec, top, (n0, draw))[0].final_error
                    floors[C.attack_label(a)].append(math.inf if e is None else e)
        for pts, ys in [(root_pts, errs)] + [(floor_pts[a], floors[a]) for a in labels]:
            pts[0].extend([float(n0)] * len(ys))
            pts[1].extend(ys)
            pts[2].extend([si] * len(ys))
        d1 = cs.delta1 * math.sqrt(cs.root_size / n0)
        yield {
            "seed": st.seed,
            "root_size": n0,
            "root_error": errs,
            "root_error_mean": float(np.mean(errs)),
            "delta1": d1,
            "within_2delta1": float(np.mean(np.asarray(errs) <= 2 * d1)),
            "floor": floors[strongest],
            "floor_mean": float(np.mean(floors[strongest])),
            "floors": floors,
            "root_optimum_error": opts,
            "root_optimum_error_mean": float(np.mean(opts)),
        }
