"""A matrix's plan: every cell (attack x defense x seed x sweep point) as a :class:`Job`, validated.

:func:`plan` checks every name and parameter first (cheap, before any data is built), then sets
each (attack, defense) pair up once per sweep point (knowledge grants, a rule below its
``min_clients``: exit 2 before anything runs). :func:`set_up` is one cell's validated setup; a
scenario too large for this machine is a one-line :class:`~robustfl.errors.ConfigError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, RobustFLError
from ..scenario import Scenario, check_seed
from ..simulation import components as C
from ..simulation.runner import Simulation, cell_key


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
    # names given (--attacks/--defenses) are first the labels of the scenario's entries
    attacks = C.pick_entries(attacks, mx["attacks"], "attack") if attacks is not None else list(mx["attacks"])
    defenses = (
        C.pick_entries(defenses, mx["defenses"], "defense") if defenses is not None else list(mx["defenses"])
    )
    if isinstance(seeds, str | bytes) or (seeds is not None and not isinstance(seeds, Sequence)):
        raise ConfigError(f"seeds must be a list of integers, got {seeds!r}")
    seeds = [check_seed("seeds", s) for s in (seeds if seeds is not None else mx["seeds"])]
    for what, items in (("seeds", seeds), ("attacks", attacks), ("defenses", defenses)):
        if not items:
            raise ConfigError(f"a matrix needs at least one of its {what}, got none")
    twice = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
    if twice is not None:
        raise ConfigError(f"seeds lists {twice} twice: each seed is one cell per attack and defense")
    points = sweep_points(scenario)
    for key in ("attack.name", "attack.label", "defense.name", "defense.label"):
        if any(key in point for point in points):
            raise ConfigError(
                f"matrix.sweep key {key!r} would change nothing: a matrix runs matrix.{key.split('.')[0]}s; "
                f"list the variants there (with labels)"
            )
    for a in C.apply_settings(attacks, "attack", scenario.settings):  # every name and parameter
        C.build_attack(a)  # first: cheap, and before any data is built
    for d in C.apply_settings(defenses, "defense", scenario.settings):
        C.build_defense(d)
    jobs: list[Job] = []
    for point in points:
        sc = scenario.with_values(point) if point else scenario
        # --set attack.p / defense.p (and sweep keys like attack.z) apply to the entries taking p
        settings = {**scenario.settings, **point}
        checked: dict[tuple[str, str], bool] = {}
        for a in C.apply_settings(attacks, "attack", settings):
            for d in C.apply_settings(defenses, "defense", settings):
                sig = (repr(a), repr(d))
                if sig not in checked:
                    checked[sig] = set_up(sc, a, d, seeds[0], allow_outside_guarantee).outside
                for s in seeds:
                    jobs.append(Job(cell_key(sc, a, d, s), sc, a, d, s, dict(point), checked[sig]))
    labels = [(j.label) for j in jobs]
    if len(set(labels)) != len(labels):
        dup = next(lbl for lbl in labels if labels.count(lbl) > 1)
        raise RobustFLError(f'two cells share the label {dup!r}; give one a distinct label = "..."')
    return jobs


_TOO_LARGE = (
    "can't allocate memory",
    "not enough memory",
    "out of memory",
    "Overflow when unpacking",
    "size calculation overflowed",  # torch: a tensor of more than 2**63 - 1 bytes
    "cannot be represented as a SymInt",  # torch: a size past 2**63 - 1 (e.g. arange(dim))
)


def set_up(
    sc: Scenario, attack: C.Spec, defense: C.Spec, seed: int, allow_outside: bool, device: str = "cpu"
) -> Simulation:
    """One cell's validated setup. A scenario whose data cannot be built at all (a size past what
    this machine can allocate, or past a 64-bit count) is bad input: a one-line ConfigError."""
    try:
        return Simulation(sc, attack, defense, seed, allow_outside_guarantee=allow_outside, device=device)
    except (MemoryError, OverflowError, RuntimeError, TypeError) as exc:
        text = str(exc).strip()
        if isinstance(exc, RuntimeError | TypeError) and not any(m in text for m in _TOO_LARGE):
            raise
        what = f"{C.attack_label(attack)} x {C.defense_label(defense)}"
        detail = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
        if "allocate" in detail:
            detail = detail[detail.find("you tried") :] if "you tried" in detail else detail
        raise ConfigError(
            f"cannot set up the cell {what}: the scenario is too large for this machine ({detail}); "
            "check federation.clients, server.root_size and the task's sizes"
        ) from None
