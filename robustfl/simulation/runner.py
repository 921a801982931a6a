"""Replay federated training for one cell and measure the drift from the clean optimum.

A round, as data flows: select participants -> (sharing) this round's coordinates -> local
training of all participants at once (honest; Byzantine clients train on their own, possibly
poisoned, data) -> the server's reference update on its root data -> the attack replaces the
Byzantine rows -> the defense -> the algorithm's server step -> metrics.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import tasks
from ..errors import ConfigError
from ..federation import Algorithm, create_algorithm, create_sharing
from ..kernels import row_norms
from ..scenario import Scenario, config_hash
from ..tasks.base import Partition, Problem
from ..types import AttackContext, DefenseContext, Knowledge
from . import components as C
from .engine import gather_clients, local_train
from .metrics import round_metrics
from .results import Cell, clean_metrics

DIVERGENCE_FACTOR = 1e6
_PROBLEM_CACHE: dict[str, Problem] = {}


@dataclass
class Outcome:
    cell: Cell
    final_model: Tensor


def problem_key(scenario: Scenario, seed: int) -> str:
    d = scenario.data
    return config_hash(
        {
            "task": d["task"],
            "partition": d["partition"],
            "clients": d["federation"]["clients"],
            "server": d["server"],
            "seed": seed,
            "base": scenario.base_dir,
        }
    )


def build_problem(scenario: Scenario, seed: int) -> Problem:
    key = problem_key(scenario, seed)
    if key in _PROBLEM_CACHE:
        return _PROBLEM_CACHE[key]
    name, params = scenario.component("task")
    task = tasks.create(name, **params)
    part = Partition(**scenario.section("partition"))
    problem = task.build(
        clients=scenario.section("federation")["clients"],
        partition=part,
        root_size=scenario.section("server")["root_size"],
        root_bias=scenario.section("server")["root_bias"],
        generator=C.named_generator(seed, "task"),
        base_dir=scenario.base_dir,
    )
    if len(_PROBLEM_CACHE) > 8:
        _PROBLEM_CACHE.clear()
    _PROBLEM_CACHE[key] = problem
    return problem


def cell_config(scenario: Scenario, attack: C.Spec, defense: C.Spec, seed: int) -> dict[str, Any]:
    """Everything that determines a cell's result (hashed into its key)."""
    d = {k: v for k, v in scenario.data.items() if k not in ("matrix", "bound", "attack", "defense")}
    if d.get("metrics") == {"every": 1}:  # the default (every round, as before the key existed)
        del d["metrics"]
    return {"scenario": d, "attack": attack, "defense": defense, "seed": seed, "schema": 1}


def cell_key(scenario: Scenario, attack: C.Spec, defense: C.Spec, seed: int) -> str:
    return config_hash(cell_config(scenario, attack, defense, seed))


def reference_key(scenario: Scenario, seed: int) -> str:
    return "ref-" + cell_key(scenario, "none", "fedavg", seed)


class Simulation:
    """One cell's setup, validated before round 1; :meth:`run` replays the rounds."""

    def __init__(
        self,
        scenario: Scenario,
        attack: C.Spec,
        defense: C.Spec,
        seed: int,
        *,
        allow_outside_guarantee: bool = False,
        device: str = "cpu",
    ) -> None:
        self.scenario, self.seed = scenario, seed
        self.attack_spec, self.defense_spec = attack, defense
        self.attack_label, self.defense_label = C.attack_label(attack), C.defense_label(defense)
        self.device = torch.device(device)
        fed = scenario.section("federation")
        self.attack = C.build_attack(attack)
        self.defense = C.build_defense(defense)
        C.check_knowledge(self.attack, self.attack_label, scenario.section("threat")["knowledge"])
        self.num_clients = fed["clients"]
        self.per_round = max(1, math.floor(fed["participation"] * self.num_clients + 0.5))
        self.f_hat = scenario.assumed_count(self.per_round)
        self.outside = C.check_guarantee(
            self.defense, self.defense_label, self.per_round, self.f_hat, allow_outside_guarantee
        )
        alg_name, alg_params = scenario.component("algorithm")
        self.algorithm = create_algorithm(alg_name, alg_params)
        sh_name, sh_params = scenario.component("sharing")
        self.sharing = create_sharing(sh_name, sh_params, seed=seed)
        self.problem = build_problem(scenario, seed)
        C.setup_attack(self.attack, self.attack_label, self.problem.info)
        if self._needs_reference() and self.problem.root_data is None:
            raise ConfigError(
                f"defense {self.defense_label!r} or attack {self.attack_label!r} needs the server's root "
                "data; set server.root_size > 0"
            )

    def _needs_reference(self) -> bool:
        name = C.spec_name(self.defense_spec)
        return name == "fltrust" or bool(
            getattr(self.attack, "knowledge", Knowledge.OWN) & Knowledge.REFERENCE
        )

    # ------------------------------------------------------------------------------------
    def run(
        self, reference_model: Tensor | None = None, on_round: Callable[[int, int], None] | None = None
    ) -> Outcome:
        start_time = time.perf_counter()
        fed = self.scenario.section("federation")
        threads_before = torch.get_num_threads()
        torch.set_num_threads(fed["threads"])
        try:
            cell = Cell(self.attack_label, self.defense_label, self.seed, outside_guarantee=self.outside)
            w = self._rounds(cell, reference_model, on_round)
        finally:
            torch.set_num_threads(threads_before)
        cell.elapsed_s = time.perf_counter() - start_time
        return Outcome(cell, w)

    def _rounds(
        self, cell: Cell, reference_model: Tensor | None, on_round: Callable[[int, int], None] | None
    ) -> Tensor:
        sc, p, dev = self.scenario, self.problem, self.device
        fed = sc.section("federation")
        dtype = p.dtype
        seed = self.seed
        g_init, g_byz = C.named_generator(seed, "init"), C.named_generator(seed, "byzantine")
        g_part, g_train = C.named_generator(seed, "participation"), C.named_generator(seed, "train")
        g_root, g_attack = C.named_generator(seed, "root"), C.named_generator(seed, "attack")
        g_def, g_poison = C.named_generator(seed, "defense"), C.named_generator(seed, "poison")
        g_share = C.named_generator(seed, "sharing")

        k_total = self.num_clients
        is_attack = self.attack_label != "none" and C.spec_name(self.attack_spec) != "none"
        f = sc.byzantine_count() if is_attack else 0
        byz_ids = torch.randperm(k_total, generator=g_byz)[:f]
        is_byz = torch.zeros(k_total, dtype=torch.bool)
        is_byz[byz_ids] = True

        # data, on the device; Byzantine clients' data poisoned once, clean data kept for F
        data = tuple(t.to(dev) for t in p.client_data)
        mask = p.client_mask.to(dev)
        if getattr(self.attack, "poisons_data", False) and f > 0:
            data = self._poison(data, mask, byz_ids, g_poison)
        num_samples = p.num_samples.to(dev)
        root = tuple(t.to(dev)[None] for t in p.root_data) if p.root_data is not None else None
        root_mask = p.root_mask.to(dev)[None] if p.root_mask is not None else None

        w = p.init(g_init, fed["init_scale"]).to(dev)
        w0 = w.clone()
        if p.optimum is not None:
            w_ref, cell.reference = p.optimum.to(dev, dtype), "exact"
        elif reference_model is not None:
            w_ref, cell.reference = reference_model.to(dev, dtype), "clean_run"
        else:
            w_ref, cell.reference = None, "clean_run"
        d0 = float(torch.linalg.vector_norm((w0 - w_ref).double())) if w_ref is not None else float("nan")
        f_ref = p.objective(w_ref) if w_ref is not None else float("nan")

        self.algorithm.setup(num_clients=k_total, dim=p.dim, dtype=dtype, device=dev)
        self.sharing.setup(num_clients=k_total, w0=w, generator=g_share)
        if hasattr(self.defense, "reset"):
            self.defense.reset()
        granted = Knowledge.grant(sc.section("threat")["knowledge"])
        steps, lr, bsz = fed["local_steps"], fed["local_lr"], fed["batch_size"]
        rounds = fed["rounds"]
        every = sc.section("metrics")["every"]
        backdoor_eval = self._backdoor_inputs()
        # Full batch: the server's root update rides along as one more row of the clients' vmap.
        n_max = mask.shape[1]
        merged = (
            root is not None
            and root_mask is not None
            and root_mask.shape[1] <= n_max
            and (bsz <= 0 or bsz >= max(int(mask.sum(1).max()), int(root_mask.sum())))
        )
        if merged:
            assert root is not None and root_mask is not None
            pad = n_max - root_mask.shape[1]
            data = tuple(
                torch.cat([t, torch.nn.functional.pad(r, (0, 0) * (r.ndim - 2) + (0, pad))], 0)
                for t, r in zip(data, root, strict=True)
            )
            mask = torch.cat([mask, torch.nn.functional.pad(root_mask, (0, pad))], 0)
            root_id = torch.tensor([k_total], device=dev)

        has_extra = type(self.algorithm).extra_grad is not Algorithm.extra_grad
        for t in range(rounds):
            if self.per_round == k_total:
                ids = torch.arange(k_total)
            else:
                ids = torch.randperm(k_total, generator=g_part)[: self.per_round].sort().values
            ids_dev = ids.to(dev)
            byz = is_byz[ids].to(dev)
            coords = self.sharing.begin_round(t, w, ids_dev)

            train_ids = torch.cat([ids_dev, root_id]) if merged else ids_dev
            if merged and self.sharing.common_start:  # all rows start at w: no (S, P) concatenation
                train_start = w.expand(len(ids) + 1, -1).clone()  # trained in place
                start = w.expand(len(ids), -1)  # the start points, untouched by training
            else:
                start = self.sharing.start_points(w, ids_dev)
                # trained in place: keep the start points apart when the algorithm reads them
                own_copy = start.clone() if has_extra and not merged else start
                train_start = torch.cat([start, w[None]]) if merged else own_copy

            def extra(theta: Tensor, start: Tensor = start, ids_dev: Tensor = ids_dev) -> Tensor | None:
                if not merged:
                    return self.algorithm.extra_grad(theta, start, ids_dev)
                e = self.algorithm.extra_grad(theta[:-1], start, ids_dev)
                return None if e is None else torch.cat([e, torch.zeros_like(theta[-1:])])

            theta = local_train(
                p.loss,
                train_start,
                gather_clients(data, train_ids),
                mask.index_select(0, train_ids),
                steps=steps,
                lr=lr,
                batch_size=bsz,
                generator=g_train,
                extra_grad=extra if has_extra else None,
                inplace=True,
                point=w if self.sharing.common_start else None,
            )
            reference = None
            if merged:
                g0 = theta[-1] - w
                theta = theta[:-1]
                reference = self.sharing.restrict(g0)
            elif root is not None and root_mask is not None:
                g0 = (
                    local_train(
                        p.loss, w[None], root, root_mask, steps=steps, lr=lr, batch_size=bsz,
                        generator=g_root, point=w,
                    )[0]
                    - w
                )
                reference = self.sharing.restrict(g0)
            rows = self.sharing.rows(theta, w, ids_dev)
            dctx = DefenseContext(
                round=t,
                global_model=self.sharing.restrict(w),
                assumed_byzantine=self.f_hat if self.per_round == k_total else sc.assumed_count(len(ids)),
                client_ids=ids_dev,
                num_samples=num_samples.index_select(0, ids_dev),
                reference=reference,
                coordinates=coords,
                generator=g_def,
            )
            updates = rows
            n_byz = int(byz.sum())
            attack_stats: dict[str, float] = {}
            if n_byz > 0:  # data-poisoning attacks return their trained rows (a composite may boost them)
                updates = self._attack(rows, byz, dctx, reference, t, len(ids), w, granted, g_attack)
                attack_stats = dict(getattr(self.attack, "last_stats", {}) or {})
            agg = self.defense(updates, dctx)
            delta = self.sharing.expand(agg.vector.to(dtype))
            valid = torch.isfinite(row_norms(updates))
            w_new = self.algorithm.server_step(
                w, delta, rows=updates, ids=ids_dev, valid=valid, server_lr=fed["server_lr"]
            )
            self.sharing.end_round(w, w_new, int(updates.shape[0]))  # every row received counts
            w = w_new
            diverged = self._diverged(w, w_ref, d0)
            if (t + 1) % every and t + 1 < rounds and not diverged:
                if on_round is not None:
                    on_round(t + 1, rounds)
                continue  # metrics.every: this round is not measured (absent from `rounds`)
            m = round_metrics(
                t + 1,
                w,
                w_ref,
                d0,
                f_ref,
                p,
                agg,
                updates,
                byz,
                backdoor_eval,
                sybil_rows=self._sybil_rows(byz, n_byz),
            )
            m["defense"] = dict(agg.stats)
            m["algorithm"] = self.algorithm.stats()
            m["sharing"] = self.sharing.stats()
            m["attack"] = attack_stats
            cell.rounds.append(clean_metrics(m))
            if on_round is not None:
                on_round(t + 1, rounds)
            if diverged:
                cell.status = "diverged"
                cell.error = (
                    f"model diverged at round {t + 1} (non-finite or norm past 1e6 x initial distance)"
                )
                break
        cell.final = dict(cell.rounds[-1]) if cell.rounds else {}
        return w

    # ------------------------------------------------------------------------------------
    def _attack(
        self,
        rows: Tensor,
        byz: Tensor,
        dctx: DefenseContext,
        reference: Tensor | None,
        t: int,
        k: int,
        w: Tensor,
        granted: Knowledge,
        g_attack: torch.Generator,
    ) -> Tensor:
        own = rows[byz]  # boolean indexing copies: the attack cannot touch the rows
        oracle = None
        if Knowledge.ORACLE in granted:
            defense, gen_state = self.defense, dctx.generator.get_state()

            def oracle(candidate: Tensor) -> Any:
                trial = rows.clone()
                trial[byz] = candidate.to(rows.dtype)
                g = torch.Generator()
                g.set_state(gen_state)
                return copy.deepcopy(defense)(trial, DefenseContext(**{**dctx.__dict__, "generator": g}))

        actx = AttackContext(
            own=own,
            round=t,
            num_clients=k,
            global_model=self.sharing.restrict(w).clone(),
            generator=g_attack,
            honest=rows[~byz] if Knowledge.HONEST in granted else None,
            reference=reference.clone() if reference is not None and Knowledge.REFERENCE in granted else None,
            oracle=oracle,
        )
        mal = self.attack(actx)
        if not isinstance(mal, Tensor) or tuple(mal.shape) != tuple(own.shape):
            shape = tuple(mal.shape) if isinstance(mal, Tensor) else type(mal).__name__
            raise RuntimeError(f"attack {self.attack_label!r} returned {shape}, expected {tuple(own.shape)}")
        rows[byz] = mal.to(rows.dtype)  # the engine's fresh rows: replaced in place
        return rows

    def _poison(
        self, data: tuple[Tensor, ...], mask: Tensor, byz_ids: Tensor, g: torch.Generator
    ) -> tuple[Tensor, ...]:
        x, y = data[0].clone(), data[1].clone()
        for k in byz_ids.tolist():  # setup only, once per run: not the round's hot path
            n = int(mask[k].sum())
            px, py = self.attack.poison(x[k, :n], y[k, :n], g)
            x[k, :n], y[k, :n] = px.to(x.dtype), py.to(y.dtype)
        return (x, y, *data[2:])

    def _backdoor_inputs(self) -> tuple[Tensor, Tensor] | None:
        if not hasattr(self.attack, "trigger") or self.problem.test_data is None:
            return None
        x, y = self.problem.test_data
        target = int(self.attack.target_label)
        keep = y != target
        xt = self.attack.trigger(x[keep].clone())
        return xt.to(self.device), torch.full((int(keep.sum()),), target, dtype=y.dtype, device=self.device)

    def _sybil_rows(self, byz: Tensor, n_byz: int) -> Tensor | None:
        if n_byz == 0 or not hasattr(self.attack, "sybil_rows"):
            return None
        sel = torch.zeros_like(byz)
        sel[byz] = self.attack.sybil_rows(n_byz).to(byz.device)
        return sel

    @staticmethod
    def _diverged(w: Tensor, w_ref: Tensor | None, d0: float) -> bool:
        n = float(torch.linalg.vector_norm(w.double()))
        if not math.isfinite(n):
            return True
        if w_ref is None or not math.isfinite(d0):
            return n > 1e12
        return float(torch.linalg.vector_norm((w - w_ref).double())) > DIVERGENCE_FACTOR * max(d0, 1e-12)


def simulate(
    scenario: Scenario,
    attack: C.Spec,
    defense: C.Spec,
    seed: int,
    *,
    reference_model: Tensor | None = None,
    allow_outside_guarantee: bool = False,
    device: str = "cpu",
    on_round: Callable[[int, int], None] | None = None,
) -> Outcome:
    """Run one cell. Without an exact optimum and without ``reference_model``, the clean run
    (attack none, defense fedavg, same seed) is computed first and used as w*."""
    sim = Simulation(
        scenario, attack, defense, seed, allow_outside_guarantee=allow_outside_guarantee, device=device
    )
    if sim.problem.optimum is None and reference_model is None:
        reference_model = clean_reference(scenario, seed, device=device)
    return sim.run(reference_model, on_round)


def clean_reference(scenario: Scenario, seed: int, device: str = "cpu") -> Tensor:
    """The clean run's final model: the reference w* of tasks without a closed form."""
    sim = Simulation(scenario, "none", "fedavg", seed, allow_outside_guarantee=True, device=device)
    out = sim.run(reference_model=torch.zeros(sim.problem.dim, dtype=sim.problem.dtype))
    if out.cell.status != "ok":
        raise ConfigError(
            f"the clean run (attack none, defense fedavg, seed {seed}) diverged: {out.cell.error}"
        )
    return out.final_model


def clean_convergence(
    scenario: Scenario,
    seed: int,
    device: str = "cpu",
    sweep: dict[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Any]]:
    """The clean run (attack none, defense fedavg, ``seed``) and its convergence verdict
    (:mod:`robustfl.simulation.convergence`): ``(w_T, verdict)``. For a task without an exact
    optimum w_T is the reference w* of its cells (what :func:`clean_reference` returns, from the
    same run). The model at round floor(0.9 T) is kept as the rounds pass (the algorithm's server
    step is observed; the round loop is the usual one)."""
    from . import convergence

    sim = Simulation(scenario, "none", "fedavg", seed, allow_outside_guarantee=True, device=device)
    rounds = int(scenario.section("federation")["rounds"])
    every = int(scenario.section("metrics")["every"])
    t_check = convergence.checkpoint_round(rounds, every)
    seen: dict[str, Any] = {"steps": 0, "w0": None, "w_check": None}
    server_step = sim.algorithm.server_step

    def observed(w: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if seen["w0"] is None:
            seen["w0"] = w.detach().double().cpu().clone()
        w_new = server_step(w, *args, **kwargs)
        seen["steps"] += 1
        if seen["steps"] == t_check:
            seen["w_check"] = w_new.detach().double().cpu().clone()
        return w_new

    sim.algorithm.server_step = observed  # type: ignore[method-assign]
    exact = sim.problem.optimum
    zeros = torch.zeros(sim.problem.dim, dtype=sim.problem.dtype)
    out = sim.run(reference_model=None if exact is not None else zeros)
    reference = "exact" if exact is not None else "clean_run"
    w_final = out.final_model
    if out.cell.status != "ok" or seen["w0"] is None:
        return w_final, convergence.verdict(
            None,
            rounds=rounds,
            reference=reference,
            seed=seed,
            sweep=sweep,
            every=every,
            error=out.cell.error or f"the clean run ended {out.cell.status}",
        )
    w0 = seen["w0"]
    w_check = w0 if t_check == 0 else seen["w_check"]
    w_ref = exact if exact is not None else w_final
    value = convergence.relative_distance(w_check, w0, w_ref)
    final = convergence.relative_distance(w_final, w0, exact) if exact is not None else None
    return w_final, convergence.verdict(
        value, rounds=rounds, reference=reference, seed=seed, sweep=sweep, final_relative_drift=final,
        every=every,
    )
