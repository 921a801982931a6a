"""Conformance checks and Hypothesis strategies for robustfl's own tests and for plugin authors.

>>> from robustfl.testing import check_attack, check_defense
>>> check_attack(MyAttack())          # the attack contract: shape, dtype, knowledge, no mutation, ...
>>> check_defense(MyRule())           # universal checks + the rule's declared ``properties``

* :func:`check_attack`, :func:`make_context` -- from :mod:`robustfl.testing.attacks` (plain torch);
  ``make_context`` builds a synthetic :class:`~robustfl.types.AttackContext`.
* :func:`check_defense`, :data:`PROPERTIES` -- from :mod:`robustfl.testing.defenses`.
* :func:`update_matrices`, :func:`with_byzantine`, :func:`scales`, :func:`gaussian_rows`,
  :data:`SCALES` -- Hypothesis strategies, from :mod:`robustfl.testing.strategies`.

Hypothesis is an optional extra (``pip install 'robustfl[testing]'``): ``import robustfl.testing``
and :func:`check_attack` and :func:`check_defense` work without it; only the strategies need it,
are imported on first use, and say what to install when Hypothesis is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .attacks import check_attack, make_context

if TYPE_CHECKING:  # the lazy names, for type checkers
    from .defenses import PROPERTIES, check_defense
    from .strategies import SCALES, gaussian_rows, scales, update_matrices, with_byzantine

_LAZY = {
    "check_defense": "defenses",
    "PROPERTIES": "defenses",
    "update_matrices": "strategies",
    "with_byzantine": "strategies",
    "scales": "strategies",
    "gaussian_rows": "defenses",
    "SCALES": "strategies",
}

__all__ = [
    "PROPERTIES",
    "SCALES",
    "check_attack",
    "check_defense",
    "gaussian_rows",
    "make_context",
    "scales",
    "update_matrices",
    "with_byzantine",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        mod = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == "hypothesis" or (exc.name or "").startswith("hypothesis."):
            raise ImportError(
                f"robustfl.testing.{name} needs Hypothesis: pip install 'robustfl[testing]'"
            ) from exc
        raise
    value = getattr(mod, name)
    globals()[name] = value  # import once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
