"""Replay federated training for one cell and measure the drift from the clean optimum.

A round, as data flows: select participants -> (sharing) this round's coordinates -> local
training of all participants at once (honest; Byzantine clients train on their own, possibly
poisoned, data) -> the server's reference update on its root data -> the attack replaces the
Byzantine rows -> the defense -> the algorithm's server step -> metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import tasks
from ..errors import ConfigError
from ..federation import create_algorithm, create_sharing
from ..scenario import Scenario, config_hash
from ..tasks.base import Partition, Problem
from ..types import Knowledge
from . import components as C
from .federated import FederatedStages, Measure
from .results import Cell
from .round import Round, run_rounds

_STREAMS = ("init", "byzantine", "participation", "train", "root", "attack", "defense", "poison", "sharing")
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


def byzantine_clients(clients: int, f: int, seed: int) -> Tensor:
    """The ids of a cell's f Byzantine clients among ``clients`` (stream ``byzantine``)."""
    return torch.randperm(clients, generator=C.named_generator(seed, "byzantine"))[:f]


def reference_key(scenario: Scenario, seed: int) -> str:
    return "ref-" + cell_key(scenario, "none", "fedavg", seed)


def check_device(device: str, what: str = "device") -> torch.device:
    """``device`` as a torch.device this process can use: one line (exit 2) naming ``what`` for a
    name torch does not know or CUDA that torch cannot see."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{what} {device!r}: expected cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "torch sees no GPU"
        raise ConfigError(f"{what} {device}: {why} (torch {torch.__version__}); use {what} cpu")
    return dev


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
        self.device = check_device(device)
        fed = scenario.section("federation")
        self.attack = C.build_attack(attack)
        self.defense = C.build_defense(defense)
        C.check_knowledge(self.attack, self.attack_label, scenario.section("threat")["knowledge"])
        self.num_clients = fed["clients"]
        self.per_round = max(1, math.floor(fed["participation"] * self.num_clients + 0.5))
        self.f_hat = scenario.assumed_count(self.per_round)
        why = self.defense.refusal(self.per_round, self.f_hat)
        if why is not None:  # a cost the rule refuses at this size: before any data is built
            raise ConfigError(f"defense {self.defense_label!r} refuses this setting: {why}")
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
            who = [f"defense {self.defense_label!r}"] if self.defense.needs_reference else []
            who += [f"attack {self.attack_label!r}"] if self.attack.knowledge & Knowledge.REFERENCE else []
            raise ConfigError(
                f"{' and '.join(who)} {'need' if len(who) > 1 else 'needs'} the server's root data (its "
                "reference update); set server.root_size > 0"
            )

    def _needs_reference(self) -> bool:
        return self.defense.needs_reference or bool(self.attack.knowledge & Knowledge.REFERENCE)

    # ------------------------------------------------------------------------------------
    def run(
        self,
        reference_model: Tensor | None = None,
        on_round: Callable[[int, int], None] | None = None,
        observe: Callable[[Round], None] | None = None,
    ) -> Outcome:
        """Replay the rounds; ``observe(r)`` sees each round's rows just before the defense."""
        start_time = time.perf_counter()
        fed = self.scenario.section("federation")
        threads_before = torch.get_num_threads()
        torch.set_num_threads(fed["threads"])
        try:
            cell = Cell(self.attack_label, self.defense_label, self.seed, outside_guarantee=self.outside)
            w = self._rounds(cell, reference_model, on_round, observe)
        finally:
            torch.set_num_threads(threads_before)
        cell.elapsed_s = time.perf_counter() - start_time
        return Outcome(cell, w)

    def _rounds(
        self,
        cell: Cell,
        reference_model: Tensor | None,
        on_round: Callable[[int, int], None] | None,
        observe: Callable[[Round], None] | None = None,
    ) -> Tensor:
        sc, p, dev = self.scenario, self.problem, self.device
        fed = sc.section("federation")
        dtype = p.dtype
        g = {name: C.named_generator(self.seed, name) for name in _STREAMS}

        k_total = self.num_clients
        f = 0 if self.attack.honest else sc.byzantine_count()
        byz_ids = byzantine_clients(k_total, f, self.seed)
        is_byz = torch.zeros(k_total, dtype=torch.bool)
        is_byz[byz_ids] = True

        # data, on the device; Byzantine clients' data poisoned once, clean data kept for F
        data = tuple(t.to(dev) for t in p.client_data)
        mask = p.client_mask.to(dev)
        if self.attack.poisons_data and f > 0:
            data = self._poison(data, mask, byz_ids, g["poison"])
        root = tuple(t.to(dev)[None] for t in p.root_data) if p.root_data is not None else None
        root_mask = p.root_mask.to(dev)[None] if p.root_mask is not None else None

        w = p.init(g["init"], fed["init_scale"]).to(dev)
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
        self.sharing.setup(num_clients=k_total, w0=w, generator=g["sharing"])
        self.defense.reset()
        rounds = fed["rounds"]
        measure = Measure(
            cell,
            problem=p,
            w_ref=w_ref,
            d0=d0,
            f_ref=f_ref,
            rounds=rounds,
            every=sc.section("metrics")["every"],
            backdoor=self._backdoor_inputs(),
            sybil_rows=self._sybil_rows,
            stats=lambda: {"algorithm": self.algorithm.stats(), "sharing": self.sharing.stats()},
            on_round=on_round,
        )
        stages = FederatedStages(
            problem=p,
            attack=self.attack,
            attack_label=self.attack_label,
            defense=self.defense,
            defense_label=self.defense_label,
            algorithm=self.algorithm,
            sharing=self.sharing,
            fed=fed,
            per_round=self.per_round,
            assumed=sc.assumed_count,
            is_byz=is_byz,
            data=data,
            mask=mask,
            num_samples=p.num_samples.to(dev),
            root=root,
            root_mask=root_mask,
            granted=Knowledge.grant(sc.section("threat")["knowledge"]),
            generators=g,
            measure=measure,
            device=dev,
            observe=observe,
        )
        w, _ = run_rounds(stages, w, rounds)
        cell.final = dict(cell.rounds[-1]) if cell.rounds else {}
        return w

    # ------------------------------------------------------------------------------------
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
        if not self.attack.backdoor or self.problem.test_data is None:
            return None
        x, y = self.problem.test_data
        target = int(self.attack.target_label)
        keep = y != target
        xt = self.attack.trigger(x[keep].clone())
        return xt.to(self.device), torch.full((int(keep.sum()),), target, dtype=y.dtype, device=self.device)

    def _sybil_rows(self, byz: Tensor) -> Tensor | None:
        n_byz = int(byz.sum())
        if n_byz == 0 or not self.attack.sybil:
            return None
        sel = torch.zeros_like(byz)
        sel[byz] = self.attack.sybil_rows(n_byz).to(byz.device)
        return sel


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
    t_check = convergence.checkpoint_round(rounds)
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
            error=out.cell.error or f"the clean run ended {out.cell.status}",
        )
    w0 = seen["w0"]
    w_check = w0 if t_check == 0 else seen["w_check"]
    w_ref = exact if exact is not None else w_final
    value = convergence.relative_distance(w_check, w0, w_ref)
    final = convergence.relative_distance(w_final, w0, exact) if exact is not None else None
    return w_final, convergence.verdict(
        value, rounds=rounds, reference=reference, seed=seed, sweep=sweep, final_relative_drift=final,
    )
