"""Built-in tables plus entry-point plugins.

``robustfl.attacks``, ``robustfl.defenses`` and ``robustfl.tasks`` are :class:`Registry`
objects. Built-ins are named as ``"module:attribute"`` strings and imported only when used.
Plugins come from the entry-point groups ``robustfl.attacks``, ``robustfl.defenses`` and
``robustfl.tasks`` and are discovered lazily (on the first ``names()`` or ``create()``); a plugin
may not shadow a built-in or another plugin. ``ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD=1`` turns the
discovery off; :func:`load_plugin` loads a file or module by hand (the CLI's ``--plugin``).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import inspect
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ParameterError, PluginError, UnknownNameError

log = logging.getLogger(__name__)

BUILTIN = "built-in"


@dataclass
class Entry:
    name: str
    target: str | Callable[..., Any]  # "module:attr" or the object itself
    origin: str  # "built-in", "dist-name version", or "plugin file PATH"
    _obj: Callable[..., Any] | None = None

    def load(self) -> Callable[..., Any]:
        if self._obj is None:
            if callable(self.target):
                self._obj = self.target
            else:
                mod, _, attr = self.target.partition(":")
                try:
                    self._obj = getattr(importlib.import_module(mod), attr)
                except Exception as exc:  # a broken plugin is reported, not a traceback
                    raise PluginError(f"cannot load {self.name!r} from {self.origin}: {exc}") from exc
        return self._obj


class Registry:
    """A name -> factory table for one kind of component."""

    def __init__(self, kind: str, group: str, builtins: dict[str, str]) -> None:
        self.kind, self.group = kind, group
        self._entries: dict[str, Entry] = {n: Entry(n, t, BUILTIN) for n, t in builtins.items()}
        self._discovered = False
        self.broken: list[str] = []  # warnings about plugins that could not be read

    # -- discovery -------------------------------------------------------------------------
    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        if os.environ.get("ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
            return
        for ep in _entry_points(self.group):
            dist = getattr(ep, "dist", None)
            origin = f"{dist.name} {dist.version}" if dist is not None else "unknown distribution"
            self._add(ep.name, ep.value, origin)

    def _add(self, name: str, target: str | Callable[..., Any], origin: str) -> None:
        old = self._entries.get(name)
        if old is not None:
            if old.origin == origin and old.target == target:
                return
            raise PluginError(
                f"{self.kind} {name!r} from {origin} clashes with the one from {old.origin}; "
                "uninstall one of them"
            )
        self._entries[name] = Entry(name, target, origin)

    def register(self, name: str, target: str | Callable[..., Any], origin: str) -> None:
        """Add a component by hand (``--plugin``); a clash is a :class:`PluginError`."""
        self._discover()
        self._add(name, target, origin)

    # -- public API -------------------------------------------------------------------------
    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def origin(self, name: str) -> str:
        return self._entry(name).origin

    def items(self) -> list[tuple[str, str]]:
        """(name, origin) for every component."""
        self._discover()
        return [(n, self._entries[n].origin) for n in sorted(self._entries)]

    def _entry(self, name: str) -> Entry:
        self._discover()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries) from None

    def get(self, name: str) -> Callable[..., Any]:
        """The class or factory behind ``name``."""
        return self._entry(name).load()

    def create(self, name: str, **params: Any) -> Any:
        """Build ``name`` with ``params``; a misspelled parameter is an error, never dropped."""
        factory = self.get(name)
        _check_params(self.kind, name, factory, params)
        try:
            return factory(**params)
        except TypeError as exc:
            raise ParameterError(f"{self.kind} {name!r}: {exc}") from exc

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries


def _check_params(kind: str, name: str, factory: Callable[..., Any], params: dict[str, Any]) -> None:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    ps = sig.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in ps):
        return
    known = [p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in params:
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            listed = ", ".join(known) if known else "none"
            raise ParameterError(
                f"{kind} {name!r} has no parameter {key!r}{hint} (parameters: {listed})"
            )


def _entry_points(group: str) -> Iterable[md.EntryPoint]:
    try:
        return list(md.entry_points(group=group))
    except Exception as exc:  # pragma: no cover - broken metadata
        warnings.warn(f"could not read entry points for {group}: {exc}", stacklevel=2)
        return []


def load_plugin(spec: str) -> list[str]:
    """Load a plugin from a file path or an importable module name (the CLI's ``--plugin``).

    The module registers its components by defining ``ATTACKS``, ``DEFENSES`` and/or ``TASKS``
    dicts (name -> class or factory), or by calling ``robustfl.attacks.register`` itself.
    Returns the names it added.
    """
    path = Path(spec)
    cache_key = str(path.resolve()) if (spec.endswith(".py") or path.exists()) else spec
    if cache_key in _LOADED:
        return list(_LOADED[cache_key])
    path = Path(spec)
    if spec.endswith(".py") or path.exists():
        if not path.is_file():
            raise PluginError(f"--plugin {spec!r}: no such file")
        mod_name = f"robustfl_plugin_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise PluginError(f"--plugin {spec!r}: not a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise PluginError(f"--plugin {spec!r} failed to import: {exc}") from exc
        origin = f"plugin file {path}"
    else:
        try:
            module = importlib.import_module(spec)
        except Exception as exc:
            raise PluginError(f"--plugin {spec!r}: cannot import module ({exc})") from exc
        origin = f"plugin module {spec}"
    from . import attacks, defenses, tasks

    added: list[str] = []
    for attr, reg in (("ATTACKS", attacks), ("DEFENSES", defenses), ("TASKS", tasks)):
        table = getattr(module, attr, None) or {}
        for name, obj in table.items():
            reg.register(name, obj, origin)
            added.append(name)
    _LOADED[cache_key] = list(added)
    return added


_LOADED: dict[str, list[str]] = {}
