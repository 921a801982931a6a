"""Tasks: a learning problem (data + model + where it exists, the exact optimum)."""

from __future__ import annotations

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


# the module-level API: robustfl.<kind>.names(), create(name, **params), get, origin, register
names = registry.names
create = registry.create
get = registry.get
origin = registry.origin
register = registry.register
