"""The clean-run references a matrix's cells need: tasks without an exact optimum measure drift
from the model of the clean run (attack none, defense fedavg) of the same seed and sweep point.
Each is read from the store, else computed by the executor and kept in the store (``refs``
table), so a resumed sweep does not train it again; one that cannot be computed fails its cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..scenario import Scenario
from ..simulation.runner import build_problem, reference_key
from .executor import Executor, RefTask
from .plan import Job


def needs_reference(job: Job) -> bool:
    return build_problem(job.scenario, job.seed).optimum is None


def references(
    todo: Sequence[Job], db: Any, executor: Executor
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The clean-run reference models the cells need (from the store, else computed and stored),
    and the reason for each one that could not be computed (its cells then fail)."""
    need: dict[str, tuple[Scenario, int]] = {}
    for j in todo:
        if needs_reference(j):
            need.setdefault(reference_key(j.scenario, j.seed), (j.scenario, j.seed))
    refs: dict[str, np.ndarray] = {}
    errors: dict[str, str] = {}
    missing: list[RefTask] = []
    for key, (sc, seed) in need.items():
        got = db.get_ref(key) if db is not None else None
        if got is not None:
            refs[key] = got
        else:
            missing.append((key, sc, seed))
    if not missing:
        return refs, errors
    for (key, _, seed), answer in executor.references(missing):
        if isinstance(answer, str):
            errors[key] = answer
            continue
        refs[key] = answer
        if db is not None:
            db.put_ref(key, answer, {"seed": seed})
    return refs, errors
