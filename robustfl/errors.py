"""One exception hierarchy for robustfl.

Every error a user can cause derives from :class:`RobustFLError`; the CLI turns those into a
one-line message and exit code 2. Anything else is a bug (or, inside a matrix cell, a failure
that is recorded with its message while the rest of the matrix goes on).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RobustFLError(Exception):
    """Base class: bad usage or bad input. The CLI prints ``str(err)`` and exits with 2."""

    exit_code = 2


class ConfigError(RobustFLError, ValueError):
    """A scenario key, value or combination is invalid. The message names the key."""


class ParameterError(ConfigError):
    """A component (attack, defense, task, ...) got a parameter it does not know or a bad value."""


class UnknownNameError(ConfigError, KeyError):
    """An attack, defense, task or scenario name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(set(known))
        same = [k for k in known if k.lower() == name.lower()]  # SIGN_FLIP -> sign_flip
        close = same + [c for c in difflib.get_close_matches(name, known, n=3, cutoff=0.5) if c not in same]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        msg = f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})"
        super().__init__(msg)
        self.kind, self.name, self.close = kind, name, close

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class KnowledgeError(ConfigError):
    """An attack needs more knowledge than the scenario's threat model grants."""


class GuaranteeError(ConfigError):
    """A rule's precondition (e.g. K >= 2f + 3 for Krum) does not hold for this cell."""


class PluginError(RobustFLError):
    """A plugin could not be loaded, or clashes with a built-in or another plugin."""


class DataError(RobustFLError):
    """Data files are missing or malformed."""


class StoreError(RobustFLError):
    """A results store is corrupt, foreign, or from a newer schema."""


class InputError(RobustFLError, ValueError):
    """An update matrix or context a rule cannot take (wrong shape, too few rows, ...)."""


def check(condition: bool, message: str, exc: type[RobustFLError] = ParameterError) -> None:
    """Raise ``exc(message)`` unless ``condition``; messages read 'parameter, constraint, value found'."""
    if not condition:
        raise exc(message)
