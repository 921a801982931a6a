"""Shared fixtures: the real MNIST directory, the device tests run on, small scenarios."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# CI runs the property tests derandomized (the same examples every run, so a landing never
# fails on a new random draw); local runs explore new examples each time and find new bugs.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("ROBUSTFL_HYPOTHESIS_PROFILE", "default"))

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
