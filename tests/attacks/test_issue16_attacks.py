"""Issue 16's attacks, MPAF and ROP, against independent numpy references of their formulas; their
state across rounds, edge cases and one-line parameter errors; and why ROP is not ``orthogonal``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats

from robustfl import attacks
from robustfl.attacks.rop import default_z
from robustfl.errors import InputError, ParameterError
from robustfl.types import AttackContext

from ..factories import attack_ctx, gen, np_


def model(p: int, seed: int) -> torch.Tensor:
    return torch.randn(p, generator=gen(100 + seed), dtype=torch.float64)


# -- MPAF ---------------------------------------------------------------------------------------
def test_mpaf_rows_are_scale_times_base_minus_global() -> None:
    w = model(9, 0)
    ctx = attack_ctx(f=3, n=5, p=9, seed=1, global_model=w)
    rows = np_(attacks.create("mpaf", scale=7.0)(ctx))
    base = np_(torch.randn(9, generator=gen(1), dtype=torch.float64))  # the run's first draw
    want = 7.0 * (base - np_(w))
    for i in range(3):
        np.testing.assert_allclose(rows[i], want, rtol=1e-13, atol=1e-13)


def test_mpaf_hand_computed() -> None:
    # scale 2, global model (1, -1): rows = 2 (b - w) with b the seeded draw
    attack = attacks.create("mpaf", scale=2.0)
    w = torch.tensor([1.0, -1.0], dtype=torch.float64)
    rows = attack(AttackContext(own=torch.zeros(2, 2, dtype=torch.float64), round=0, global_model=w,
                                generator=gen(4)))
    b = torch.randn(2, generator=gen(4), dtype=torch.float64)
    assert torch.equal(rows[0], 2.0 * (b - w)) and torch.equal(rows[1], rows[0])
    assert attack.last_stats["distance_to_base"] == pytest.approx(float(torch.linalg.vector_norm(b - w)))


def test_mpaf_default_scale_and_float32() -> None:
    ctx = attack_ctx(f=2, n=4, p=6, seed=2, global_model=model(6, 2))
    assert ctx.global_model is not None
    w = ctx.global_model.float()
    rows = attacks.create("mpaf")(dataclasses.replace(ctx, own=ctx.own.float(), global_model=w))
    assert rows.dtype == torch.float32 and bool(torch.isfinite(rows).all())
    base = torch.randn(6, generator=gen(2), dtype=torch.float32)
    torch.testing.assert_close(rows[0], 1e6 * (base - w), rtol=1e-6, atol=1e-1)


def test_mpaf_base_model_is_fixed_for_the_run() -> None:
    attack = attacks.create("mpaf", scale=1.0)
    w0, w1, w2 = model(5, 0), model(5, 1), model(5, 2)
    own = torch.zeros(2, 5, dtype=torch.float64)
    r0 = attack(AttackContext(own=own, round=0, global_model=w0, generator=gen(1)))
    base = r0[0] + w0
    # later rounds draw nothing, whatever generator they get: the same base, another global model
    r1 = attack(AttackContext(own=own, round=1, global_model=w1, generator=gen(2)))
    torch.testing.assert_close(r1[0], base - w1, rtol=0, atol=1e-14)
    # a second round-0 call (another client of the same instance in a Flower mod) keeps it too
    again = attack(AttackContext(own=own, round=1, global_model=w1, generator=gen(3)))
    torch.testing.assert_close(again, r1, rtol=0, atol=0)
    # a round-0 call after another round is a new run: a new draw from that run's generator
    r_new = attack(AttackContext(own=own, round=0, global_model=w2, generator=gen(9)))
    torch.testing.assert_close(r_new[0], torch.randn(5, generator=gen(9), dtype=torch.float64) - w2)
    r_same = attack(AttackContext(own=own, round=0, global_model=w2, generator=gen(10)))
    torch.testing.assert_close(r_same, r_new, rtol=0, atol=0)


def test_mpaf_pulls_the_mean_towards_the_base() -> None:
    """FedAvg with f fake rows: w + mean(rows) moves by (f/K) scale (b - w) plus the honest part."""
    w = model(8, 3)
    ctx = attack_ctx(f=2, n=6, p=8, seed=3, global_model=w)
    assert ctx.honest is not None
    rows = attacks.create("mpaf", scale=4.0)(ctx)
    b = np_(rows[0]) / 4.0 + np_(w)
    step = np_(torch.cat([rows, ctx.honest]).mean(0))
    want = (2 / 8) * 4.0 * (b - np_(w)) + (6 / 8) * np_(ctx.honest).mean(0)
    np.testing.assert_allclose(step, want, atol=1e-12)


def test_mpaf_needs_the_global_model() -> None:
    ctx = attack_ctx(f=2, n=3, p=4, seed=0)
    with pytest.raises(InputError, match=r"^attack mpaf: needs the global model \(ctx.global_model\)$"):
        attacks.create("mpaf")(ctx)
    with pytest.raises(InputError, match=r"^attack mpaf: global model has shape \(3,\), expected \(4,\)$"):
        attacks.create("mpaf")(dataclasses.replace(ctx, global_model=torch.zeros(3, dtype=torch.float64)))


def test_mpaf_refuses_a_model_that_changes_size_within_a_run() -> None:
    attack = attacks.create("mpaf")
    attack(attack_ctx(f=1, n=2, p=4, seed=0, global_model=torch.zeros(4, dtype=torch.float64)))
    ctx = attack_ctx(f=1, n=2, p=3, seed=0, round=1, global_model=torch.zeros(3, dtype=torch.float64))
    msg = r"^attack mpaf: the global model changed size within a run \(4 -> 3\)"
    with pytest.raises(InputError, match=msg):
        attack(ctx)


def test_mpaf_scale_zero_sends_zeros() -> None:
    ctx = attack_ctx(f=2, n=3, p=4, seed=0, global_model=model(4, 0))
    assert torch.equal(attacks.create("mpaf", scale=0.0)(ctx), torch.zeros(2, 4, dtype=torch.float64))


# -- ROP: an independent reference ----------------------------------------------------------------
def rop_reference(
    mu: np.ndarray, g: np.ndarray | None, k: int, f: int, *,
    z: float | None = None, angle: float = 270.0, pi: float = 1.0, lam: float = 0.9,
) -> np.ndarray:
    if z is None:
        s = math.floor(k / 2 + 1) - f
        z = float(stats.norm.ppf((k - f - s) / (k - f)))
    if g is None:
        loc, ref = (1 - pi) * mu, mu
    else:
        loc, ref = pi * g + (1 - pi) * mu, lam * g + (1 - lam) * mu
    r_hat = ref / np.linalg.norm(ref)
    ones = np.ones_like(mu)
    u = ones - (ones @ r_hat) * r_hat
    u /= np.linalg.norm(u)
    t = np.deg2rad(angle)
    pert = np.sin(t) * u + np.cos(t) * r_hat
    return loc + z * pert / np.linalg.norm(pert)


@pytest.mark.parametrize("server_lr", [1.0, 0.5])
@pytest.mark.parametrize("honest", [True, False])
def test_rop_follows_the_previous_aggregate(server_lr: float, honest: bool) -> None:
    k, f, p = 10, 3, 12
    attack = attacks.create("rop", server_lr=server_lr)
    ws = [model(p, s) for s in range(3)]
    prev: np.ndarray | None = None
    for t, w in enumerate(ws):
        ctx = attack_ctx(f=f, n=k - f, p=p, seed=t, honest=honest, round=t, global_model=w)
        mu = np_(ctx.honest if honest else ctx.own).mean(0)
        g = None if prev is None else (np_(w) - prev) / server_lr
        rows = np_(attack(ctx))
        want = rop_reference(mu, g, k, f)
        for i in range(f):
            np.testing.assert_allclose(rows[i], want, rtol=1e-10, atol=1e-12)
        assert attack.last_stats["history"] == (0.0 if t == 0 else 1.0)
        prev = np_(w)


@pytest.mark.parametrize(("z", "angle", "pi", "lam"), [(2.0, 45.0, 0.5, 0.0), (-1.0, 90.0, 0.0, 1.0),
                                                       (0.7, 180.0, 1.0, 0.5), (1.5, 0.0, 0.25, 0.9)])
def test_rop_parameters_against_the_reference(z: float, angle: float, pi: float, lam: float) -> None:
    attack = attacks.create("rop", z=z, angle=angle, pi=pi, lam=lam)
    w0, w1 = model(7, 0), model(7, 1)
    attack(attack_ctx(f=2, n=5, p=7, seed=0, round=0, global_model=w0))
    ctx = attack_ctx(f=2, n=5, p=7, seed=1, round=1, global_model=w1)
    rows = np_(attack(ctx))
    want = rop_reference(np_(ctx.honest).mean(0), np_(w1) - np_(w0), 7, 2, z=z, angle=angle, pi=pi, lam=lam)
    np.testing.assert_allclose(rows[0], want, rtol=1e-10, atol=1e-12)
    assert attack.last_stats["z"] == z


def test_rop_geometry() -> None:
    """At 270 degrees the perturbation is orthogonal to the reference r and has length |z|; with
    pi = 1 the rows sit at the previous aggregate plus it."""
    attack = attacks.create("rop", z=3.0)
    w0, w1 = model(20, 0), model(20, 1)
    attack(attack_ctx(f=2, n=6, p=20, seed=0, global_model=w0))
    ctx = attack_ctx(f=2, n=6, p=20, seed=1, round=1, global_model=w1)
    rows = np_(attack(ctx))
    g = np_(w1) - np_(w0)
    r = 0.9 * g + 0.1 * np_(ctx.honest).mean(0)
    d = rows[0] - g
    assert np.linalg.norm(d) == pytest.approx(3.0, rel=1e-12)
    assert abs(d @ r) / np.linalg.norm(r) < 1e-12
    assert d @ (np.ones(20) - (np.ones(20) @ r) / (r @ r) * r) < 0  # the -u side (sin 270 = -1)


def test_rop_state_repeat_gap_and_reset() -> None:
    attack = attacks.create("rop", z=1.0)
    ws = [model(6, s) for s in range(4)]

    def call(t: int, w: torch.Tensor) -> torch.Tensor:
        return attack(attack_ctx(f=1, n=4, p=6, seed=0, round=t, global_model=w))

    call(0, ws[0])
    first = call(1, ws[1])
    assert attack.last_stats["history"] == 1.0
    torch.testing.assert_close(call(1, ws[1]), first, rtol=0, atol=0)  # a repeated round: the same g
    call(3, ws[2])  # round 2 was skipped (the attackers were not sampled): no g
    assert attack.last_stats["history"] == 0.0
    call(4, ws[3])
    assert attack.last_stats["history"] == 1.0
    call(0, ws[0])  # a new run
    assert attack.last_stats["history"] == 0.0
    ctx = attack_ctx(f=1, n=4, p=6, seed=0, round=None, global_model=ws[1])
    attack(ctx)  # round None counts as 0: a fresh start
    assert attack.last_stats["history"] == 0.0


def test_rop_first_round_with_full_relocation_is_the_perturbation_alone() -> None:
    ctx = attack_ctx(f=2, n=5, p=8, seed=5, global_model=model(8, 5))
    rows = np_(attacks.create("rop", z=2.0)(ctx))
    mu = np_(ctx.honest).mean(0)
    np.testing.assert_allclose(rows[0], rop_reference(mu, None, 7, 2, z=2.0), atol=1e-12)
    assert np.linalg.norm(rows[0]) == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize(("k", "f"), [(10, 3), (25, 5), (20, 4), (10, 1), (4, 3), (5, 4), (3, 2)])
def test_rop_default_z_is_the_authors_formula(k: int, f: int) -> None:
    s = math.floor(k / 2 + 1) - f
    q = (k - f - s) / (k - f)
    want = float(stats.norm.ppf(q)) if 0 < q < 1 else 0.0
    assert default_z(k, f) == pytest.approx(want, abs=1e-12)


def test_rop_default_z_hand_values() -> None:
    # K = 25, f = 5: s = 13 - 5 = 8, q = 12/20 = 0.6, Phi^-1(0.6) = 0.2533471031...
    assert default_z(25, 5) == pytest.approx(0.2533471031357997, abs=1e-12)
    assert default_z(4, 3) == 0.0  # s = 0: q = 1, no quantile
    assert default_z(10, 1) < 0  # s = 5, q = 4/9: the formula's z is negative there


def test_rop_needs_the_global_model() -> None:
    ctx = attack_ctx(f=2, n=3, p=4, seed=0)
    with pytest.raises(InputError, match=r"^attack rop: needs the global model \(ctx.global_model\)"):
        attacks.create("rop")(ctx)
    with pytest.raises(InputError, match=r"^attack rop: global model has shape \(5,\), expected \(4,\)$"):
        attacks.create("rop")(dataclasses.replace(ctx, global_model=torch.zeros(5, dtype=torch.float64)))


def test_rop_degenerate_inputs_stay_finite() -> None:
    # mu = 0 and no history: r = 0, the perturbation starts from the all-ones direction
    own = torch.zeros(2, 4, dtype=torch.float64)
    zero = torch.zeros(4, dtype=torch.float64)
    rows = attacks.create("rop", z=1.0)(AttackContext(own=own, round=0, global_model=zero))
    assert bool(torch.isfinite(rows).all())
    torch.testing.assert_close(rows[0], -torch.full((4,), 0.5, dtype=torch.float64))
    # mu parallel to the all-ones vector: u = 0, and at 270 degrees nothing is left but the location
    own = torch.ones(2, 4, dtype=torch.float64)
    rows = attacks.create("rop", z=1.0, pi=0.0)(AttackContext(own=own, round=0, global_model=zero))
    torch.testing.assert_close(rows, own)


# -- ROP is not orthogonal ----------------------------------------------------------------------
def test_rop_is_not_orthogonal_with_other_parameters() -> None:
    """orthogonal's rows scale with the updates and ignore the history; ROP's perturbation has an
    absolute length and its rows move with the previous aggregate: no parameter mapping makes one
    the other."""
    ctx = attack_ctx(f=2, n=5, p=10, seed=7, global_model=model(10, 7))
    assert ctx.honest is not None
    big = dataclasses.replace(ctx, own=10 * ctx.own, honest=10 * ctx.honest)
    for angle in (90.0, 45.0):
        o = attacks.create("orthogonal", angle=angle)  # the same seeded direction both times
        torch.testing.assert_close(o(dataclasses.replace(big, generator=gen(1))),
                                   10 * o(dataclasses.replace(ctx, generator=gen(1))))
    r_small = attacks.create("rop", z=1.0, angle=270.0)(ctx)
    r_big = attacks.create("rop", z=1.0, angle=270.0)(big)
    assert float(torch.linalg.vector_norm(r_small[0])) == pytest.approx(1.0)
    assert float(torch.linalg.vector_norm(r_big[0])) == pytest.approx(1.0)  # not 10
    # history: the same round's rows differ once a previous global model is known
    rop = attacks.create("rop", z=1.0)
    rop(dataclasses.replace(ctx, round=0, global_model=model(10, 8)))
    with_history = rop(dataclasses.replace(ctx, round=1))
    fresh = attacks.create("rop", z=1.0)(dataclasses.replace(ctx, round=1))
    assert not torch.allclose(with_history, fresh)
    orth = attacks.create("orthogonal")
    torch.testing.assert_close(orth(dataclasses.replace(ctx, round=1, generator=gen(2))),
                               orth(dataclasses.replace(ctx, round=0, generator=gen(2))))


# -- parameters: one-line errors -------------------------------------------------------------------
@pytest.mark.parametrize(("name", "p", "value", "constraint"), [
    ("mpaf", "scale", -1.0, "a finite number >= 0"),
    ("mpaf", "scale", float("nan"), "a finite number >= 0"),
    ("mpaf", "scale", True, "a finite number >= 0"),
    ("rop", "z", "big", "a finite number"),
    ("rop", "angle", 400, "a finite number >= 0 and <= 360"),
    ("rop", "pi", 1.5, "a finite number >= 0 and <= 1"),
    ("rop", "lam", -0.1, "a finite number >= 0 and <= 1"),
    ("rop", "server_lr", 0, "a finite number > 0"),
])
def test_bad_parameters(name: str, p: str, value: object, constraint: str) -> None:
    with pytest.raises(ParameterError) as err:
        attacks.create(name, **{p: value})
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == f"attack {name}: parameter {p} must be {constraint}, got {value!r}"
