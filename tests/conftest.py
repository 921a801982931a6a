"""Shared fixtures: the real MNIST directory, the device tests run on, small scenarios."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# CI runs the property tests derandomized (the same examples every run, so a landing never
# fails on a new random draw); local runs explore new examples each time and find new bugs.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("ROBUSTFL_HYPOTHESIS_PROFILE", "default"))

# Flower (tests/flower): no telemetry, no update check -- set before anything imports flwr.
os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
os.environ["FLWR_DISABLE_UPDATE_CHECK"] = "1"

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def mnist_dir() -> Path:
    """$ROBUSTFL_DATA_DIR/mnist, defaulting to ../shared/data/mnist beside the checkout."""
    env = os.environ.get("ROBUSTFL_DATA_DIR")
    return Path(env) / "mnist" if env else ROOT.parent / "shared" / "data" / "mnist"


@pytest.fixture
def real_mnist() -> Path:
    d = mnist_dir()
    if not (d / "t10k-images-idx3-ubyte.gz").exists() and not (d / "t10k-images-idx3-ubyte").exists():
        pytest.skip(f"real MNIST files not found in {d} (set ROBUSTFL_DATA_DIR)")
    return d


@pytest.fixture
def device() -> str:
    """Tests run on $ROBUSTFL_TEST_DEVICE (default cpu)."""
    dev = os.environ.get("ROBUSTFL_TEST_DEVICE", "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        pytest.skip("ROBUSTFL_TEST_DEVICE=cuda but torch sees no GPU")
    return dev


@pytest.fixture(autouse=True)
def _no_plugin_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see the built-ins only, unless a test installs plugins itself."""
    monkeypatch.setenv("ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture(autouse=True)
def _registries_restored() -> Iterator[None]:
    """Whatever a test registers (by hand or through an in-process ``--plugin``) is gone after it,
    with the record of loaded plugin files, so a later test sees the built-ins again and a later
    ``--plugin`` of the same file registers it afresh."""
    from robustfl import plugins
    from robustfl.sweep import jobs

    saved = [(reg, dict(reg._entries), reg._discovered) for _, reg in plugins.plugin_tables()]
    loaded, in_jobs = dict(plugins._LOADED), set(jobs._LOADED_PLUGINS)
    yield
    for reg, entries, discovered in saved:
        reg._entries, reg._discovered = entries, discovered
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)
    jobs._LOADED_PLUGINS.clear()
    jobs._LOADED_PLUGINS.update(in_jobs)
