"""One validation helper for every component's parameters (public: plugins may use it too).

A component -- an attack, defense, pre-aggregator, task, algorithm or sharing scheme -- keeps its
parameters in its own dataclass and checks them in ``__post_init__`` with these functions, which
raise :class:`~robustfl.errors.ParameterError` with one message format::

    <component>: parameter <name> must be <constraint>, got <value!r>

where ``component`` is the kind and the registered name, e.g. ``"attack alie"``, ``"defense krum"``,
``"pre-aggregator clipping"``, ``"task mnist"``, ``"algorithm feddyn"``, ``"sharing psfed"``.

* :func:`number` -- an int or float (never a bool) within optional bounds; finite unless
  ``finite=False``; with ``integer=True`` an int, returned as is, else returned as a float.
  Constraints read "an integer >= 1", "a finite number > 0", "a finite number >= 0 and <= 1".
* :func:`choice` -- one of a fixed set: "one of 'unit', 'sign', 'std'".
* :func:`boolean` -- True or False: "a boolean".
* :func:`error` -- the error itself, for a constraint none of the above states.

This module is the package's floor: it imports the standard library and ``robustfl.errors`` only.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, overload

from .errors import ParameterError

__all__ = ["boolean", "choice", "error", "number"]

T = TypeVar("T")


def error(component: str, name: str, constraint: str, value: Any) -> ParameterError:
    """``ParameterError("<component>: parameter <name> must be <constraint>, got <value!r>")``."""
    return ParameterError(f"{component}: parameter {name} must be {constraint}, got {value!r}")


def _bound(x: float, integer: bool) -> str:
    return str(x) if integer and isinstance(x, int) else f"{x:g}"


@overload
def number(component: str, name: str, value: Any, *, low: float | None = ..., high: float | None = ...,
           strict_low: bool = ..., strict_high: bool = ..., integer: Literal[True],
           finite: bool = ...) -> int: ...


@overload
def number(component: str, name: str, value: Any, *, low: float | None = ..., high: float | None = ...,
           strict_low: bool = ..., strict_high: bool = ..., integer: Literal[False] = ...,
           finite: bool = ...) -> float: ...


def number(component: str, name: str, value: Any, *, low: float | None = None, high: float | None = None,
           strict_low: bool = False, strict_high: bool = False, integer: bool = False,
           finite: bool = True) -> float | int:
    """``value`` checked against ``low``/``high`` (``strict_*``: the bound itself excluded).

    ``integer``: an int (not a bool), returned unchanged. Otherwise an int or float (not a bool),
    finite unless ``finite=False`` (a bound refuses NaN either way), returned as ``float(value)``.
    numpy's integer and floating scalars count as the Python numbers they stand for.
    """
    parts = []
    if low is not None:
        parts.append(("> " if strict_low else ">= ") + _bound(low, integer))
    if high is not None:
        parts.append(("< " if strict_high else "<= ") + _bound(high, integer))
    kind = "an integer" if integer else "a finite number" if finite else "a number"
    constraint = " ".join([kind, " and ".join(parts)]).strip()
    numpy_scalar = isinstance(value, numbers.Integral if integer else numbers.Real)
    if numpy_scalar and not isinstance(value, bool | int | float):
        value = int(value) if integer else float(value)  # numpy's scalars, as the Python numbers they are
    ok = not isinstance(value, bool) and isinstance(value, int if integer else int | float)
    if ok and finite and not integer:
        try:
            ok = math.isfinite(value)
        except OverflowError:  # an int past the floats (10**400)
            ok = False
    if ok and low is not None:
        ok = value > low if strict_low else value >= low
    if ok and high is not None:
        ok = value < high if strict_high else value <= high
    if not ok:
        raise error(component, name, constraint, value)
    return value if integer else float(value)


def choice(component: str, name: str, value: Any, choices: Sequence[T]) -> T:
    """``value`` if it is one of ``choices`` (returned as the matching element of ``choices``)."""
    for c in choices:
        if isinstance(value, str | int | float | bool | None) and value == c:  # a tensor's == is no answer
            return c
    raise error(component, name, "one of " + ", ".join(repr(c) for c in choices), value)


def boolean(component: str, name: str, value: Any) -> bool:
    """``value`` if it is True or False (never 0/1 or a string)."""
    if not isinstance(value, bool):
        raise error(component, name, "a boolean", value)
    return value
