"""The registry-driven suites can build every built-in: a built-in that needs constructor arguments
has them in ``tests/factories.REQUIRED``, and that table holds required arguments only."""

from __future__ import annotations

import pytest

from robustfl import attacks, defenses
from robustfl.defenses import pre_registry
from robustfl.errors import ParameterError
from robustfl.registry import Registry

from ..factories import REQUIRED, builtins, create_builtin

REGISTRIES = {r.kind: r for r in (attacks.registry, defenses.registry, pre_registry)}


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, r in REGISTRIES.items() for n in builtins(r)])
def test_every_builtin_can_be_built(kind: str, name: str) -> None:
    try:
        obj = create_builtin(REGISTRIES[kind], name)
    except Exception as exc:
        pytest.fail(
            f"built-in {kind} {name!r} cannot be built with no arguments ({type(exc).__name__}: {exc}): "
            "add the constructor arguments it requires to REQUIRED in tests/factories.py"
        )
    assert callable(obj)


@pytest.mark.parametrize(("kind", "name"), sorted(REQUIRED))
def test_required_lists_only_required_arguments(kind: str, name: str) -> None:
    registry: Registry = REGISTRIES[kind]
    assert name in builtins(registry), f"REQUIRED names {kind} {name!r}, which is not a built-in"
    for arg in REQUIRED[(kind, name)]:
        rest = {a: v for a, v in REQUIRED[(kind, name)].items() if a != arg}
        with pytest.raises((ParameterError, TypeError)):
            registry.create(name, **rest)  # without it the built-in cannot be built
