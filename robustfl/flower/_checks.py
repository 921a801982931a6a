"""Argument checks for robustfl.flower's public constructors and factories.

Each check raises :class:`~robustfl.errors.ConfigError` with one line that names the callable, the
argument, the value given (repr) and what was expected -- ``"RobustStrategy: fraction_train must
be a number in [0, 1], got 2.0"`` -- and returns the value in the form the caller stores (numpy
integers as ``int``). No Flower import: these run before anything touches ``flwr``'s objects.
"""

from __future__ import annotations

import math
import numbers
import operator
import reprlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from ..errors import ConfigError
from ..scenario import check_seed

CLIENTS = "partition ids (a collection of integers >= 0) or a predicate (Context) -> bool"


def fail(owner: str, arg: str, value: Any, expected: str) -> NoReturn:
    """Raise ``ConfigError("owner: arg must be expected, got value")``."""
    raise ConfigError(f"{owner}: {arg} must be {expected}, got {show(value)}")


def show(value: Any) -> str:
    """``repr(value)`` on one line (an array or a tensor as its type, shape and dtype)."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        return f"<{type(value).__name__} of shape {tuple(value.shape)}, dtype {value.dtype}>"
    text = repr(value)
    return " ".join(text.split()) if "\n" in text else text


def is_real(value: Any) -> bool:
    """A finite real number (int, float, numpy scalar, ...), bools excluded."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def count(owner: str, arg: str, value: Any, *, least: int = 0) -> int:
    """An integer >= ``least`` (numpy integers accepted, bools refused), as an ``int``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        fail(owner, arg, value, f"an integer >= {least}")
    return operator.index(value)


def unit(owner: str, arg: str, value: Any) -> Any:
    """A real number in [0, 1], returned as given (Flower's FedAvg stores its fractions as given)."""
    if not (is_real(value) and 0 <= value <= 1):
        fail(owner, arg, value, "a number in [0, 1]")
    return value


def positive(owner: str, arg: str, value: Any) -> float:
    """A finite real number > 0, as a float."""
    if not (is_real(value) and value > 0):
        fail(owner, arg, value, "a finite number > 0")
    return float(value)


def flag(owner: str, arg: str, value: Any) -> bool:
    """True or False (numpy's bool accepted)."""
    if not isinstance(value, bool | np.bool_):
        fail(owner, arg, value, "True or False")
    return bool(value)


def choice(owner: str, arg: str, value: Any, options: Sequence[str]) -> str:
    """One of ``options``."""
    if not (isinstance(value, str) and value in options):
        fail(owner, arg, value, f"one of {', '.join(repr(o) for o in options)}")
    return value


def key(owner: str, arg: str, value: Any) -> str:
    """A non-empty string (a record key)."""
    if not (isinstance(value, str) and value):
        fail(owner, arg, value, "a non-empty string")
    return value


def function(owner: str, arg: str, value: Any, signature: str) -> Any:
    """A callable or None."""
    if value is not None and not callable(value):
        fail(owner, arg, value, f"a function {signature} or None")
    return value


def spec(owner: str, arg: str, value: Any) -> Any:
    """An attack or defense spec: a name, or a mapping with a string ``name`` (and a string
    ``label`` where it has one); what the name means is the registry's to check."""
    if isinstance(value, str):
        return value
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        fail(owner, arg, value, "a name or a mapping with a string 'name'")
    if value.get("label") is not None and not isinstance(value["label"], str):
        fail(owner, f"{arg}['label']", value["label"], "a string")
    return value


def seed(owner: str, value: Any) -> int:
    """A seed (:func:`robustfl.scenario.check_seed`; numpy integers accepted), as an ``int``."""
    return check_seed(f"{owner} seed", value)


def _id(item: Any) -> int | None:
    """``item`` as an id (an integer >= 0: Python, numpy or a 0-d integer tensor), else None."""
    if isinstance(item, bool) or "bool" in str(getattr(item, "dtype", "")):
        return None
    try:
        i = operator.index(item)
    except TypeError:
        return None
    return i if i >= 0 else None


def ids(owner: str, arg: str, value: Any) -> frozenset[int]:
    """A collection of integer ids >= 0 (empty allowed), as a frozenset."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        fail(owner, arg, value, "a collection of integer ids >= 0")
    items = list(value)
    out: list[int] = []
    for item in items:
        i = _id(item)
        if i is None:
            raise ConfigError(
                f"{owner}: {arg} must hold integer ids >= 0, got {show(item)} in {reprlib.repr(value)}"
            )
        out.append(i)
    return frozenset(out)


def clients(owner: str, value: Any) -> frozenset[int] | Callable[..., Any]:
    """A mod's ``clients``: a predicate as given, or a collection of partition ids (empty: no
    client is Byzantine, the f = 0 baseline of a sweep over f)."""
    if callable(value):
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        fail(owner, "clients", value, CLIENTS)
    return ids(owner, "clients", value)
