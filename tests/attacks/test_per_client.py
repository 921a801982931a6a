"""``per_client``: an attack that declares it must make row i from ``own[i]`` alone -- checked on
every built-in that declares it, against the same attack run on that one row (what a Flower client
mod gives it). Attacks that do not declare it are the safe default and are not checked."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from robustfl import attacks
from robustfl.types import Knowledge
from tests.factories import attack_ctx, builtins, create_builtin, gen

PER_CLIENT = {  # by formula
    "backdoor", "drift", "gaussian", "label_flip", "mpaf", "none", "scaling", "sign_flip",
}


@pytest.mark.parametrize("name", builtins(attacks.registry))
def test_the_declaration_matches_the_formula(name: str) -> None:
    attack = create_builtin(attacks.registry, name)
    assert attack.per_client == (name in PER_CLIENT)
    if attack.per_client:
        assert attack.knowledge == Knowledge.OWN  # nothing beyond the client's own update


@pytest.mark.parametrize("name", sorted(PER_CLIENT))
def test_each_row_is_the_attack_on_that_row_alone(name: str) -> None:
    model = torch.randn(12, generator=gen(11), dtype=torch.float64)  # mpaf reads the global model
    ctx = attack_ctx(f=4, n=6, p=12, seed=3, honest=False, global_model=model)
    together = create_builtin(attacks.registry, name)(dataclasses.replace(ctx, generator=gen(5)))
    for i in range(4):
        alone = create_builtin(attacks.registry, name)(
            dataclasses.replace(ctx, own=ctx.own[i : i + 1], generator=gen(5))
        )
        if name == "gaussian":  # fresh noise per row: the same law, not the same draw
            assert alone.shape == (1, 12)
            continue
        torch.testing.assert_close(alone[0], together[i], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"name": "sign_flip", "source": "mean"}, False),
        ({"name": "gaussian", "mean": "honest"}, False),
        ({"name": "scaling", "base": "alie"}, False),
        ({"name": "scaling", "base": "sign_flip"}, True),
        ({"name": "drift", "base": "sign_flip"}, True),
        ({"name": "drift", "base": "min_max"}, False),
    ],
)
def test_composites_and_options_answer_for_what_they_use(spec: dict[str, object], expected: bool) -> None:
    name = str(spec.pop("name"))
    assert create_builtin(attacks.registry, name, **spec).per_client is expected
