"""``robustfl bound``: FLTrust's Theorem 1 (Cao, Fang, Liu, Gong, NDSS 2021) checked empirically.

The theorem's setting (docs/bound.md) on ridge regression with Gaussian design, where the
population objective is exact: ``grad F(w) = Sigma (w - w_true) + l2 w``, ``w* = (Sigma + l2 I)^-1
Sigma w_true``, mu and L the extreme eigenvalues of ``Sigma + l2 I``. Conventions, pinned:

* every client takes one full-batch gradient step with local lr beta = 1 on its fixed data, so
  its row is ``-grad F_k(w)`` with ``grad F_k(w) = X_k^T (X_k w - y_k) / n_k + l2 w`` (all clients
  at once, one batched product); the server's own update is ``-grad f_D0(w)`` on its root data;
* the attack (the library's, on the update rows, reference = the server's update) replaces the
  Byzantine rows; ``g`` = the defense's aggregate of the negated rows (gradient convention, with
  reference ``g0 = grad f_D0(w)``); the server steps ``w <- w - alpha g``;
* alpha = ``[bound] alpha``, default Lemma 2's ``mu / (2 L^2)``.

Per FLTrust round it checks Lemma 1, ``||g - grad F(w)|| <= 3 ||g0 - grad F(w)|| + 2 ||grad F(w)||``
(a violation when LHS > RHS (1 + 1e-9)), Lemma 2 at alpha = mu/(2L^2) on the iterate seen,
``||w - alpha grad F(w) - w*|| <= sqrt(1 - mu^2/(4L^2)) ||w - w*||``, and records the root error
``||grad f_D0(w) - grad F(w)||``; errors are ``||w^t - w*||`` against the population w*. FedAvg,
the median and Krum run beside it on the same rows, flagged where a fraction takes them outside
their guarantee. Sweeps: the Byzantine fraction (every attack x defense), the root size (the
root error at w* over ``draws`` root draws -- Lemma 3's Delta1 term -- and FLTrust's error floor
under every attack at the largest fraction over ``floor_draws(draws)`` draws each; the strongest
attack's is ``floor_slope``), and the fitted linear rate of the first phase. The result is a
JSON-ready dict (non-finite -> null).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats as sps
from torch import Tensor

from ..errors import ConfigError
from ..scenario import Scenario, count_of, load_scenario
from ..simulation import components as C
from ..types import Aggregate, AttackContext, DefenseContext, Knowledge
from .constants import Constants, theorem_constants

DEFAULT_SCENARIO = "fltrust-bound"
TOL = 1e-9  # relative tolerance of the lemma checks
DIVERGENCE_FACTOR = 1e6  # a run diverges when ||w|| passes this times ||w0 - w*|| (or is not finite)
WITHIN = 1.5  # FLTrust's final error <= WITHIN * max(no-attack error, ||w_D0 - w*||)
BREAK = 10.0  # FedAvg / median at sign_flip 0.6: >= BREAK * FLTrust's worst final error
BREAK_FRACTION = 0.6
PHASE = 3.0  # the first phase: rounds whose error exceeds PHASE times the floor
FLTRUST = "fltrust"

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def floor_draws(draws: int) -> int:
    """Root draws per size and attack for the floor sweep (each a full FLTrust trajectory):
    ceil(draws / 80), at least 2 -- 3 for the default 200."""
    return min(draws, max(2, math.ceil(draws / 80)))


# -- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """The bound command's settings, from a scenario's [bound] section (validated)."""

    fractions: tuple[float, ...]
    root_sizes: tuple[int, ...]
    draws: int
    alpha: float | None
    rounds: int
    attacks: tuple[C.Spec, ...]  # "none" first
    defenses: tuple[C.Spec, ...]  # FLTrust first
    seeds: tuple[int, ...]
    clients: int
    assumed: float | int | None
    knowledge: str
    threads: int

    @classmethod
    def of(cls, sc: Scenario) -> Plan:
        b, fed = sc.section("bound"), sc.section("federation")
        task = sc.section("task")["name"]
        if task != "ridge":
            raise ConfigError(
                f"task.name must be 'ridge' for the bound command (it needs the exact population "
                f"objective), got {task!r}"
            )
        if fed["participation"] != 1.0:
            raise ConfigError(
                f"federation.participation must be 1 for the bound command (the theorem's setting), "
                f"got {fed['participation']!r}"
            )
        if sc.section("server")["root_size"] < 1:
            raise ConfigError("server.root_size must be >= 1 for the bound command (FLTrust needs root data)")
        k = fed["clients"]
        fractions = []
        for x in b["fractions"]:
            if isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x < 1:
                raise ConfigError(f"bound.fractions must hold numbers in [0, 1), got {x!r}")
            if count_of(float(x), k) >= k:
                raise ConfigError(f"bound.fractions: {x!r} of {k} clients leaves no honest client")
            fractions.append(float(x))
        sizes = []
        for n in b["root_sizes"]:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"bound.root_sizes must hold integers >= 1, got {n!r}")
            sizes.append(n)
        if len(set(sizes)) < 2:
            raise ConfigError(
                f"bound.root_sizes must hold at least two distinct sizes, got {b['root_sizes']!r}"
            )
        seeds = []
        for s in b["seeds"]:
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise ConfigError(f"bound.seeds must hold non-negative integers, got {s!r}")
            seeds.append(s)
        for key in ("attacks", "defenses"):
            for item in b[key]:
                named = isinstance(item, dict) and isinstance(item.get("name"), str)
                if not isinstance(item, str) and not named:
                    raise ConfigError(f"bound.{key} items must be names or tables with a name, got {item!r}")
        attacks = [a for a in b["attacks"] if C.spec_name(a) != "none"]
        defenses = [d for d in b["defenses"] if C.spec_name(d) != FLTRUST]
        fl = [d for d in b["defenses"] if C.spec_name(d) == FLTRUST][:1] or [FLTRUST]
        return cls(
            fractions=tuple(sorted(set(fractions))),
            root_sizes=tuple(sorted(set(sizes))),
            draws=b["draws"],
            alpha=None if b["alpha"] is None else float(b["alpha"]),
            rounds=b["rounds"],
            attacks=("none", *attacks),
            defenses=(fl[0], *defenses),
            seeds=tuple(dict.fromkeys(seeds)),
            clients=k,
            assumed=sc.section("threat")["assumed_byzantine"],
            knowledge=sc.section("threat")["knowledge"],
            threads=fed["threads"],
        )

    def byzantine(self, fraction: float) -> int:
        return count_of(fraction, self.clients)

    def assumed_count(self, f: int) -> int:
        return f if self.assumed is None else count_of(self.assumed, self.clients)


# -- the theorem's setting -----------------------------------------------------------------------
@dataclass
class Setting:
    """One seed's ridge problem in the theorem's setting, on one device (float64).

    Each client's gradient is affine in w: ``grad F_k(w) = A_k w - b_k + l2 w`` with
    ``A_k = X_k^T X_k / n_k`` and ``b_k = X_k^T y_k / n_k`` precomputed from its fixed data, so all
    K gradients are one batched (K, d, d) x (d,) product per round."""

    a: Tensor  # (K, d, d)
    b: Tensor  # (K, d)
    num_samples: Tensor  # (K,) int64
    sigma: Tensor
    w_true: Tensor
    l2: float
    noise: float
    hessian: Tensor  # Sigma + l2 I
    w_star: Tensor  # population optimum
    root: tuple[Tensor, Tensor]  # the scenario's root set (x0, y0)
    sampler: Callable[[int, torch.Generator], tuple[Tensor, Tensor]]
    w0: Tensor
    byz_order: Tensor  # a random permutation of client ids; the first f are Byzantine
    seed: int

    @classmethod
    def build(cls, sc: Scenario, seed: int, device: torch.device) -> Setting:
        from ..simulation.runner import build_problem

        p = build_problem(sc, seed)
        ex = p.extras
        mask = p.client_mask.to(torch.float64)
        x = p.client_data[0].to(torch.float64) * mask[..., None]
        y = p.client_data[1].to(torch.float64) * mask
        counts = mask.sum(1).clamp_min(1)[:, None]
        sigma = ex["sigma"].to(torch.float64)
        l2 = float(ex["l2"])
        hessian = sigma + l2 * torch.eye(sigma.shape[0], dtype=torch.float64)
        assert p.root_data is not None
        w0 = p.init(C.named_generator(seed, "init"), sc.section("federation")["init_scale"])
        byz = torch.randperm(x.shape[0], generator=C.named_generator(seed, "byzantine"))
        return cls(
            a=(x.transpose(1, 2) @ x / counts[..., None]).to(device),
            b=(torch.einsum("knd,kn->kd", x, y) / counts).to(device),
            num_samples=p.num_samples.to(device),
            sigma=sigma.to(device),
            w_true=ex["w_true"].to(device, torch.float64),
            l2=l2,
            noise=float(ex["noise"]),
            hessian=hessian.to(device),
            w_star=ex["population_optimum"].to(device, torch.float64),
            root=(p.root_data[0].to(device), p.root_data[1].to(device)),
            sampler=ex["sample"],
            w0=w0.to(device, torch.float64),
            byz_order=byz.to(device),
            seed=seed,
        )

    @property
    def num_clients(self) -> int:
        return int(self.a.shape[0])

    @property
    def device(self) -> torch.device:
        return self.w0.device

    def client_grads(self, w: Tensor) -> Tensor:
        """(K, d): grad F_k(w) = X_k^T (X_k w - y_k) / n_k + l2 w for every client at once."""
        return self.a @ w - self.b + self.l2 * w

    def grad(self, w: Tensor) -> Tensor:
        """The population gradient Sigma (w - w_true) + l2 w (rows of ``w`` for a batch)."""
        return (w - self.w_true) @ self.sigma + self.l2 * w

    def root_grad(self, w: Tensor, root: tuple[Tensor, Tensor]) -> Tensor:
        x0, y0 = root
        return x0.T @ (x0 @ w - y0) / x0.shape[0] + self.l2 * w

    def root_optimum(self, root: tuple[Tensor, Tensor]) -> Tensor:
        """w_D0: the minimiser of the ridge objective on the root data alone."""
        x0, y0 = root
        n0, d = x0.shape
        a = x0.T @ x0 / n0 + self.l2 * torch.eye(d, dtype=x0.dtype, device=x0.device)
        return torch.linalg.solve(a, x0.T @ y0 / n0)

    def draw_root(self, size: int, draw: int) -> tuple[Tensor, Tensor]:
        """Root draw ``draw`` of ``size`` fresh samples (its own named generator: reproducible anywhere)."""
        x0, y0 = self.sampler(size, C.named_generator(self.seed, f"bound:root:{size}:{draw}"))
        return x0.to(self.device), y0.to(self.device)

    def constants(self, alpha: float | None) -> Constants:
        return theorem_constants(
            self.hessian, self.sigma, self.w_true, self.w_star, self.noise, int(self.root[0].shape[0]), alpha
        )


# -- one trajectory ------------------------------------------------------------------------------
@dataclass
class Trajectory:
    """``errors[t] = ||w^t - w*||`` for t = 0..T (shorter when diverged); on FLTrust's rounds the
    columns of ``checks``: Lemma 1's LHS and RHS, Lemma 2's LHS and RHS, the root error."""

    errors: np.ndarray
    status: str
    checks: np.ndarray | None = None  # (rounds run, 5)
    cpu_s: float = 0.0  # CPU time of the process that ran it

    @property
    def final_error(self) -> float | None:
        return float(self.errors[-1]) if self.status == "ok" else None

    @property
    def rounds(self) -> int:
        return len(self.errors) - 1


def _norm(v: Tensor) -> Tensor:
    return torch.linalg.vector_norm(v, dim=-1)


def run_trajectory(
    st: Setting,
    attack: Any,
    defense: Any,
    *,
    f: int,
    f_hat: int,
    alpha: float,
    alpha_lemma: float,
    lemma2_factor: float,
    rounds: int,
    root: tuple[Tensor, Tensor],
    attack_gen: torch.Generator,
    defense_gen: torch.Generator,
    granted: Knowledge,
    check: bool,
) -> Trajectory:
    """Replay ``rounds`` rounds of the theorem's setting with the library's ``attack`` and ``defense``.

    The iterates, aggregates g and root gradients g0 are kept, and the lemma checks are computed
    from them after the loop in one vectorised pass (same formulas, per round)."""
    k, dev = st.num_clients, st.device
    is_byz = torch.zeros(k, dtype=torch.bool, device=dev)
    is_byz[st.byz_order[:f]] = True
    byz, honest = torch.nonzero(is_byz).flatten(), torch.nonzero(~is_byz).flatten()
    ids = torch.arange(k, device=dev)
    x0, y0 = root
    a0, b0 = x0.T @ x0 / x0.shape[0], x0.T @ y0 / x0.shape[0]  # grad f_D0(w) = a0 w - b0 + l2 w
    limit = DIVERGENCE_FACTOR * float(_norm(st.w0 - st.w_star))
    ws = torch.empty(rounds + 1, st.w0.shape[0], dtype=torch.float64, device=dev)
    gs, g0s = torch.empty_like(ws[1:]), torch.empty_like(ws[1:])
    ws[0] = w = st.w0
    if hasattr(defense, "reset"):
        defense.reset()
    status, done = "ok", rounds
    for t in range(rounds):
        rows = -st.client_grads(w)  # each client's update: one full-batch step, beta = 1
        g0 = a0 @ w - b0 + st.l2 * w  # the server's gradient on D0 (its update is -g0)
        ctx = DefenseContext(
            round=t,
            global_model=w,
            assumed_byzantine=f_hat,
            client_ids=ids,
            num_samples=st.num_samples,
            reference=g0,
            generator=defense_gen,
        )
        if f > 0:
            actx = AttackContext(
                own=rows[byz],
                round=t,
                num_clients=k,
                global_model=w,
                generator=attack_gen,
                honest=rows[honest] if Knowledge.HONEST in granted else None,
                reference=-g0 if Knowledge.REFERENCE in granted else None,
                oracle=_oracle(rows, byz, defense, ctx) if Knowledge.ORACLE in granted else None,
            )
            rows = rows.clone()
            rows[byz] = attack(actx).to(rows)
        g = defense(-rows, ctx).vector  # the aggregate of the negated rows (gradient convention)
        gs[t], g0s[t] = g, g0
        w = w - alpha * g
        ws[t + 1] = w
        wn = float(_norm(w))
        if not math.isfinite(wn) or wn > limit:
            status, done = "diverged", t + 1
            break
    ws = ws[: done + 1]
    errors = _norm(ws - st.w_star)
    checks = None
    if check:
        w_, g_, g0_ = ws[:done], gs[:done], g0s[:done]
        gf = st.grad(w_)
        root_err = _norm(g0_ - gf)
        checks = torch.stack(
            [
                _norm(g_ - gf),  # Lemma 1: ||g - grad F(w)||
                3 * root_err + 2 * _norm(gf),  # <= 3 ||g0 - grad F(w)|| + 2 ||grad F(w)||
                _norm(w_ - alpha_lemma * gf - st.w_star),  # Lemma 2 at alpha = mu / (2 L^2)
                lemma2_factor * errors[:done],  # <= sqrt(1 - mu^2 / (4 L^2)) ||w - w*||
                root_err,  # ||grad f_D0(w) - grad F(w)||
            ],
            dim=1,
        )
    return Trajectory(
        errors=errors.cpu().numpy(),
        status=status,
        checks=None if checks is None else checks.cpu().numpy(),
    )


def _oracle(rows: Tensor, byz: Tensor, defense: Any, ctx: DefenseContext) -> Callable[[Tensor], Aggregate]:
    """What the defense would output with ``cand`` as the Byzantine rows (update convention);
    run on a copy, so the defense's state never changes."""

    def oracle(cand: Tensor) -> Aggregate:
        trial = rows.clone()
        trial[byz] = cand.to(trial)
        agg = copy.deepcopy(defense)(-trial, ctx)
        return Aggregate(vector=-agg.vector, weights=agg.weights, stats=agg.stats)

    return oracle


# -- fits ----------------------------------------------------------------------------------------
def loglog_slope(x: Any, y: Any, groups: Any = None) -> dict[str, Any]:
    """OLS slope of log(y) on log(x) with a t-based 95% interval; ``groups`` (e.g. seeds) get their
    own intercepts. Non-positive or non-finite points are dropped."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ga = np.zeros(len(xa), dtype=int) if groups is None else np.asarray(groups)
    keep = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0)
    lx, ly, ga = np.log(xa[keep]), np.log(ya[keep]), ga[keep]
    n, ng = len(lx), len(np.unique(ga)) if len(ga) else 0
    out: dict[str, Any] = {"estimate": None, "ci95": [None, None], "points": int(n)}
    if n - ng < 2 or len(np.unique(lx)) < 2:
        return out
    for gval in np.unique(ga):
        sel = ga == gval
        lx[sel] -= lx[sel].mean()
        ly[sel] -= ly[sel].mean()
    sxx = float(lx @ lx)
    slope = float(lx @ ly) / sxx
    resid = ly - slope * lx
    dof = n - ng - 1
    se = math.sqrt(float(resid @ resid) / dof / sxx) if dof > 0 else math.inf
    half = float(sps.t.ppf(0.975, dof)) * se if dof > 0 else math.inf
    out.update(estimate=slope, ci95=[slope - half, slope + half], stderr=se)
    return out


def linear_rate(errors: np.ndarray, phase: float = PHASE) -> dict[str, Any]:
    """Per-round rate exp(slope) of log error over the first phase: from round 0 until the error
    first falls to ``phase`` times the floor (the median of the last fifth of the rounds)."""
    e = np.asarray(errors, dtype=float)
    out: dict[str, Any] = {"estimate": None, "ci95": [None, None], "rounds_fitted": 0, "floor": None}
    if len(e) < 5 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        return out
    floor = float(np.median(e[-max(1, len(e) // 5) :]))
    below = np.nonzero(e <= phase * floor)[0]
    end = int(below[0]) if len(below) else len(e)
    out["floor"] = floor
    out["rounds_fitted"] = end
    if end < 3:
        return out
    t, le = np.arange(end, dtype=float), np.log(e[:end])
    res = sps.linregress(t, le)
    half = float(sps.t.ppf(0.975, end - 2)) * float(res.stderr)
    out.update(
        estimate=math.exp(res.slope),
        ci95=[math.exp(res.slope - half), math.exp(res.slope + half)],
    )
    return out


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


# -- the whole check -----------------------------------------------------------------------------
@dataclass
class _Tally:
    rounds: int = 0
    violations1: int = 0
    violations2: int = 0
    max_ratio1: float = 0.0
    max_ratio2: float = 0.0
    max_root_error: float = 0.0

    def add(self, checks: np.ndarray | None) -> None:
        if checks is None or len(checks) == 0:
            return
        lhs1, rhs1, lhs2, rhs2, root = checks.T
        self.rounds += len(checks)
        self.violations1 += int(np.sum(~(lhs1 <= rhs1 * (1 + TOL))))
        self.violations2 += int(np.sum(~(lhs2 <= rhs2 * (1 + TOL))))
        with np.errstate(divide="ignore", invalid="ignore"):
            r1 = np.where(rhs1 > 0, lhs1 / rhs1, np.where(lhs1 > 0, np.inf, 0.0))
            r2 = np.where(rhs2 > 0, lhs2 / rhs2, np.where(lhs2 > 0, np.inf, 0.0))
        self.max_ratio1 = max(self.max_ratio1, float(np.max(r1)))
        self.max_ratio2 = max(self.max_ratio2, float(np.max(r2)))
        self.max_root_error = max(self.max_root_error, float(np.max(root)))

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "lemma1_violations": self.violations1,
            "lemma1_max_ratio": self.max_ratio1,
            "lemma2_violations": self.violations2,
            "lemma2_max_ratio": self.max_ratio2,
            "max_root_error": self.max_root_error,
        }


def _inside(name: str, defense: Any, k: int, f: int, f_hat: int) -> bool:
    """Whether the rule's guarantee covers f Byzantine rows out of k (FedAvg: only f = 0)."""
    if name == "fedavg":
        return f == 0
    return f <= f_hat and C.admits(defense, k, f_hat)


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


def _canonical(plan: Plan, job: Job) -> Job:
    """The job that computes the same trajectory: with no Byzantine row (f = 0) or attack "none"
    every attack replays "none"; FLTrust ignores f-hat, so under "none" one fraction serves all."""
    if plan.byzantine(job.fraction) > 0 and C.spec_name(job.attack) != "none":
        return job
    fraction = plan.fractions[0] if C.spec_name(job.defense) == FLTRUST else job.fraction
    return Job(job.seed, "none", job.defense, fraction, job.root)


_SETTINGS: dict[str, Setting] = {}


def _setting(sc: Scenario, seed: int, device: str) -> Setting:
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
    st = _setting(sc, job.seed, device)
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
    return traj, _inside(C.spec_name(job.defense), defense, st.num_clients, f, f_hat)


def _init_worker(threads: int, plugins: Sequence[str]) -> None:
    torch.set_num_threads(threads)
    if plugins:
        from ..registry import load_plugin

        for spec in plugins:
            load_plugin(spec)


class _Inline:
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
        ctx.set_forkserver_preload(["robustfl.theory.bound"])
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


def run_bound(
    scenario: Scenario | str | None = None,
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
    if scenario is None or isinstance(scenario, str):
        sc = load_scenario(scenario or DEFAULT_SCENARIO, overrides)
    else:
        sc = scenario
    plan = Plan.of(sc)
    for spec in plan.attacks:  # validate every component before round 1
        C.check_knowledge(C.build_attack(spec), C.attack_label(spec), plan.knowledge)
    for spec in plan.defenses:
        C.build_defense(spec)
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    n_workers = default_workers(plan, device) if workers is None else workers
    threads = torch.get_num_threads()
    torch.set_num_threads(plan.threads)
    start, cpu = time.perf_counter(), time.process_time()
    pool: Any = _Inline()
    if n_workers > 1:
        pool = ProcessPoolExecutor(
            max_workers=n_workers,
            mp_context=_mp_context(),
            initializer=_init_worker,
            initargs=(plan.threads, tuple(plugins)),
        )
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


def _run(
    sc: Scenario, plan: Plan, device: str, pool: Any, n_workers: int, progress: Progress
) -> dict[str, Any]:
    fl_spec = plan.defenses[0]
    fl_label = C.defense_label(fl_spec)
    top = max(plan.fractions)
    n_floor = floor_draws(plan.draws)
    labels = [C.attack_label(a) for a in plan.attacks]

    # every trajectory, deduplicated: the fraction sweep (attack x fraction x defense), then the
    # floor sweep (FLTrust under every attack at the top fraction, fresh root draws)
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
        for draw in range(n_floor)
    ]
    queue = list({(cj := _canonical(plan, j)).key: cj for j in wanted}.values())
    total = len(queue) + len(plan.seeds) * len(plan.root_sizes)
    results: dict[str, tuple[Trajectory, bool]] = {}
    running: dict[Future[Any], Job] = {}
    done = 0
    while queue or running:
        while queue and len(running) < 2 * n_workers:
            job = queue.pop(0)
            running[pool.submit(execute, sc, plan, job, device)] = job
        finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for fut in finished:
            job = running.pop(fut)
            results[job.key] = fut.result()
            done += 1
            progress("root-size sweep (floor)" if job.root else "Byzantine-fraction sweep", done, total)

    # every FLTrust trajectory run, each counted once, in the lemma tallies
    tally = _Tally()
    per_attack = {a: _Tally() for a in labels}
    for key, (traj, _) in results.items():
        _, attack, defense, _, _ = json.loads(key)
        if C.spec_name(defense) == FLTRUST:
            tally.add(traj.checks)
            per_attack[C.attack_label(attack)].add(traj.checks)

    fractions_out: list[dict[str, Any]] = []
    trajectories: list[dict[str, Any]] = []
    per_seed: list[dict[str, Any]] = []
    root_rows: list[dict[str, Any]] = []
    root_pts: tuple[list[float], list[float], list[int]] = ([], [], [])
    floor_pts: dict[str, tuple[list[float], list[float], list[int]]] = {a: ([], [], []) for a in labels}
    consts0: Constants | None = None
    rate: dict[str, Any] = {}
    strongest0 = "none"
    for si, seed in enumerate(plan.seeds):
        st = _setting(sc, seed, device)
        cs = st.constants(plan.alpha)
        consts0 = consts0 or cs

        def get(a: Any, d: Any, x: float, root: Any = None, seed: int = seed) -> tuple[Trajectory, bool]:
            return results[_canonical(plan, Job(seed, a, d, x, root)).key]

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
                "root_optimum_error": float(_norm(st.root_optimum(st.root) - st.w_star)),
                "no_attack_error": no_attack.final_error,
                "fltrust_worst_error": fl_worst,
                "strongest_attack": strongest,
                "initial_error": float(no_attack.errors[0]),
            }
        )
        # the root-size sweep: the root error at w* over every draw (Lemma 3's Delta1 term); the floors
        grad_star = st.grad(st.w_star)
        for n0 in plan.root_sizes:
            errs, opts = [], []
            floors: dict[str, list[float]] = {a: [] for a in labels}
            for draw in range(plan.draws):
                root = st.draw_root(n0, draw)
                errs.append(float(_norm(st.root_grad(st.w_star, root) - grad_star)))
                if draw < n_floor:
                    opts.append(float(_norm(st.root_optimum(root) - st.w_star)))
                    for a in plan.attacks:
                        e = get(a, fl_spec, top, (n0, draw))[0].final_error
                        floors[C.attack_label(a)].append(math.inf if e is None else e)
            done += 1
            progress("root-size sweep (root error)", done, total)
            for pts, ys in [(root_pts, errs)] + [(floor_pts[a], floors[a]) for a in labels]:
                pts[0].extend([float(n0)] * len(ys))
                pts[1].extend(ys)
                pts[2].extend([si] * len(ys))
            d1 = cs.delta1 * math.sqrt(cs.root_size / n0)
            root_rows.append(
                {
                    "seed": seed,
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
            )

    assert consts0 is not None
    floor_fits: dict[str, dict[str, Any]] = {}
    for a in labels:
        fit = loglog_slope(*floor_pts[a])
        fit.update(attack=a, fraction=top, draws=n_floor, meaning=_floor_meaning(fit))
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


def _floor_meaning(fit: Mapping[str, Any]) -> str:
    est, (lo, hi) = fit.get("estimate"), fit.get("ci95", [None, None])
    if est is None or lo is None or hi is None:
        return "not enough finite points to fit"
    if lo <= -0.5 <= hi:
        return (
            "the floor shrinks like |D0|^-1/2: under this attack FLTrust tracks the root data's own "
            "optimum, so the root set's size (the Delta1 term) sets the error"
        )
    if lo <= 0 <= hi:
        return (
            "the floor does not shrink with |D0|: it is set by what the root set does not control "
            "(the clients' fixed data and the attack's pull), not by the Delta1 term"
        )
    if hi < -0.5:
        return (
            "the floor shrinks faster than |D0|^-1/2 over this range "
            "(the attack's pull fades with a larger root set)"
        )
    if hi < 0:
        return (
            "the floor shrinks with |D0|, but slower than |D0|^-1/2: part of it comes from the root "
            "data (the Delta1 term), part from what a larger root set does not remove "
            "(the clients' fixed data and the attack's pull)"
        )
    return "the floor grows with |D0| over this range"


# -- the claims ----------------------------------------------------------------------------------
def _fmt(v: Any, spec: str = ".3g") -> str:
    return "null" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def claims(r: Mapping[str, Any]) -> list[dict[str, str]]:
    """Each claim with its status (holds / fails / vacuous / finding) and its figure."""
    out: list[dict[str, str]] = []
    c = r["constants"]

    def add(name: str, status: str, figure: str, detail: str = "") -> None:
        out.append({"claim": name, "status": status, "figure": figure, "detail": detail})

    add(
        "Theorem 1: ||w^t - w*|| <= (1-rho)^t ||w^0 - w*|| + 12 alpha Delta1 / rho",
        "vacuous" if r["theorem_vacuous"] else "holds",
        f"rho = {_fmt(r['rho'], '.4g')} (proof-supported, Delta2 = 0); "
        f"rho_literal = {_fmt(r['rho_literal'], '.4g')}",
        (
            "rho <= 0: the proof's recursion factor 1 - rho >= 1 never contracts, so the theorem "
            "guarantees nothing"
            + (
                "; rho_literal > 0 only because the printed formula uses Lemma 2's factor, which the "
                "proof establishes at alpha = mu/(2L^2) alone"
                if r["rho_literal"] is not None and r["rho_literal"] > 0
                else ""
            )
        )
        if r["theorem_vacuous"]
        else "rho > 0 at this alpha",
    )
    n = r["rounds_checked"]
    add(
        "Lemma 1: ||g - grad F|| <= 3 ||g0 - grad F|| + 2 ||grad F||",
        "holds" if r["lemma1_violations"] == 0 and n > 0 else "fails",
        f"{r['lemma1_violations']} violations in {n} FLTrust rounds; "
        f"max LHS/RHS = {_fmt(r['lemma1_max_ratio'])}",
    )
    add(
        "Lemma 2: ||w - alpha grad F(w) - w*|| <= sqrt(1 - mu^2/4L^2) ||w - w*|| at alpha = mu/2L^2",
        "holds" if r["lemma2_violations"] == 0 and n > 0 else "fails",
        f"{r['lemma2_violations']} violations; max LHS/RHS = {_fmt(r['lemma2_max_ratio'])}",
    )
    rs = r["root_error_slope"]
    lo, hi = rs["ci95"]
    ok = rs["estimate"] is not None and lo is not None and lo <= -0.5 <= hi and hi < 0
    add(
        "Lemma 3 (Delta1 term): root error at w* ~ |D0|^-1/2",
        "holds" if ok else "fails",
        f"slope {_fmt(rs['estimate'])} [{_fmt(lo)}, {_fmt(hi)}] over {rs['points']} root draws",
    )
    within = [row["within_2delta1"] for row in r["root_sweep"]]
    need = 1 - c["delta"] / 3
    add(
        "Lemma 3 at w*: root error <= 2 Delta1 w.p. >= 1 - delta/3 (sigma1 estimated)",
        "holds" if within and min(within) >= need else "fails",
        f"fraction within: min {_fmt(min(within) if within else None)} over root sizes (need {need:.4f}); "
        f"sigma1 = {_fmt(c['sigma1'])}, Delta1(|D0| = {c['root_size']}) = {_fmt(c['delta1'])}",
    )
    # behaviour (1): FLTrust within 1.5 x max(no-attack error, ||w_D0 - w*||)
    seeds = {p["seed"]: p for p in r["per_seed"]}
    worst_ratio, worst_at = 0.0, ""
    fl = r["settings"]["defenses"][0]
    for row in r["fractions"]:
        if row["defense"] != fl:
            continue
        p = seeds[row["seed"]]
        ref = max(p["no_attack_error"] or math.inf, p["root_optimum_error"])
        e = row["final_error"] if row["final_error"] is not None else math.inf
        ratio = e / ref
        if ratio > worst_ratio:
            worst_ratio, worst_at = ratio, f"{row['attack']} at {row['fraction']:g}"
    add(
        f"FLTrust's final error <= {WITHIN} x max(no-attack error, ||w_D0 - w*||), every attack and fraction",
        "holds" if worst_ratio <= WITHIN else "fails",
        f"worst ratio {_fmt(worst_ratio)} ({worst_at}); ||w_D0 - w*|| = {_fmt(r['root_optimum_error'])}, "
        f"no-attack error = {_fmt(r['per_seed'][0]['no_attack_error'])}",
    )
    # behaviour (1'): FedAvg and the median break past one half
    fracs = sorted({row["fraction"] for row in r["fractions"]})
    above = [x for x in fracs if x > 0.5]
    at = min(above, key=lambda x: abs(x - BREAK_FRACTION)) if above else None  # 0.6 when listed
    if at is not None and "sign_flip" in r["settings"]["attacks"]:
        parts, ok = [], True
        for name in ("fedavg", "median"):
            rows = [
                row
                for row in r["fractions"]
                if row["attack"] == "sign_flip" and row["fraction"] == at and row["defense"] == name
            ]
            for row in rows:
                worst = seeds[row["seed"]]["fltrust_worst_error"]
                e = row["final_error"]
                broke = row["status"] == "diverged" or (e is not None and e >= BREAK * worst)
                ok &= broke
                parts.append(f"{name} diverged" if e is None else f"{name} {_fmt(e)} ({_fmt(e / worst)}x)")
        if parts:
            add(
                f"FedAvg and median break under sign_flip at {at:g} (>= {BREAK:g}x FLTrust's worst)",
                "holds" if ok else "fails",
                "; ".join(parts) + f"; FLTrust's worst {_fmt(r['per_seed'][0]['fltrust_worst_error'])}",
            )
    lr = r["linear_rate"]
    lo, hi = lr.get("ci95", [None, None])
    add(
        "Linear convergence until the floor (FLTrust, no attack)",
        "finding",
        f"fitted rate {_fmt(lr.get('estimate'), '.4f')} [{_fmt(lo, '.4f')}, {_fmt(hi, '.4f')}] over "
        f"{lr.get('rounds_fitted')} rounds; Lemma 2's factor {_fmt(lr['lemma2_factor'], '.4f')}, "
        f"gradient descent's {_fmt(lr['gradient_descent_factor'], '.4f')}, the proof's 1 - rho "
        f"{_fmt(lr['recursion_factor'], '.4f')}",
    )
    fs = r["floor_slope"]
    lo, hi = fs["ci95"]
    others = "; ".join(
        f"{a}: {_fmt(f['estimate'])} [{_fmt(f['ci95'][0])}, {_fmt(f['ci95'][1])}]"
        for a, f in r.get("floor_slopes", {}).items()
        if a != fs["attack"]
    )
    add(
        f"Error floor vs |D0| (the strongest attack, {fs['attack']}, at {fs['fraction']:g})",
        "finding",
        f"slope {_fmt(fs['estimate'])} [{_fmt(lo)}, {_fmt(hi)}] over {fs['points']} trajectories",
        fs["meaning"] + (f". Other attacks at {fs['fraction']:g}: {others}" if others else ""),
    )
    return out


def verdict(r: Mapping[str, Any]) -> str:
    """The plain-words verdict."""
    failed = [c["claim"] for c in r["claims"] if c["status"] == "fails"]
    head = (
        f"Theorem 1 as proved is vacuous here: rho = {_fmt(r['rho'], '.4g')} <= 0, so its recursion never "
        "contracts and it promises no bound (the culprit is Lemma 1's 2||grad F|| term, which costs "
        "2 alpha L per round against a contraction gain of about alpha mu / 2)."
        if r["theorem_vacuous"]
        else f"Theorem 1 applies: rho = {_fmt(r['rho'], '.4g')} > 0."
    )
    tail = (
        " Its lemmas hold on every round checked, and the behaviour it aims at is real: under every "
        f"attack and fraction FLTrust's final error stays within {WITHIN:g} x max(its no-attack error, "
        "the root data's own optimum error), while FedAvg and the median break."
        if not failed
        else " Checks that failed: " + "; ".join(failed) + "."
    )
    return head + tail


# -- the command ---------------------------------------------------------------------------------
def cli_bound(args: argparse.Namespace) -> int:
    """``robustfl bound [SCENARIO] [--json PATH] [--plot PATH]``: 0 when the checks ran."""
    from pathlib import Path

    from ..cli import bound_render

    sc = load_scenario(args.scenario or DEFAULT_SCENARIO, getattr(args, "overrides", None))
    with bound_render.BoundProgress(quiet=bool(getattr(args, "quiet", False))) as progress:
        report = run_bound(
            sc,
            device=getattr(args, "device", "cpu") or "cpu",
            plugins=tuple(getattr(args, "plugin", []) or []),
            progress=progress,
        )
    if getattr(args, "json", None):
        p = Path(args.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(report, indent=1, allow_nan=False))
    if getattr(args, "plot", None):
        from .plot import plot_report

        plot_report(report, args.plot)
    bound_render.print_bound(report, quiet=bool(getattr(args, "quiet", False)))
    return 0
