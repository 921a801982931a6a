"""Imported once by the worker pool's fork server (``robustfl.sweep.pool.mp_context``): every built-in
attack, defense, pre-aggregator and task module, so a forked worker starts with them (and the
scipy/numpy modules they pull in, ~400 modules) already imported instead of importing them again
in each worker, seconds into its first cell. Plugins are still loaded by each worker."""

from __future__ import annotations

import importlib

from .. import attacks, defenses, tasks


def _modules() -> list[str]:
    targets = [*attacks._BUILTINS.values(), *defenses._BUILTINS.values()]
    targets += [*defenses.PRE_BUILTINS.values(), *tasks._BUILTINS.values()]
    return sorted({t.split(":")[0] for t in targets})


for _name in _modules():
    importlib.import_module(_name)
