"""robustfl: how far does a defended global model drift from where it should be, under which attack?

>>> import robustfl
>>> scenario = robustfl.load_scenario("quick")
>>> cell = robustfl.run(scenario, attack="sign_flip", defense="fltrust", seed=0)
>>> result = robustfl.run_matrix(scenario, workers=2, store="runs.db")
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

from . import attacks, defenses, tasks  # noqa: E402  (registries)
from .errors import RobustFLError  # noqa: E402
from .scenario import Scenario, load_scenario  # noqa: E402
from .simulation.results import Cell, MatrixResult  # noqa: E402
from .types import (  # noqa: E402
    Aggregate,
    Attack,
    AttackContext,
    Defense,
    DefenseContext,
    Knowledge,
    TaskInfo,
)


def run(
    scenario: Scenario | str,
    attack: Any = None,
    defense: Any = None,
    seed: int = 0,
    *,
    allow_outside_guarantee: bool = False,
    device: str = "cpu",
) -> Cell:
    """Run one cell; ``attack``/``defense`` default to the scenario's [attack]/[defense] sections."""
    from .simulation.runner import simulate

    sc = load_scenario(scenario) if isinstance(scenario, str) else scenario
    a = attack if attack is not None else _section_spec(sc, "attack")
    d = defense if defense is not None else _section_spec(sc, "defense")
    return simulate(sc, a, d, seed, allow_outside_guarantee=allow_outside_guarantee, device=device).cell


def _section_spec(sc: Scenario, section: str) -> Any:
    sec = dict(sc.section(section))
    return sec["name"] if len(sec) == 1 else sec


def run_matrix(scenario: Scenario | str, **kwargs: Any) -> MatrixResult:
    """Run (or resume, with ``store=``) the scenario's matrix; see simulation.matrix.run_matrix."""
    from .simulation.matrix import run_matrix as _run_matrix

    sc = load_scenario(scenario) if isinstance(scenario, str) else scenario
    return _run_matrix(sc, **kwargs)


__all__ = [
    "Aggregate",
    "Attack",
    "AttackContext",
    "Cell",
    "Defense",
    "DefenseContext",
    "Knowledge",
    "MatrixResult",
    "RobustFLError",
    "Scenario",
    "TaskInfo",
    "__version__",
    "attacks",
    "defenses",
    "load_scenario",
    "run",
    "run_matrix",
    "tasks",
]
