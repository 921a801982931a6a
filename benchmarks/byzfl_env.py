"""ByzFL for the benchmark only: installed into ``runs/bench-deps``, imported inside this process.

ByzFL is never a dependency of robustfl. ``load()`` installs it once with
``python -m pip install --no-deps --target runs/bench-deps byzfl==<pinned>`` when that folder
holds no ByzFL, puts the folder on ``sys.path`` only while importing it, and returns the
module. Its declared dependencies (torchvision, seaborn, ...) are not installed: torchvision does
not load beside the CPU torch, and the aggregators never touch it. ``byzfl/__init__.py`` imports
its whole framework (benchmark/train.py does ``from torchvision import datasets, transforms`` at
import time), so those modules are stubbed in ``sys.modules`` for the duration of the import: a
stub answers any attribute with a permissive placeholder. The stubs are removed afterwards so
nothing else in the process sees them.

The class names and signatures the benchmark uses were read from the installed 0.0.11 source
(``byzfl/aggregators/aggregators.py`` and ``preaggregators.py``); the version is pinned so they
stay true.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
DEPS = ROOT / "runs" / "bench-deps"
BYZFL_SPEC = "byzfl==0.0.11"
# torchvision is always stubbed (a real one built for another torch aborts the import); others
# only when they are missing.
ALWAYS_STUB = ("torchvision", "torchvision.datasets", "torchvision.transforms")
_MAX_STUBS = 12
T = TypeVar("T")


class _Anything:
    """Stands for any attribute, call result or item of a stubbed module."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Anything:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Anything(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return _Anything(f"{self._name}()")

    def __getitem__(self, key: Any) -> _Anything:
        return _Anything(f"{self._name}[]")

    def __repr__(self) -> str:
        return f"<benchmark stub {self._name}>"


def stub_module(name: str) -> types.ModuleType:
    """A package module whose every public attribute is an :class:`_Anything` (PEP 562)."""
    mod = types.ModuleType(name, f"benchmark stub for {name} (not installed for the benchmark)")

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Anything(f"{name}.{attr}")

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    mod.__path__ = []  # a package: ``import name.sub`` finds a stub too (after stubbing it)
    return mod


def installed(target: Path = DEPS) -> bool:
    return (target / "byzfl" / "__init__.py").is_file()


def pip_install(spec: str, target: Path, check: Callable[[Path], bool]) -> str | None:
    """``pip install --no-deps --target target spec``: None on success (pip succeeded and
    ``check(target)`` finds the package), else the reason, pip's last non-warning line."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), spec]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip install {spec} failed: {e}"
    if done.returncode != 0 or not check(target):
        lines = [ln for ln in (done.stderr or done.stdout or "").strip().splitlines() if "WARNING" not in ln]
        return f"pip install {spec} failed: {lines[-1] if lines else f'exit {done.returncode}'}"
    return None


def install(target: Path = DEPS) -> str | None:
    """pip-install ByzFL (no dependencies) into ``target``; None on success, else the reason."""
    return pip_install(BYZFL_SPEC, target, installed)


def drop_modules(prefix: str) -> None:
    """Forget ``prefix`` and its submodules in ``sys.modules`` (a failed or stubbed import)."""
    for name in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[name]


def import_stubbed(
    package: str, target: Path, load: Callable[[], T], always: Sequence[str] = ()
) -> tuple[T | None, str | None]:
    """``load()`` (which imports ``package``) with ``target`` first on ``sys.path``; a dependency
    that fails to import is replaced by a stub module and the import retried: (result, None) or
    (None, the reason). The stubs (and the ``always`` ones, put in first) are removed afterwards
    and the modules they shadowed restored."""
    stubbed: list[str] = []
    saved = {name: sys.modules[name] for name in always if name in sys.modules}
    for name in always:
        sys.modules[name] = stub_module(name)
        stubbed.append(name)
    sys.path.insert(0, str(target))
    try:
        for _ in range(_MAX_STUBS):
            try:
                return load(), None
            except ModuleNotFoundError as e:  # a missing dependency: stub it and retry
                missing = e.name or ""
                drop_modules(package)
                if not missing or missing.startswith(package) or missing in stubbed:
                    return None, f"import {package} failed: {e}"
                parts = missing.split(".")
                for i in range(1, len(parts) + 1):
                    sub = ".".join(parts[:i])
                    if sub not in sys.modules:
                        sys.modules[sub] = stub_module(sub)
                        stubbed.append(sub)
            except Exception as e:  # any other import-time failure: the caller skips, saying why
                drop_modules(package)
                return None, f"import {package} failed: {type(e).__name__}: {e}"
        return None, f"import {package} failed: still missing modules after stubbing {', '.join(stubbed)}"
    finally:
        sys.path.remove(str(target))
        for name in stubbed:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def import_byzfl(target: Path = DEPS) -> tuple[types.ModuleType | None, str | None]:
    """Import ByzFL from ``target`` with stubs for what fails to import; (module, None) or (None, reason)."""
    if "byzfl" in sys.modules:
        return sys.modules["byzfl"], None

    def load() -> types.ModuleType:
        mod = importlib.import_module("byzfl")
        mod.aggregators  # noqa: B018  (the part the benchmark needs)
        return mod

    return import_stubbed("byzfl", target, load, ALWAYS_STUB)


def load(target: Path = DEPS, install_missing: bool = True) -> tuple[types.ModuleType | None, str | None]:
    """ByzFL, installing it into ``target`` first when missing: (module, None) or (None, reason)."""
    if not installed(target):
        if not install_missing:
            return None, f"ByzFL is not installed in {target} (installing was not allowed)"
        reason = install(target)
        if reason is not None:
            return None, reason
    return import_byzfl(target)


def version(mod: types.ModuleType | None) -> str | None:
    """The installed ByzFL version, read from its dist-info (ByzFL has no ``__version__``)."""
    if mod is None:
        return None
    path = Path(getattr(mod, "__file__", "") or "").parent.parent
    for info in sorted(path.glob("byzfl-*.dist-info")):
        return info.name.removeprefix("byzfl-").removesuffix(".dist-info")
    return getattr(mod, "__version__", None)
