"""ByzPy for the benchmark only: installed into ``runs/bench-deps-byzpy``, imported inside this process.

ByzPy (``byzpy`` on PyPI) is never a dependency of robustfl. ``load()`` installs it once with
``python -m pip install --no-deps --target runs/bench-deps-byzpy byzpy==<pinned>`` when that
folder holds no ByzPy, puts the folder on ``sys.path`` only while importing it, and returns a
namespace of the aggregator and pre-aggregator classes the benchmark uses.

**Outside its declared support.** ByzPy 0.1.4 declares ``torch>=2.2,<2.6``, ``numpy>=1.24,<2.1``,
``torchvision``, ``matplotlib`` and ``cloudpickle``; none of them is installed for it (``--no-deps``)
and it runs here beside robustfl's torch and numpy, which are newer than its bounds. Its aggregators
import and compute under them (the three-way benchmark checks every output against robustfl's), but
any number measured this way is for a configuration ByzPy does not claim to support. A declared
dependency that is missing is replaced by a stub module for the duration of the import (as for
ByzFL, ``benchmarks/byzfl_env.py``); the aggregators only use torch and numpy.

The class names and signatures were read from the 0.1.4 wheel (``byzpy/aggregators/*`` and
``byzpy/pre_aggregators/*``); the version is pinned so they stay true.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

from .byzfl_env import import_stubbed, pip_install

ROOT = Path(__file__).resolve().parents[1]
DEPS = ROOT / "runs" / "bench-deps-byzpy"
BYZPY_VERSION = "0.1.4"
BYZPY_SPEC = f"byzpy=={BYZPY_VERSION}"
DECLARED = "torch>=2.2,<2.6, numpy>=1.24,<2.1, torchvision, matplotlib, cloudpickle"

# attribute name in the returned namespace -> (module, class) in ByzPy 0.1.4
CLASSES = {
    "Median": ("byzpy.aggregators.coordinate_wise.median", "CoordinateWiseMedian"),
    "TrimmedMean": ("byzpy.aggregators.coordinate_wise.trimmed_mean", "CoordinateWiseTrimmedMean"),
    "MeanOfMedians": ("byzpy.aggregators.coordinate_wise.mean_of_medians", "MeanOfMedians"),
    "Krum": ("byzpy.aggregators.geometric_wise.krum", "Krum"),
    "MultiKrum": ("byzpy.aggregators.geometric_wise.krum", "MultiKrum"),
    "GeometricMedian": ("byzpy.aggregators.geometric_wise.geometric_median", "GeometricMedian"),
    "MDA": ("byzpy.aggregators.geometric_wise.minimum_diameter_average", "MinimumDiameterAveraging"),
    "MoNNA": ("byzpy.aggregators.geometric_wise.monna", "MoNNA"),
    "SMEA": ("byzpy.aggregators.geometric_wise.smea", "SMEA"),
    "CAF": ("byzpy.aggregators.norm_wise.caf", "CAF"),
    "CenteredClipping": ("byzpy.aggregators.norm_wise.center_clipping", "CenteredClipping"),
    "CGE": ("byzpy.aggregators.norm_wise.comparative_gradient_elimination", "ComparativeGradientElimination"),
    "NNM": ("byzpy.pre_aggregators.nnm", "NearestNeighborMixing"),
    "Clipping": ("byzpy.pre_aggregators.clipping", "Clipping"),
    "ARC": ("byzpy.pre_aggregators.arc", "ARC"),
    "Bucketing": ("byzpy.pre_aggregators.bucketing", "Bucketing"),
}


def installed(target: Path = DEPS) -> bool:
    return (target / "byzpy" / "__init__.py").is_file()


def install(target: Path = DEPS) -> str | None:
    """pip-install ByzPy (no dependencies) into ``target``; None on success, else the reason."""
    return pip_install(BYZPY_SPEC, target, installed)


def import_byzpy(target: Path = DEPS) -> tuple[types.SimpleNamespace | None, str | None]:
    """ByzPy's classes from ``target``, stubbing what fails to import: (namespace, None) or (None, why)."""

    def load() -> types.SimpleNamespace:
        found = {key: getattr(importlib.import_module(mod), cls) for key, (mod, cls) in CLASSES.items()}
        return types.SimpleNamespace(__file__=sys.modules["byzpy"].__file__, **found)

    return import_stubbed("byzpy", target, load)


def load(
    target: Path = DEPS, install_missing: bool = True
) -> tuple[types.SimpleNamespace | None, str | None]:
    """ByzPy's classes, installed into ``target`` first when missing: (namespace, None) or (None, why)."""
    if not installed(target):
        if not install_missing:
            return None, f"ByzPy is not installed in {target} (installing was not allowed)"
        reason = install(target)
        if reason is not None:
            return None, reason
    return import_byzpy(target)


def version(ns: types.SimpleNamespace | None) -> str | None:
    """The installed version, from the dist-info (``byzpy.__version__`` says 0.1.0 in the 0.1.4 wheel)."""
    if ns is None:
        return None
    path = Path(getattr(ns, "__file__", "") or "").parent.parent
    for info in sorted(path.glob("byzpy-*.dist-info")):
        return info.name.removeprefix("byzpy-").removesuffix(".dist-info")
    return None
