"""Tasks: a learning problem (data + model + where it exists, the exact optimum)."""

from __future__ import annotations

from typing import Any

from ..registry import Registry

_BUILTINS = {
    "quadratic": "robustfl.tasks.quadratic:Quadratic",
    "ridge": "robustfl.tasks.ridge:Ridge",
    "logreg": "robustfl.tasks.logreg:LogReg",
    "digits": "robustfl.tasks.digits:Digits",
    "mnist": "robustfl.tasks.mnist:MNIST",
    "cifar10": "robustfl.tasks.cifar10:CIFAR10",
}

registry = Registry("task", "robustfl.tasks", _BUILTINS)


def names() -> list[str]:
    return registry.names()


def create(name: str, **params: Any) -> Any:
    return registry.create(name, **params)


def get(name: str) -> Any:
    return registry.get(name)


def origin(name: str) -> str:
    return registry.origin(name)


def register(name: str, target: Any, origin: str = "plugin") -> None:
    registry.register(name, target, origin)
