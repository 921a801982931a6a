"""robustfl's defenses and attacks in a Flower federation (``pip install 'robustfl[flower]'``).

* :class:`RobustStrategy` -- Flower's Message-API ``FedAvg`` with any robustfl defense spec
  (built-in, plugin, composed with ``pre = [...]``) in place of the weighted mean.
* :func:`byzantine_mod` -- a ClientApp mod that turns chosen clients Byzantine with any attack that
  needs only the client's own update (``per_client``); :class:`ServerAdversary` runs the attacks
  that need the other clients' rows (ALIE, Min-Max, Fang, FLTrust's adaptive attack, ...) on the
  server, with exactly the :class:`~robustfl.types.AttackContext` robustfl's engine gives;
  :func:`mark_byzantine_mod` tells it which replies are its clients'; :func:`data_poisoner` /
  :func:`poison_batch` are the data-poisoning attacks' helpers for a client's training loop.
* :class:`InProcessGrid` / :func:`run_in_process` -- a ServerApp and a ClientApp run through
  Flower's own machinery in one process, without Ray (tests, the demo).

Flower is imported on first use of these names, never by ``import robustfl``. :func:`quiet`
switches Flower's telemetry and update check off; call it before anything imports ``flwr``.
Robust aggregation needs each client's individual update: it does not combine with secure
aggregation, which hides them.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

_EXPORTS = {
    "RobustStrategy": "strategy",
    "RoundRecord": "strategy",
    "ServerAdversary": "adversary",
    "byzantine_mod": "mods",
    "mark_byzantine_mod": "mods",
    "poison_batch": "mods",
    "data_poisoner": "mods",
    "client_attack": "mods",
    "ModelLayout": "layout",
    "InProcessGrid": "grid",
    "run_in_process": "grid",
}

__all__ = sorted([*_EXPORTS, "quiet"])


def quiet() -> None:
    """Switch off Flower's telemetry and its update check for this process (set before ``flwr``
    is first imported: Flower reads the variables then)."""
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
    os.environ["FLWR_DISABLE_UPDATE_CHECK"] = "1"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'robustfl.flower' has no attribute {name!r}")
    return getattr(importlib.import_module(f"robustfl.flower.{module}"), name)
