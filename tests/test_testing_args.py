"""robustfl.testing's own arguments, and NaN in its comparisons: a rule or attack that leaves a
NaN as it is, or returns NaN twice, is neither "modified" nor "non-deterministic"; arguments the
checks cannot run on are one-line robustfl errors, not assertion failures blamed on the rule."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from robustfl.errors import RobustFLError
from robustfl.testing import check_attack, check_defense
from robustfl.types import Aggregate, AttackContext, DefenseContext, Knowledge


class FirstRow:
    """Returns the first row (a copy), NaN or not."""

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        return Aggregate(vector=updates[0].clone())


class ZeroesNaN(FirstRow):
    """Writes 0 over the NaNs of its input: a modification, NaN or not."""

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        updates.nan_to_num_(0.0)
        return super().__call__(updates, ctx)


class NaNRows:
    knowledge = Knowledge.OWN

    def __call__(self, ctx: AttackContext) -> Tensor:
        return torch.full_like(ctx.own, float("nan"))


def _rows_with_nan() -> Tensor:
    u = torch.randn(6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u[0, 1] = u[3, 2] = float("nan")
    return u


def test_nan_left_alone_is_not_a_modification_nor_nondeterminism() -> None:
    assert "deterministic" in check_defense(FirstRow(), updates=_rows_with_nan())
    with pytest.raises(AssertionError, match="modified its input rows"):
        check_defense(ZeroesNaN(), updates=_rows_with_nan())
    check_attack(NaNRows())  # NaN rows twice: deterministic


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"k": 0}, "k must be an integer >= 1, got 0"),
        ({"p": 0}, "p must be an integer >= 1, got 0"),
        ({"k": 2.5}, "k must be an integer >= 1, got 2.5"),
        ({"scale": float("nan")}, "scale must be a finite number > 0, got nan"),
        ({"scale": -1.0}, "scale must be a finite number > 0, got -1.0"),
        ({"f": -1}, "f must be an integer >= 0, got -1"),
        ({"seed": -1}, "seed must be an integer >= 0 and <= 9223372036854775807, got -1"),
        ({"rtol": 0.0}, "rtol must be a finite number > 0, got 0.0"),
        ({"dtype": torch.int64}, "dtype must be a floating torch.dtype, got torch.int64"),
        ({"updates": torch.zeros(4)}, "tensor with K >= 1, got a Tensor of shape (4,)"),
        ({"updates": [[0.0]]}, "updates must be a floating (K, P) tensor"),
    ],
)
def test_check_defense_refuses_arguments_it_cannot_run_on(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(RobustFLError) as info:
        check_defense(FirstRow(), **kwargs)
    assert needle in str(info.value) and str(info.value).startswith("check_defense: ")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"f": 0}, "f must be an integer >= 1 and <= 9, got 0"),
        ({"f": 10}, "f must be an integer >= 1 and <= 9, got 10"),
        ({"k": 1, "f": 1}, "k must be an integer >= 2, got 1"),
        ({"p": 0}, "p must be an integer >= 1, got 0"),
        ({"dtype": torch.int32}, "dtype must be a floating torch.dtype, got torch.int32"),
        ({"knowledge": "own"}, "knowledge must be a Knowledge or None, got 'own'"),
    ],
)
def test_check_attack_refuses_arguments_it_cannot_run_on(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(RobustFLError) as info:
        check_attack(NaNRows(), **kwargs)
    assert needle in str(info.value) and str(info.value).startswith("check_attack: ")


def test_a_name_instead_of_the_component_and_a_grant_by_name() -> None:
    from robustfl.testing import make_context

    with pytest.raises(RobustFLError, match=r"check_defense takes the rule itself \(robustfl"):
        check_defense("median")
    with pytest.raises(RobustFLError, match=r"check_attack takes the attack itself"):
        check_attack("alie")
    by_name = make_context(f=2, k=6, p=3, dtype=torch.float64, grant="honest")
    by_flag = make_context(f=2, k=6, p=3, dtype=torch.float64, grant=Knowledge.OWN | Knowledge.HONEST)
    assert by_name.honest is not None and by_name.oracle is None and torch.equal(by_name.own, by_flag.own)
    with pytest.raises(RobustFLError, match="grant must be a Knowledge"):
        make_context(f=2, k=6, p=3, dtype=torch.float64, grant="all")
    with pytest.raises(RobustFLError, match="f must be an integer >= 1 and <= 5, got 12"):
        make_context(f=12, k=6, p=3, dtype=torch.float64, grant="own")
