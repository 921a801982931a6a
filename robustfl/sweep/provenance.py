"""A matrix run's provenance: the versions, platform, scenario hash and overrides it ran with,
and where each of its attacks and defenses came from (built in, an entry point, a plugin file).
The driver writes it with the run into the store; the reports show it."""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..scenario import Scenario
from ..simulation import components as C
from .plan import Job


def provenance(scenario: Scenario, jobs: Sequence[Job]) -> dict[str, Any]:
    from .. import __version__, attacks, defenses

    origins: dict[str, str] = {}
    for j in jobs:
        for reg, spec in ((attacks, j.attack), (defenses, j.defense)):
            name = C.spec_name(spec)
            origins.setdefault(name, reg.origin(name))
    return {
        "robustfl": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "scenario_hash": scenario.hash(),
        "scenario_path": str(scenario.path) if scenario.path else None,
        "overrides": list(scenario.overrides),
        "origins": origins,
        "created": time.time(),
    }
