"""The one place robustfl.flower checks that Flower is there (a one-line error when it is not)."""

from __future__ import annotations

import importlib.util

from ..errors import ConfigError

MIN_VERSION = (1, 22)


def require() -> str:
    """Flower's version, or ConfigError saying how to install it (needs ``flwr >= 1.22``)."""
    if importlib.util.find_spec("flwr") is None:
        raise ConfigError("robustfl.flower needs Flower: pip install 'robustfl[flower]' (flwr >= 1.22)")
    import flwr

    version = str(flwr.__version__)
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        raise ConfigError(f"robustfl.flower needs flwr >= 1.22, found {version}; pip install -U flwr")
    return version
