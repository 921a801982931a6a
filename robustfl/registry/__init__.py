"""Built-in tables plus entry-point plugins.

``robustfl.attacks``, ``robustfl.defenses`` and ``robustfl.tasks`` are :class:`Registry`
objects (so are ``robustfl.defenses.pre_registry`` and ``robustfl.federation``'s
``algorithm_registry`` / ``sharing_registry``). Built-ins are named as ``"module:attribute"`` strings
and imported only when used.
Plugins come from the entry-point groups ``robustfl.attacks``, ``robustfl.defenses`` and
``robustfl.tasks`` and are discovered lazily (on the first ``names()`` or ``create()``); a plugin
may not shadow a built-in or another plugin. ``ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD=1`` turns the
discovery off; :func:`robustfl.plugins.load_plugin` loads a file or module by hand (the CLI's
``--plugin``).

Plugins are validated when loaded: the entry must be callable; an attack class must define
``__call__`` and, where its ``knowledge`` is visible on the class (a class attribute or a dataclass
field's default), that value must be a :class:`~robustfl.types.Knowledge`; a defense class must
define ``__call__``. What the class does not show is checked on the object ``create`` returns (an
attack's ``knowledge``, a defense being callable). A failed check, like an import error, is a
:class:`~robustfl.errors.PluginError` naming the entry point, where it came from and what is wrong.
Built-ins are not re-checked (their own tests do that).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import importlib.util
import inspect
import logging
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, ParameterError, PluginError, UnknownNameError
from .catalogue import _parameter_names, doc_parts, parameter_table

_MISSING: Any = object()

log = logging.getLogger(__name__)

BUILTIN = "built-in"


@dataclass
class Entry:
    name: str
    target: str | Callable[..., Any]  # "module:attr" or the object itself
    origin: str  # "built-in", "dist-name version", or "plugin file PATH"
    _obj: Callable[..., Any] | None = None

    @property
    def is_plugin(self) -> bool:
        return self.origin != BUILTIN

    def describe(self, kind: str) -> str:
        """``attack plugin 'x' (entry point pkg.mod:Cls, from dist 1.0)`` -- for error messages."""
        if callable(self.target):
            what = getattr(self.target, "__qualname__", None) or repr(self.target)
            point = f"object {what}"
        else:
            point = f"entry point {self.name} = {self.target}"
        if not self.is_plugin:
            return f"built-in {kind} {self.name!r} ({self.target})"
        return f"{kind} plugin {self.name!r} ({point}, from {self.origin})"

    def load(self, kind: str = "component") -> Callable[..., Any]:
        if self._obj is None:
            if callable(self.target):
                obj: Any = self.target
            else:
                mod, _, attr = self.target.partition(":")
                try:
                    obj = importlib.import_module(mod)
                    for part in attr.split(".") if attr else []:
                        obj = getattr(obj, part)
                except (Exception, SystemExit) as exc:  # a broken plugin is reported, not a traceback
                    msg = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
                    raise PluginError(f"cannot load {self.describe(kind)}: {msg}") from exc
            if self.is_plugin:
                problem = _check_factory(kind, obj)
                if problem:
                    raise PluginError(f"invalid {self.describe(kind)}: {problem}")
            self._obj = obj
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
        if os.environ.get("ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
            self._discovered = True
            return
        before = dict(self._entries)
        try:
            for ep in _entry_points(self.group):
                self._add(ep.name, ep.value, _dist_origin(ep))
        except PluginError:  # all or nothing: a clash is raised again on every use
            self._entries = before
            raise
        self._discovered = True

    def _add(self, name: str, target: str | Callable[..., Any], origin: str) -> None:
        old = self._entries.get(name)
        if old is not None:
            if old.origin == origin and old.target == target:
                return
            raise PluginError(
                f"{self.kind} {name!r} from {origin} clashes with the {self.kind} {name!r} from "
                f"{old.origin}; a plugin may not shadow a built-in or another plugin: rename or "
                "uninstall one of them"
            )
        self._entries[name] = Entry(name, target, origin)

    def register(self, name: str, target: str | Callable[..., Any], origin: str = "plugin") -> None:
        """Add a component by hand (``--plugin``); a clash is a :class:`PluginError`, as is a name that
        is not a non-empty string (it broke ``names()`` for the whole process) or a target that is
        neither callable nor ``'module:attr'``."""
        if not isinstance(name, str) or not name.strip():
            raise PluginError(f"a {self.kind} is registered under a non-empty name (a string), got {name!r}")
        if not (callable(target) or (isinstance(target, str) and ":" in target)):
            raise PluginError(
                f"{self.kind} {name!r}: register a class or factory (or 'module:attr'), got {target!r}"
            )
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
        if not isinstance(name, str):
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ConfigError(f"{article} {self.kind} is chosen by its name (a string), got {name!r}")
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries) from None

    def get(self, name: str) -> Callable[..., Any]:
        """The class or factory behind ``name`` (a plugin is imported and validated here)."""
        entry = self._entry(name)
        try:
            return entry.load(self.kind)
        except PluginError as exc:
            if str(exc) not in self.broken:
                self.broken.append(str(exc))
            raise

    def create(self, name: str, **params: Any) -> Any:
        """Build ``name`` with ``params``; a misspelled parameter is an error, never dropped."""
        factory = self.get(name)
        _check_params(self.kind, name, factory, params)
        try:
            obj = factory(**params)
        except TypeError as exc:
            raise ParameterError(f"{self.kind} {name!r}: {exc}") from exc
        entry = self._entries[name]
        if entry.is_plugin:
            problem = _check_instance(self.kind, obj)
            if problem:
                raise PluginError(f"invalid {entry.describe(self.kind)}: {problem}")
        return obj

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    # -- the catalogue (``robustfl list`` / ``robustfl show``) -------------------------------
    def parameters(self, name: str) -> list[str] | None:
        """The keyword parameters ``create(name, ...)`` takes; None when it takes any (``**kw``)."""
        return _parameter_names(self.get(name))

    def info(self, name: str) -> dict[str, Any]:
        """What ``robustfl show`` prints: kind, origin, description, paper, formula and details
        (from the module docstring: see :func:`doc_parts`), every parameter with its default and
        constraint, and for an attack the knowledge it needs and whether it poisons data."""
        factory = self.get(name)
        out: dict[str, Any] = {"name": name, "kind": self.kind, "origin": self.origin(name)}
        out.update(doc_parts(factory))
        out["parameters"] = parameter_table(factory, self.kind)
        if self.kind == "attack":
            try:
                obj = self.create(name)
            except Exception:  # needs parameters to be built: say what the class shows
                obj = factory
            knowledge = getattr(obj, "knowledge", None)
            describe = getattr(knowledge, "describe", None)
            out["knowledge"] = describe() if callable(describe) else None
            out["poisons_data"] = bool(getattr(obj, "poisons_data", False))
        return out


@functools.lru_cache(maxsize=512)
def _keywords(factory: Callable[..., Any]) -> tuple[str, ...] | None:
    """The keyword parameters ``factory`` takes; None when it takes any (``**kw``) or has no
    signature. Cached: an attack that builds its base for every trial (``optimal``) asks often."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    ps = sig.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in ps):
        return None
    return tuple(p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _check_params(kind: str, name: str, factory: Callable[..., Any], params: dict[str, Any]) -> None:
    try:
        known = _keywords(factory)
    except TypeError:  # an unhashable factory: look it up every time
        known = _keywords.__wrapped__(factory)
    if known is None:
        return
    for key in params:
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            listed = ", ".join(known) if known else "none"
            raise ParameterError(f"{kind} {name!r} has no parameter {key!r}{hint} (parameters: {listed})")


def _defines_call(cls: type) -> bool:
    return any("__call__" in vars(c) for c in cls.__mro__ if c is not object)


def _class_knowledge(cls: type) -> Any:
    """The class's ``knowledge`` where the class shows it, else _MISSING (checked at create time)."""
    value = inspect.getattr_static(cls, "knowledge", _MISSING)
    if value is _MISSING or hasattr(type(value), "__get__"):  # absent, or a property/descriptor
        return _MISSING
    return value


def _knowledge_problem(value: Any, where: str) -> str | None:
    from ..types import Knowledge

    if value is _MISSING:
        return f"{where} has no attribute 'knowledge' (a robustfl.Knowledge, e.g. Knowledge.OWN)"
    if not isinstance(value, Knowledge):
        return f"{where}'s knowledge must be a robustfl.Knowledge (e.g. Knowledge.OWN), got {value!r}"
    return None


def _check_factory(kind: str, obj: Any) -> str | None:
    """What is wrong with a loaded plugin entry (None when nothing is)."""
    if not callable(obj):
        return f"it names {type(obj).__name__} {obj!r}, which is not callable (expected a class or factory)"
    if not inspect.isclass(obj) or kind not in ("attack", "defense", "pre-aggregator"):
        return None
    if not _defines_call(obj):
        sig = "(ctx)" if kind == "attack" else "(updates, ctx)"
        return f"class {obj.__qualname__} defines no __call__{sig}, so its objects are not callable"
    if kind == "attack":
        value = _class_knowledge(obj)
        if value is not _MISSING:
            return _knowledge_problem(value, f"class {obj.__qualname__}")
    return None


def _check_instance(kind: str, obj: Any) -> str | None:
    """What is wrong with the object a plugin's factory returned (None when nothing is)."""
    what = f"the object it created ({type(obj).__name__})"
    if kind in ("attack", "defense", "pre-aggregator") and not callable(obj):
        return f"{what} is not callable"
    if kind == "attack":
        return _knowledge_problem(getattr(obj, "knowledge", _MISSING), what)
    return None


def _dist_origin(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown distribution"
    try:
        return f"{dist.name} {dist.version}"
    except Exception:  # pragma: no cover - broken metadata
        return "unknown distribution"


def _entry_points(group: str) -> Iterable[md.EntryPoint]:
    try:
        return list(md.entry_points(group=group))
    except Exception as exc:  # pragma: no cover - broken metadata
        warnings.warn(f"could not read entry points for {group}: {exc}", stacklevel=2)
        return []
