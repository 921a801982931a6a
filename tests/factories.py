"""Builders shared by the test folders, on top of the public kit in :mod:`robustfl.testing`.

``robustfl.testing`` is what a plugin author needs (``check_attack``, ``check_defense``, the
synthetic contexts and the Hypothesis strategies); this module holds what only robustfl's own tests
need, written once instead of once per file:

* the registry-driven parameter lists: :func:`builtins` (the built-ins of a registry, read from the
  registry itself) and :func:`create_builtin` (one built with :data:`REQUIRED`, the constructor
  arguments a built-in cannot do without), so a new built-in enters the conformance and property
  suites without anyone adding it to a list;
* seeded inputs: :func:`gen`, :func:`shifted_rows`, :func:`defense_ctx`, :func:`attack_rows`,
  :func:`attack_ctx`, :func:`np_`; checks' arithmetic: :func:`image_keys`, :func:`t_halfwidth`;
* a task's problem: :func:`build_problem`;
* results: :func:`cell` (a hand-made :class:`~robustfl.simulation.results.Cell`), :func:`write_store`;
* files: :func:`write_text`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from robustfl.registry import BUILTIN, Registry
from robustfl.simulation.results import Cell
from robustfl.simulation.store import Store
from robustfl.tasks.base import Partition, Problem
from robustfl.types import AttackContext, DefenseContext

__all__ = [
    "REQUIRED",
    "attack_ctx",
    "attack_rows",
    "build_problem",
    "builtins",
    "cell",
    "create_builtin",
    "defense_ctx",
    "gen",
    "image_keys",
    "np_",
    "shifted_rows",
    "t_halfwidth",
    "write_store",
    "write_text",
]

# -- the registries --------------------------------------------------------------------------------

REQUIRED: dict[tuple[str, str], dict[str, Any]] = {
    # (registry kind, built-in name) -> the constructor arguments it has no default for; nothing else
    ("pre-aggregator", "clipping"): {"tau": 1.0},
}


def builtins(registry: Registry) -> list[str]:
    """The built-in components of ``registry`` (origin ``"built-in"``), sorted: what a
    registry-driven suite runs. Plugins (entry points, ``--plugin`` files) are left out."""
    return [name for name, origin in registry.items() if origin == BUILTIN]


def create_builtin(registry: Registry, name: str, **params: Any) -> Any:
    """``registry.create(name, **params)`` with the arguments :data:`REQUIRED` lists for it."""
    return registry.create(name, **{**REQUIRED.get((registry.kind, name), {}), **params})


# -- seeded inputs ---------------------------------------------------------------------------------


def gen(seed: int = 0) -> torch.Generator:
    """A CPU generator seeded ``seed``."""
    return torch.Generator().manual_seed(seed)


def shifted_rows(k: int, p: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    """``scale * (N(0, I) rows + one shared N(0, I) offset)`` in float64, K x P."""
    g = gen(seed)
    rows = torch.randn(k, p, generator=g, dtype=torch.float64)
    return (rows + torch.randn(1, p, generator=g, dtype=torch.float64)) * scale


def defense_ctx(f: int, seed: int = 0, **kw: Any) -> DefenseContext:
    """A DefenseContext assuming ``f`` Byzantine rows, with a generator seeded ``seed`` (for a full
    context, every field set, see :func:`robustfl.testing.defenses.make_defense_context`)."""
    return DefenseContext(assumed_byzantine=f, generator=gen(seed), **kw)


def attack_rows(n: int, p: int, seed: int, *, loc: float = 1.0, scale: float = 0.5) -> torch.Tensor:
    """n float64 rows of width p around a common seeded direction."""
    g = gen(seed)
    direction = loc + 0.3 * torch.randn(p, generator=g, dtype=torch.float64)
    return direction + scale * torch.randn(n, p, generator=g, dtype=torch.float64)


def attack_ctx(f: int = 3, n: int = 7, p: int = 20, seed: int = 0, *, honest: bool | torch.Tensor = True,
               **kw: object) -> AttackContext:
    """f own rows and n honest rows around a common direction (or the given honest rows); K = f + n.
    (:func:`robustfl.testing.make_context` builds the checker's round, every field granted or not.)"""
    u = attack_rows(f + n, p, seed)
    base: dict[str, object] = {"own": u[:f], "num_clients": f + n, "round": 0, "generator": gen(seed)}
    if isinstance(honest, torch.Tensor):
        base["honest"] = honest
    elif honest:
        base["honest"] = u[f:]
    base.update(kw)
    return AttackContext(**base)  # type: ignore[arg-type]


def np_(t: torch.Tensor | None) -> np.ndarray:
    """A tensor as a float64 numpy array (asserting it is there)."""
    assert t is not None
    return t.detach().cpu().numpy().astype(np.float64)


def image_keys(x: torch.Tensor) -> list[bytes]:
    """Each image (N, ...) of values raw / 255 back to its raw bytes."""
    raw = (x.reshape(x.shape[0], -1).double() * 255).round().to(torch.uint8).numpy()
    return [row.tobytes() for row in raw]


def t_halfwidth(values: list[float]) -> float:
    """The half-width of the two-sided 95% Student-t interval for the mean of ``values``."""
    n = len(values)
    return float(stats.t.ppf(0.975, n - 1) * np.std(values, ddof=1) / math.sqrt(n))


# -- tasks -----------------------------------------------------------------------------------------


def build_problem(task: Any, *, clients: int, root_size: int, root_bias: float = 0.0, seed: int = 0,
                  partition: Partition | None = None, base_dir: Path | None = None) -> Problem:
    """``task.build`` with a generator seeded ``seed`` (IID partition unless given)."""
    return task.build(clients=clients, partition=partition or Partition(), root_size=root_size,
                      root_bias=root_bias, generator=gen(seed), base_dir=str(base_dir) if base_dir else None)


# -- results ---------------------------------------------------------------------------------------


def cell(attack: str, defense: str, seed: int, drift: float | None = None, status: str = "ok", *,
         metrics: Mapping[str, Any] | None = None, history: int = 0, error: str | None = "RuntimeError: boom",
         **kw: Any) -> Cell:
    """A hand-made cell whose final metrics are ``{"relative_drift": drift, **metrics}``.

    A failed cell carries ``error``. ``history`` = R > 0 also gives R rounds repeating the final
    metrics (``round`` = 1..R), and a failed cell then has neither final metrics nor rounds.
    Other keywords (``sweep``, ``outside_guarantee``, ...) go to the Cell.
    """
    final: dict[str, Any] = {"relative_drift": drift, **(metrics or {})}
    failed = status == "failed"
    if history:
        kw["rounds"] = [] if failed else [dict(final, round=r) for r in range(1, history + 1)]
        final = {} if failed else final
    return Cell(attack=attack, defense=defense, seed=seed, status=status, final=final,
                error=error if failed else None, **kw)


def write_store(path: Path, cells: list[Cell], *, run: tuple[dict[str, Any], dict[str, Any]] | None = None,
                key: Callable[[int], str] = "k{}".format,
                config: Callable[[int], dict[str, Any]] = lambda i: {}) -> Path:
    """A store at ``path`` holding ``cells`` (keys ``key(i)``, configs ``config(i)``), after one
    run ``(scenario, provenance)`` when given."""
    with Store(path) as st:
        if run is not None:
            st.add_run(*run)
        for i, c in enumerate(cells):
            st.put_cell(key(i), c, config(i))
    return path


# -- files -----------------------------------------------------------------------------------------


def write_text(directory: Path, text: str, name: str = "s.toml") -> Path:
    """``text`` written (UTF-8) to ``directory / name``; the path."""
    p = directory / name
    p.write_text(text, encoding="utf-8")
    return p
