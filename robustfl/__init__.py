"""robustfl: how far does a defended global model drift from where it should be, under which attack?

>>> import robustfl
>>> scenario = robustfl.load_scenario("quick")
>>> cell = robustfl.run(scenario, attack="sign_flip", defense="fltrust", seed=0)
>>> result = robustfl.run_matrix(scenario, workers=2, store="runs.db")
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__version__ = "0.1.0"

from . import attacks, defenses, tasks  # noqa: E402  (registries)
from .errors import ConfigError, RobustFLError  # noqa: E402
from .scenario import Scenario, check_seed, load_scenario  # noqa: E402
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
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any],
    attack: Any = None,
    defense: Any = None,
    seed: int = 0,
    *,
    allow_outside_guarantee: bool = False,
    device: str = "cpu",
) -> Cell:
    """Run one cell; ``attack``/``defense`` default to the scenario's [attack]/[defense] sections.
    ``scenario``: a :class:`Scenario`, or what :func:`load_scenario` takes (a name, a path, a dict).

    A name is the scenario's section when it names that component, else a ``matrix.attacks`` /
    ``matrix.defenses`` entry with that label, else the registered component; the scenario's
    ``attack.*`` / ``defense.*`` overrides apply to it (one it does not take is an error)."""
    from .simulation import components as C
    from .simulation.runner import simulate
    from .sweep.main_guard import leave_if_importing_main

    leave_if_importing_main()
    seed = check_seed("seed", seed)
    if not isinstance(allow_outside_guarantee, bool):
        raise ConfigError(f"allow_outside_guarantee must be True or False, got {allow_outside_guarantee!r}")
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    a = C.chosen_spec(sc, "attack", attack)
    d = C.chosen_spec(sc, "defense", defense)
    return simulate(sc, a, d, seed, allow_outside_guarantee=allow_outside_guarantee, device=device).cell


def run_matrix(
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any], **kwargs: Any
) -> MatrixResult:
    """Run (or resume, with ``store=``) the scenario's matrix; see robustfl.sweep.driver.run_matrix.

    Worker processes import the calling script again: call this under
    ``if __name__ == "__main__":`` (a top-level call raises ``MainGuardError`` saying so). Failed
    cells are in ``result.failed``; when there are any a ``RuntimeWarning`` says how many and why.
    """
    import warnings

    from .sweep.driver import run_matrix as _run_matrix
    from .sweep.jobs import failure_summary
    from .sweep.main_guard import MainGuardError

    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    try:
        result = _run_matrix(sc, **kwargs)
    except MainGuardError as exc:  # one short traceback ending in the message, pointing at the call
        raise MainGuardError(str(exc)) from None
    summary = failure_summary(result.cells)
    if summary is not None:
        warnings.warn(summary, RuntimeWarning, stacklevel=2)
    return result


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
