"""The bound command's plan: a scenario's ``[bound]`` section, validated (:class:`Plan`).

``robustfl bound`` needs the theorem's setting: the ridge task (its population objective is
exact), full participation and root data. The plan lists the Byzantine fractions, the root sizes,
the draws per root size (:func:`floor_draws` of them run whole FLTrust trajectories), the attacks
("none" first) and the defenses (FLTrust first) it sweeps, and the seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError
from ..scenario import Scenario, check_seed, count_of
from ..simulation import components as C

DEFAULT_SCENARIO = "fltrust-bound"
FLTRUST = "fltrust"


def floor_draws(draws: int) -> int:
    """Root draws per size and attack for the floor sweep (each a full FLTrust trajectory):
    ceil(draws / 80), at least 2 -- 3 for the default 200."""
    return min(draws, max(2, math.ceil(draws / 80)))


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
        for section, want in (("algorithm", "fedavg"), ("sharing", "full")):
            if sc.section(section)["name"] != want:  # the theorem's setting; it was silently not used
                raise ConfigError(
                    f"{section}.name must be {want!r} for the bound command (the theorem's setting), "
                    f"got {sc.section(section)['name']!r}"
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
            seeds.append(check_seed("bound.seeds", s))
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
