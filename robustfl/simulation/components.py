"""Turn scenario specs (a name, or a table with name/label/params) into labelled components."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

from .. import attacks, defenses
from ..errors import ConfigError, GuaranteeError, KnowledgeError
from ..types import Knowledge, TaskInfo

Spec = str | Mapping[str, Any]


def spec_name(spec: Spec) -> str:
    return spec if isinstance(spec, str) else str(spec["name"])


def attack_label(spec: Spec) -> str:
    if isinstance(spec, str):
        return spec
    return str(spec.get("label") or spec["name"])


def defense_label(spec: Spec) -> str:
    if isinstance(spec, str):
        return spec
    if spec.get("label"):
        return str(spec["label"])
    pre = [p if isinstance(p, str) else str(p["name"]) for p in spec.get("pre", []) or []]
    return "+".join([*pre, str(spec["name"])])


def build_attack(spec: Spec) -> Any:
    if isinstance(spec, str):
        return attacks.create(spec)
    params = {k: v for k, v in spec.items() if k not in ("name", "label")}
    return attacks.create(str(spec["name"]), **params)


def build_defense(spec: Spec) -> Any:
    if isinstance(spec, str):
        return defenses.create(spec)
    if spec.get("pre"):
        from ..defenses.compose import build_defense as compose_build

        return compose_build(dict(spec))[1]
    params = {k: v for k, v in spec.items() if k not in ("name", "label", "pre")}
    return defenses.create(str(spec["name"]), **params)


def check_knowledge(attack: Any, label: str, granted_level: str) -> None:
    need: Knowledge = getattr(attack, "knowledge", Knowledge.OWN)
    granted = Knowledge.grant(granted_level)
    missing = need & ~granted
    if missing:
        raise KnowledgeError(
            f"attack {label!r} needs {missing.describe()} knowledge, which threat.knowledge = "
            f"{granted_level!r} does not grant (it grants {granted.describe()})"
        )


def admits(defense: Any, k: int, f_hat: int) -> bool:
    if hasattr(defense, "admits"):
        return bool(defense.admits(k, f_hat))
    if hasattr(defense, "min_clients"):
        return k >= int(defense.min_clients(f_hat))
    return True


def check_guarantee(defense: Any, label: str, k: int, f_hat: int, allow_outside: bool) -> bool:
    """True when the cell runs outside the rule's guarantee (allowed); raises when refused."""
    if admits(defense, k, f_hat):
        return False
    if allow_outside:
        return True
    need = defense.min_clients(f_hat) if hasattr(defense, "min_clients") else "more"
    raise GuaranteeError(
        f"defense {label!r} needs at least {need} clients per round for assumed_byzantine = {f_hat}, "
        f"got {k}; pass --allow-outside-guarantee to run it anyway (flagged in the table)"
    )


def setup_attack(attack: Any, label: str, info: TaskInfo) -> None:
    if hasattr(attack, "setup"):
        attack.setup(info)
    elif getattr(attack, "poisons_data", False) and info.num_classes is None:
        raise ConfigError(f"attack {label!r} poisons labels and does not apply to task {info.name!r}")


def named_generator(seed: int, name: str) -> torch.Generator:
    """A torch.Generator for one named stream of one cell seed (never the global RNG)."""
    digest = hashlib.sha256(f"robustfl:{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
