"""``robustfl plugin new NAME --kind attack|defense [--dir DIR]``: write an installable plugin package.

:func:`write_plugin` writes ``DIR/robustfl-<name>/`` (underscores in the name become hyphens in the
distribution name)::

    pyproject.toml                 setuptools; depends on robustfl; the entry point, e.g.
                                   [project.entry-points."robustfl.attacks"]
                                   <name> = "robustfl_<name>:<Class>"
    README.md                      install, use, test
    robustfl_<name>/__init__.py    a documented, working skeleton (formula in the docstring)
    tests/test_<name>.py           robustfl.testing's conformance check plus a value test

``pip install -e DIR/robustfl-<name>`` makes ``<name>`` appear in ``robustfl list`` with its
distribution as origin. Nothing is overwritten: an existing target directory is a ConfigError.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from string import Template

from ..errors import ConfigError

__all__ = ["write_plugin"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_GROUPS = {"attack": "robustfl.attacks", "defense": "robustfl.defenses"}


def _builtin_names(kind: str) -> set[str]:
    if kind == "attack":
        from ..attacks import _BUILTINS
    else:
        from ..defenses import _BUILTINS
    return set(_BUILTINS)


def _class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def write_plugin(name: str, kind: str, directory: str | Path) -> Path:
    """Write the package ``robustfl-<name>/`` under ``directory`` and return its path.

    ``name`` must be a lower_snake Python identifier that no built-in of that kind uses; ``kind``
    is "attack" or "defense". Raises :class:`~robustfl.errors.ConfigError` on a bad name or kind,
    or when the target directory already exists.
    """
    if kind not in _GROUPS:
        raise ConfigError(f"plugin new: --kind must be attack or defense, got {kind!r}")
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
        raise ConfigError(
            f"plugin new: NAME must be a lower_snake Python identifier (e.g. my_attack), got {name!r}"
        )
    if name in _builtin_names(kind):
        raise ConfigError(
            f"plugin new: {name!r} is a built-in {kind}; a plugin may not shadow it, choose another name"
        )
    dist = f"robustfl-{name.replace('_', '-')}"
    root = Path(directory) / dist
    if root.exists():
        raise ConfigError(f"plugin new: {root} already exists; remove it or choose another --dir")
    values = {
        "name": name,
        "dist": dist,
        "module": f"robustfl_{name}",
        "cls": _class_name(name),
        "group": _GROUPS[kind],
        "kind": kind,
    }
    code, test = (_ATTACK, _ATTACK_TEST) if kind == "attack" else (_DEFENSE, _DEFENSE_TEST)
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        f"{values['module']}/__init__.py": code,
        f"tests/test_{name}.py": test,
    }
    if Path(directory).exists() and not Path(directory).is_dir():
        raise ConfigError(f"plugin new: --dir {str(directory)!r} is a file: expected a folder")
    try:
        root.mkdir(parents=True)
        for rel, template in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(Template(template).substitute(values), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"plugin new: cannot write {root}: {exc.strerror or exc}") from None
    return root


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "${dist}"
version = "0.1.0"
description = "A robustfl ${kind} plugin: ${name}"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["robustfl"]

[project.optional-dependencies]
test = ["pytest", "robustfl[testing]"]

# robustfl finds the ${kind} through this entry point once the package is installed.
[project.entry-points."${group}"]
${name} = "${module}:${cls}"

[tool.setuptools]
packages = ["${module}"]
"""

_README = """\
# ${dist}

A robustfl ${kind} plugin: `${name}` (class `${module}.${cls}`).

## Install

```
pip install -e .            # or: pip install -e '.[test]' to run the tests
robustfl list ${kind}s      # shows ${name} with origin "${dist} 0.1.0"
```

## Use

```
robustfl run quick --${kind} ${name}
robustfl matrix quick --${kind}s ${name} --seeds 0
```

Parameters are the dataclass fields of `${cls}`; set them in a scenario file, e.g.
`[${kind}] name = "${name}"` plus the parameters beside `name`, or `--set ${kind}.<param>=<value>`.

## Documentation

Everything is in the installed robustfl, no web page needed:

```
robustfl show ${name}              # its parameters, defaults, knowledge and formula (from the docstring)
robustfl list ${kind}s              # the built-in ${kind}s to compare against, with their papers
python -m pydoc robustfl.types      # the contract: AttackContext, DefenseContext, Aggregate, Knowledge
python -m pydoc robustfl.testing    # the conformance checks tests/test_${name}.py runs
```

robustfl's source tree documents the design (`docs/design.md`: the ${kind} contract, the context
fields, the knowledge flags) and the maths (`docs/maths.md`), and CONTRIBUTING.md walks through
writing an attack or a defense.

## Test

```
pytest tests
```

`tests/test_${name}.py` runs robustfl's conformance check (`robustfl.testing.check_${kind}`) and
checks one value against a hand-computed reference. Replace the formula in
`${module}/__init__.py` (and its docstring) with yours, and the value test with one computed
independently (by hand, numpy, or a slow literal transcription of the paper).
"""

_ATTACK = '''\
"""${name}: every Byzantine client sends its honest update negated and scaled.

Formula, for each Byzantine client i with honest update own_i::

    row_i = -scale * own_i

Regime: needs only the Byzantine clients' own updates (``Knowledge.OWN``). Against FedAvg with f
of K rows it moves the aggregate by -(1 + scale) f/K times the Byzantine mean; rules robust to f
Byzantine rows (median, Krum, ...) bound its effect when their f-hat >= f.

Paper: name the paper this attack comes from here (authors, title, venue, year).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from robustfl import params
from robustfl.types import AttackContext, Knowledge
from torch import Tensor

__all__ = ["${cls}"]


@dataclass
class ${cls}:
    """``row_i = -scale * own_i``; ``scale`` >= 0 (a finite real)."""

    scale: float = 1.0
    # What the attack needs (OWN | HONEST | REFERENCE | ORACLE); a run whose threat model grants
    # less is refused before round 1. Not a parameter: fixed by the attack.
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False, repr=False)

    def __post_init__(self) -> None:
        # robustfl.params: number / choice / boolean, one message form
        # ("attack ${name}: parameter scale must be a finite number >= 0, got -1")
        self.scale = params.number("attack ${name}", "scale", self.scale, low=0)

    def __call__(self, ctx: AttackContext) -> Tensor:
        """(f, P) malicious rows, in ``ctx.own``'s dtype and device; never mutates ``ctx``.

        Randomness, if you need it, comes from ``ctx.generator`` only
        (``torch.randn(shape, generator=ctx.generator)``), never from the global RNG.
        """
        return -self.scale * ctx.own
'''

_ATTACK_TEST = '''\
"""${name}: robustfl's attack conformance check plus values against a hand-computed reference."""

from __future__ import annotations

import pytest
import torch
from robustfl.errors import ParameterError
from robustfl.testing import check_attack, make_context
from robustfl.types import Knowledge

from ${module} import ${cls}


@pytest.mark.parametrize("scale", [0.0, 1.0, 2.5])
def test_conformance(scale: float) -> None:
    check_attack(${cls}(scale=scale))
    check_attack(${cls}(scale=scale), dtype=torch.float32)


def test_values_against_hand_computed_rows() -> None:
    ctx = make_context(f=2, k=6, p=4, dtype=torch.float64, grant=Knowledge.OWN)
    out = ${cls}(scale=2.0)(ctx)
    expected = [-2.0 * x for row in ctx.own.tolist() for x in row]  # the formula, in plain Python
    assert out.shape == ctx.own.shape
    assert out.flatten().tolist() == pytest.approx(expected, rel=1e-12)


def test_knowledge_is_own_only() -> None:
    assert ${cls}().knowledge == Knowledge.OWN


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "big"])
def test_bad_scale_is_a_parameter_error(bad: object) -> None:
    with pytest.raises(ParameterError, match="scale"):
        ${cls}(scale=bad)  # type: ignore[arg-type]


def test_registered_when_installed() -> None:
    import robustfl

    if "${name}" not in robustfl.attacks.names():
        pytest.skip("${dist} is not installed (pip install -e .), or plugin autoload is off")
    assert robustfl.attacks.origin("${name}").startswith("${dist} ")
    assert isinstance(robustfl.attacks.create("${name}", scale=3.0), ${cls})
'''

_DEFENSE = '''\
"""${name}: the sample-weighted coordinate-wise mean of the rows.

Formula, with rows u_k and sample counts n_k (equal weights when the server has no counts)::

    w_k = n_k / sum_j n_j          (weighted = True and ctx.num_samples given; else w_k = 1/K)
    g   = sum_k w_k u_k

Regime: this skeleton is FedAvg, with no Byzantine robustness (one row moves g anywhere); replace
the formula with your rule, state the K >= ... condition under which its guarantee holds in
``min_clients`` and in this docstring, and the paper it comes from.

Paper: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from robustfl import params
from robustfl.errors import InputError
from robustfl.types import Aggregate, DefenseContext
from torch import Tensor

__all__ = ["${cls}"]


@dataclass
class ${cls}:
    """Sample-weighted (``weighted``) or plain mean of the rows."""

    weighted: bool = True

    # Promises checked by robustfl.testing.check_defense (inside the rule's regime).
    properties: ClassVar[frozenset[str]] = frozenset(
        {
            "permutation_invariant",
            "translation_equivariant",
            "scale_equivariant",
            "convex_combination",
            "coordinate_bounded",
        }
    )

    def __post_init__(self) -> None:
        params.boolean("defense ${name}", "weighted", self.weighted)

    def min_clients(self, f_hat: int) -> int:
        """The smallest K at which the guarantee holds for f-hat assumed Byzantine rows
        (a median would return 2 * f_hat + 1). The mean has no guarantee; it runs on any K >= 1."""
        return 1

    # A rule that keeps state across rounds overrides reset() to forget it; doing so declares it
    # stateful (DefenseBase.stateful), and the attack's oracle then runs it on a copy per trial.

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        """The aggregate of the (K, P) rows, in their dtype and device; never mutates inputs."""
        if updates.ndim != 2 or updates.shape[0] < 1 or not updates.is_floating_point():
            shape = tuple(updates.shape)
            raise InputError(f"${name}: updates must be a floating (K, P) tensor with K >= 1, got {shape}")
        k = updates.shape[0]
        n = ctx.num_samples
        if self.weighted and n is not None:
            counts = torch.as_tensor(n, device=updates.device).to(torch.float64)
            ok = counts.shape == (k,) and bool(torch.isfinite(counts).all()) and bool((counts >= 0).all())
            if not ok or float(counts.sum()) <= 0:
                raise InputError(f"${name}: num_samples must be {k} finite counts >= 0 with a positive sum")
            weights = (counts / counts.sum()).to(updates.dtype)
        else:
            weights = torch.full((k,), 1.0 / k, dtype=updates.dtype, device=updates.device)
        return Aggregate(vector=weights @ updates, weights=weights, stats={"rows": float(k)})
'''

_DEFENSE_TEST = '''\
"""${name}: robustfl's defense property suite plus values against a hand-computed reference."""

from __future__ import annotations

import pytest
import torch
from robustfl.errors import ParameterError
from robustfl.testing import check_defense
from robustfl.types import DefenseContext

from ${module} import ${cls}


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("k", [1, 4, 11])
def test_conformance(weighted: bool, k: int) -> None:
    ran = check_defense(${cls}(weighted=weighted), k=k, p=6, seed=k)
    assert "convex_combination" in ran  # the declared properties were checked


def test_values_against_hand_computed_mean() -> None:
    u = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]], dtype=torch.float64)
    ctx = DefenseContext(num_samples=torch.tensor([1, 1, 2]))
    out = ${cls}()(u, ctx)
    # (1*1 + 1*3 + 2*5) / 4 = 3.5 and (1*2 + 1*4 + 2*0) / 4 = 1.5
    assert out.vector.tolist() == [3.5, 1.5]
    assert out.weights is not None and out.weights.tolist() == [0.25, 0.25, 0.5]
    plain = ${cls}(weighted=False)(u, ctx)
    assert plain.vector.tolist() == pytest.approx([3.0, 2.0], rel=1e-15)


def test_bad_parameter_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="weighted"):
        ${cls}(weighted="yes")  # type: ignore[arg-type]


def test_registered_when_installed() -> None:
    import robustfl

    if "${name}" not in robustfl.defenses.names():
        pytest.skip("${dist} is not installed (pip install -e .), or plugin autoload is off")
    assert robustfl.defenses.origin("${name}").startswith("${dist} ")
    assert isinstance(robustfl.defenses.create("${name}", weighted=False), ${cls})
'''
