"""Degenerate input through the Python API: a one-line InputError naming the value, or the rule's
documented result -- never a bare torch/Python exception from deep inside, never a wrong number.

* :class:`AttackContext` checks ``own`` (a floating (f, P) tensor), ``honest`` ((H, P)) and
  ``reference`` ((P,)); :class:`DefenseContext` checks that ``client_ids`` and ``num_samples`` are
  1-D tensors. Valid contexts keep the very objects they were given.
* FoolsGold and FLDetector refuse ``client_ids`` of a length other than K (the shared
  ``_select.round_ids``), before touching their state.
* FoolsGold on rows that are all non-finite: the zero update with zero weights (its docstring:
  non-finite rows get weight 0), no trace left in its histories.
* SignGuard on (K, 0) rows: the empty update with zero weights, as on all-zero rows (median and
  fedavg also return the empty update there).
* ``ctx=None``: no built-in rule returns a number that differs from its answer with a default
  context (there is no single place every rule passes through to refuse it with an InputError).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl import defenses as D
from robustfl.errors import InputError
from robustfl.types import AttackContext, DefenseContext
from tests.defenses import _refs as ref
from tests.factories import builtins, gen

P = 4


def _one_line(err: pytest.ExceptionInfo[InputError]) -> str:
    msg = str(err.value)
    assert len(msg.splitlines()) == 1
    return msg


# -- AttackContext ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("own", "needle"),
    [
        ([[1.0, 2.0]], "got list"),
        (torch.zeros(P, dtype=torch.float64), "got a tensor of shape (4,), dtype torch.float64"),
        (3, "got int 3"),
        (torch.zeros(2, 3, 4), "got a tensor of shape (2, 3, 4)"),
        (torch.zeros(2, P, dtype=torch.int64), "got a tensor of shape (2, 4), dtype torch.int64"),
    ],
)
def test_attack_context_refuses_an_own_that_is_not_f_by_p(own: Any, needle: str) -> None:
    with pytest.raises(InputError) as err:
        AttackContext(own=own)
    msg = _one_line(err)
    assert msg.startswith("AttackContext.own must be a floating (f, P) tensor, ") and needle in msg


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("honest", torch.zeros(5, P + 1), "AttackContext.honest must be an (H, 4) tensor"),
        ("honest", torch.zeros(P), "got a tensor of shape (4,)"),
        ("honest", [[0.0] * P], "got list"),
        ("reference", torch.zeros(P + 2), "AttackContext.reference must be a (4,) tensor"),
        ("reference", torch.zeros(1, P), "got a tensor of shape (1, 4)"),
    ],
)
def test_attack_context_refuses_knowledge_of_another_width(field: str, value: Any, needle: str) -> None:
    with pytest.raises(InputError) as err:
        AttackContext(own=torch.zeros(2, P), **{field: value})
    msg = _one_line(err)
    assert needle in msg and "P = 4, the width of own" in msg and msg.startswith(f"AttackContext.{field} ")


def test_valid_attack_context_keeps_its_tensors_and_the_attack_result() -> None:
    own = torch.randn(3, P, generator=gen(1), dtype=torch.float64)
    honest, reference = torch.randn(0, P), torch.randn(P)  # no honest row is still (H, P)
    ctx = AttackContext(own=own, honest=honest, reference=reference)
    assert ctx.own is own and ctx.honest is honest and ctx.reference is reference
    assert AttackContext(own=torch.zeros(0, P)).own.shape == (0, P)  # f = 0 rows
    assert torch.equal(attacks.create("sign_flip", scale=2.0)(ctx), -2.0 * own)


# -- DefenseContext --------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["client_ids", "num_samples"])
@pytest.mark.parametrize(
    ("value", "needle"),
    [([0, 1, 2], "got list"), (torch.arange(6).reshape(2, 3), "got a tensor of shape (2, 3)"),
     (torch.tensor(3), "got a tensor of shape ()"), (np.arange(3), "got ndarray")],
)
def test_defense_context_refuses_per_row_fields_that_are_not_1d(field: str, value: Any, needle: str) -> None:
    with pytest.raises(InputError) as err:
        DefenseContext(**{field: value})
    msg = _one_line(err)
    assert msg.startswith(f"DefenseContext.{field} must be a 1-D tensor (one entry per row), ")
    assert needle in msg


# -- client_ids of the wrong length ----------------------------------------------------------------
def _ctx_for(name: str, ids: torch.Tensor) -> DefenseContext:
    """A context with these client ids (and the global model FLDetector needs)."""
    if name == "fldetector":
        model = torch.zeros(P, dtype=torch.float64)
        return DefenseContext(assumed_byzantine=1, client_ids=ids, global_model=model)
    return DefenseContext(client_ids=ids)


@pytest.mark.parametrize("name", ["foolsgold", "fldetector"])
@pytest.mark.parametrize("count", [2, 7])
def test_client_ids_of_the_wrong_length_are_refused_before_any_state_changes(name: str, count: int) -> None:
    u = torch.randn(5, P, generator=gen(2), dtype=torch.float64)
    rule = D.create(name)
    with pytest.raises(InputError) as err:
        rule(u, _ctx_for(name, torch.arange(count)))
    assert _one_line(err) == f"{name}: ctx.client_ids must hold one id per row (K = 5), got {count} ids"
    ok = _ctx_for(name, torch.tensor([4, 0, 3, 1, 2]))
    got, fresh = rule(u, ok), D.create(name)(u, ok)  # the refused call left nothing behind
    assert torch.equal(got.vector, fresh.vector) and dict(got.stats) == dict(fresh.stats)
    with pytest.raises(InputError, match=f"^{name}: ctx.client_ids must be distinct within a round$"):
        rule(u, _ctx_for(name, torch.tensor([0, 1, 1, 2, 3])))


@pytest.mark.parametrize("count", [2, 7])
def test_fldetector_refuses_num_samples_not_one_per_row(count: int) -> None:
    u = torch.randn(5, P, generator=gen(2), dtype=torch.float64)
    ctx = dataclasses.replace(_ctx_for("fldetector", torch.arange(5)), num_samples=torch.ones(count))
    with pytest.raises(InputError) as err:
        D.create("fldetector")(u, ctx)
    assert _one_line(err) == f"fldetector: ctx.num_samples must hold one count per row (K = 5), got {count}"


def test_foolsgold_with_client_ids_matches_the_transcription() -> None:
    """Valid input: FoolsGold keyed by client_ids (shuffled, changing) is Algorithm 1 as before."""
    rng = np.random.default_rng(3)
    rule, history = D.create("foolsgold"), {}  # type: ignore[var-annotated]
    for ids in ([3, 0, 2, 1], [1, 4, 3], [0, 4, 1, 2, 3]):
        u = rng.normal(size=(len(ids), 6))
        out = rule(torch.from_numpy(u), DefenseContext(client_ids=torch.tensor(ids)))
        np.testing.assert_allclose(out.vector.numpy(), ref.foolsgold_round(history, ids, u, 1.0), rtol=1e-12)


def test_foolsgold_literal_rounds() -> None:
    """By hand: three directions at 45 degrees share the weight; two identical Sybils get none."""
    even = D.create("foolsgold")(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), DefenseContext())
    assert even.weights is not None and torch.allclose(even.weights, torch.full((3,), 1 / 3))
    assert torch.allclose(even.vector, torch.tensor([2 / 3, 2 / 3]))
    sybil = D.create("foolsgold")(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), DefenseContext())
    assert sybil.weights is not None and sybil.weights.tolist() == [0.0, 0.0, 1.0]
    assert sybil.vector.tolist() == [0.0, 1.0]


# -- FoolsGold: every row non-finite ----------------------------------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_foolsgold_every_row_non_finite_gives_the_zero_update(bad: float, dtype: torch.dtype) -> None:
    rule = D.create("foolsgold")
    ctx = DefenseContext(client_ids=torch.tensor([7, 3, 5]))
    u = torch.randn(3, P, generator=gen(4), dtype=dtype)
    u[:, 1] = bad
    out = rule(u, ctx)
    assert out.vector.dtype == dtype and torch.equal(out.vector, torch.zeros(P, dtype=dtype))
    assert out.weights is not None and torch.equal(out.weights, torch.zeros(3, dtype=dtype))
    assert dict(out.stats) == {"num_zero_weight": 3.0, "max_weight": 0.0, "mean_max_similarity": 0.0}
    v = torch.randn(3, P, generator=gen(5), dtype=dtype)  # the bad round left no history behind
    after, fresh = rule(v, ctx), D.create("foolsgold")(v, ctx)
    assert torch.equal(after.vector, fresh.vector) and after.weights is not None
    assert bool(after.weights.sum() > 0)


# -- SignGuard on zero-width rows ------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 4])
def test_signguard_zero_width_rows_give_the_empty_update(k: int) -> None:
    g = gen(6)
    state = g.get_state()
    out = D.create("signguard")(torch.zeros(k, 0, dtype=torch.float64), DefenseContext(generator=g))
    assert out.vector.shape == (0,) and out.vector.dtype == torch.float64
    assert out.weights is not None and torch.equal(out.weights, torch.zeros(k, dtype=torch.float64))
    zero = D.create("signguard")(torch.zeros(k, 3, dtype=torch.float64), DefenseContext())
    assert dict(out.stats) == dict(zero.stats) and out.stats["empty"] == 1.0  # as all-zero rows
    assert torch.equal(g.get_state(), state)  # no coordinate, nothing drawn
    for other in ("median", "fedavg"):  # the empty update, as the other rules give
        assert D.create(other)(torch.zeros(k, 0, dtype=torch.float64), DefenseContext()).vector.shape == (0,)


# -- ctx=None ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", builtins(D.registry))
def test_no_rule_answers_ctx_none_with_a_wrong_number(name: str) -> None:
    u = torch.randn(7, P, generator=gen(7), dtype=torch.float64)
    try:
        got = D.create(name)(u, None)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 -- refusing, however, is never a wrong number
        return
    want = D.create(name)(u, DefenseContext())
    assert torch.equal(got.vector, want.vector)
