"""Every attack passes robustfl.testing.attacks.check_attack, declares SPEC's knowledge, validates
its parameters; and the checker itself catches broken attacks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from torch import Tensor

from robustfl import attacks
from robustfl.errors import ParameterError
from robustfl.registry import BUILTIN, Entry
from robustfl.testing.attacks import check_attack
from robustfl.types import AttackContext, Knowledge

from ..factories import builtins, create_builtin

OWN, HONEST, REFERENCE, ORACLE = Knowledge.OWN, Knowledge.HONEST, Knowledge.REFERENCE, Knowledge.ORACLE

KNOWLEDGE = {  # SPEC.md section 2, defaults ([own; better with honest] attacks need only own)
    "none": OWN, "sign_flip": OWN, "scaling": OWN, "orthogonal": OWN, "sybil": OWN,
    "similarity_poisoning": OWN, "alie": OWN, "ipm": OWN, "min_max": OWN, "min_sum": OWN,
    "fang_trim": OWN | HONEST, "fang_krum": OWN | HONEST, "fltrust_adaptive": OWN | HONEST | REFERENCE,
    "optimal": OWN | HONEST | ORACLE, "gaussian": OWN, "label_flip": OWN, "backdoor": OWN,
    "mimic": OWN | HONEST, "drift": OWN, "worst_case": OWN | HONEST | ORACLE,
    "mpaf": OWN, "rop": OWN,
}

VARIANTS = [  # non-default settings that take other code paths
    ("sign_flip", {"source": "mean"}), ("scaling", {"base": "backdoor"}), ("orthogonal", {"angle": 45}),
    ("sybil", {"identities": 2, "jitter": 0.1}), ("similarity_poisoning", {"target": "model"}),
    ("min_max", {"perturbation": "sign"}), ("min_sum", {"perturbation": "unit", "bound": "max"}),
    ("fltrust_adaptive", {"variant": "angle"}), ("gaussian", {"mean": "honest"}),
    ("drift", {"base": "fang_trim", "ramp": 5}), ("optimal", {"base": "ipm"}),
    ("worst_case", {"budget": 50, "gradient": False}),
    ("mpaf", {"scale": 10.0}), ("rop", {"z": 2.0, "angle": 45, "pi": 0.5, "lam": 0.0}),
]

BAD = {  # one out-of-range value per attack with parameters
    "sign_flip": ("scale", -1), "scaling": ("factor", float("nan")), "orthogonal": ("angle", 200),
    "sybil": ("jitter", -0.1), "similarity_poisoning": ("target", "weights"), "alie": ("z", "big"),
    "ipm": ("epsilon", -2), "min_max": ("perturbation", "gauss"), "min_sum": ("bound", "median"),
    "fltrust_adaptive": ("steps", -1), "optimal": ("low", float("inf")), "gaussian": ("std", -1),
    "backdoor": ("poison_fraction", 1.5), "mimic": ("target", -1), "drift": ("ramp", 0),
    "worst_case": ("budget", 0), "mpaf": ("scale", -1), "rop": ("pi", 1.5),
}


def conformance_names() -> list[str]:
    """The attacks the suite checks: every built-in in the registry, read when the suite is collected."""
    return builtins(attacks.registry)


NAMES = conformance_names()


def test_every_builtin_is_covered() -> None:
    assert set(KNOWLEDGE) <= set(attacks.names())
    assert set(BAD) | {"none", "fang_trim", "fang_krum", "label_flip"} == set(KNOWLEDGE)
    assert set(NAMES) == set(KNOWLEDGE), "SPEC.md's knowledge table (KNOWLEDGE) and the registry disagree"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_builtin_conforms(name: str, dtype: torch.dtype) -> None:
    check_attack(create_builtin(attacks.registry, name), dtype=dtype)


@pytest.mark.parametrize(("name", "params"), VARIANTS)
def test_variant_conforms(name: str, params: dict[str, object]) -> None:
    check_attack(attacks.create(name, **params), f=2, k=9, p=30)


@pytest.mark.parametrize("name", NAMES)
def test_declared_knowledge(name: str) -> None:
    assert name in KNOWLEDGE, f"built-in attack {name!r}: add its SPEC.md knowledge to KNOWLEDGE"
    assert create_builtin(attacks.registry, name).knowledge == KNOWLEDGE[name]


@pytest.mark.parametrize("name", NAMES)
def test_bad_parameter_message(name: str) -> None:
    if not attacks.registry.parameters(name):  # nothing to get wrong but the name of a parameter
        assert name not in BAD
        with pytest.raises(ParameterError, match=rf"^attack {name!r} has no parameter 'bogus'"):
            attacks.create(name, bogus=1)
        return
    assert name in BAD, f"built-in attack {name!r} takes parameters: add one out-of-range value to BAD"
    p, value = BAD[name]
    with pytest.raises(ParameterError, match=rf"^attack {name}: parameter {p} must be .*, got "):
        attacks.create(name, **{p: value})


# -- the checker catches what it promises to catch ------------------------------------------------
@dataclass
class Broken:
    mode: str
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False)

    def __call__(self, ctx: AttackContext) -> Tensor:
        own = ctx.own
        if self.mode == "shape":
            return own[:1].clone()
        if self.mode == "dtype":
            return own.float() if own.dtype == torch.float64 else own.double()
        if self.mode == "mutate":
            own.mul_(-1)
            return own
        if self.mode == "random":
            return own + torch.randn(own.shape, dtype=own.dtype)  # global RNG: not reproducible
        assert ctx.honest is not None  # "needs": uses honest rows it never declared
        return ctx.honest[: own.shape[0]].clone()


@pytest.mark.parametrize(("mode", "message"), [
    ("shape", "shape"), ("dtype", "dtype"), ("mutate", "mutated ctx.own"),
    ("random", "equal-seeded generators differ"), ("needs", "raised AssertionError with only own"),
])
def test_checker_catches(mode: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_attack(Broken(mode))


def test_checker_refuses_a_grant_below_the_declared_knowledge() -> None:
    with pytest.raises(AssertionError, match="needs honest"):
        check_attack(attacks.create("mimic"), knowledge=Knowledge.OWN)
    check_attack(attacks.create("alie"), knowledge=Knowledge.OWN | Knowledge.HONEST)


# -- the suite follows the registry ---------------------------------------------------------------
def test_the_suite_is_registry_driven(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in taken out of the registry's table leaves the suite; one added joins it; a plugin
    (another origin) does not."""
    assert "alie" in conformance_names()
    table = dict(attacks.registry._entries)
    del table["alie"]
    table["brand_new"] = Entry("brand_new", "robustfl.attacks.none:NoAttack", BUILTIN)
    table["someones_plugin"] = Entry("someones_plugin", "robustfl.attacks.none:NoAttack", "plugin file x.py")
    monkeypatch.setattr(attacks.registry, "_entries", table)
    names = conformance_names()
    assert "alie" not in names and "brand_new" in names and "someones_plugin" not in names
    assert set(names) == set(NAMES) - {"alie"} | {"brand_new"}
