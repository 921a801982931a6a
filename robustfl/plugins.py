"""Loading plugins by hand: the CLI's ``--plugin PATH_OR_MODULE``, the same for every kind.

A plugin file (or module) defines a table per kind it adds -- ``ATTACKS``, ``DEFENSES``,
``PRE_AGGREGATORS``, ``TASKS``, ``ALGORITHMS``, ``SHARING`` -- mapping names to classes or
factories; each goes into that kind's :class:`~robustfl.registry.Registry` exactly as an installed
entry point would. This module sits above the component packages (it imports them all); the
registries themselves import none of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from . import attacks, defenses, federation, tasks
from .errors import PluginError
from .registry import Registry


def load_plugin(spec: str | os.PathLike[str]) -> list[str]:
    """Load a plugin from a file path or an importable module name (the CLI's ``--plugin``).

    The module registers its components by defining any of the tables of :func:`plugin_tables`
    (``ATTACKS``, ``DEFENSES``, ``PRE_AGGREGATORS``, ``TASKS``, ``ALGORITHMS``, ``SHARING``: name ->
    class or factory), or by calling ``robustfl.attacks.register`` (etc.) itself.
    Returns the names it added.
    """
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str) or not spec:
        raise PluginError(f"a plugin is a file path or a module name, got {spec!r}")
    path = Path(spec)
    cache_key = str(path.resolve()) if (spec.endswith(".py") or path.exists()) else spec
    if cache_key in _LOADED:
        return list(_LOADED[cache_key])
    path = Path(spec)
    if spec.endswith(".py") or path.exists():
        if not path.is_file():
            why = "a folder, not a file" if path.is_dir() else "no such file"
            raise PluginError(f"--plugin {spec!r}: {why}")
        mod_name = f"robustfl_plugin_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise PluginError(f"--plugin {spec!r}: not a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        before = sum(len(reg.names()) for _, reg in plugin_tables())  # a file may also register() itself
        try:
            loader_spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # a script's sys.exit() ended the process silently
            raise PluginError(f"--plugin {spec!r} failed to import: {type(exc).__name__}: {exc}") from exc
        origin = f"plugin file {path}"
        if sum(len(reg.names()) for _, reg in plugin_tables()) == before:
            _refuse_empty(spec, module)
    else:
        try:
            module = importlib.import_module(spec)
        except (Exception, SystemExit) as exc:
            raise PluginError(f"--plugin {spec!r}: cannot import module ({exc})") from exc
        origin = f"plugin module {spec}"
    added: list[str] = []
    for attr, reg in plugin_tables():
        table = getattr(module, attr, None) or {}
        if not isinstance(table, Mapping):
            raise PluginError(
                f"--plugin {spec!r}: {attr} must be a dict of name -> class or factory, "
                f"got {type(table).__name__}"
            )
        for name, obj in table.items():
            if not isinstance(name, str) or not (callable(obj) or (isinstance(obj, str) and ":" in obj)):
                raise PluginError(
                    f"--plugin {spec!r}: {attr}[{name!r}] must be a class or factory (or 'module:attr'), "
                    f"got {obj!r}"
                )
            reg.register(name, obj, origin)
            added.append(name)
    _LOADED[cache_key] = list(added)
    return added


_LOADED: dict[str, list[str]] = {}


def _refuse_empty(spec: str, module: object) -> None:
    """A plugin file that defines none of the tables and registered nothing (``ATTACK = {...}``, a
    typo, returned [] without a word): PluginError, suggesting the table it may have meant."""
    names = [attr for attr, _ in plugin_tables()]
    if any(getattr(module, attr, None) for attr in names):
        return
    import difflib

    near = [(a, m) for a in vars(module) for m in difflib.get_close_matches(a, names, n=1, cutoff=0.75)]
    hint = f" ({near[0][0]} is not read: did you mean {near[0][1]}?)" if near else ""
    raise PluginError(f"--plugin {spec!r} adds nothing: it defines none of {', '.join(names)} and "
                      f"registers nothing{hint}")


def plugin_tables() -> list[tuple[str, Registry]]:
    """Every kind a user can add: the table a ``--plugin`` file defines for it, and its registry."""

    return [
        ("ATTACKS", attacks.registry),
        ("DEFENSES", defenses.registry),
        ("PRE_AGGREGATORS", defenses.pre_registry),
        ("TASKS", tasks.registry),
        ("ALGORITHMS", federation.algorithm_registry),
        ("SHARING", federation.sharing_registry),
    ]
