"""FLTrust (SPEC.md §1) against a slow per-row transcription of Cao et al. (NDSS 2021) in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import robustfl.defenses as defenses
from robustfl.defenses.fedavg import FedAvg
from robustfl.defenses.fltrust import FLTrust
from robustfl.errors import InputError, ParameterError
from robustfl.types import Aggregate, DefenseContext

EPS = 1e-12
STAT_NAMES = {
    "mean_trust",
    "num_zero_trust",
    "num_invalid",
    "server_update_norm",
    "max_weight",
    "weight_entropy",
    "server_update_degenerate",
    "all_zero_trust",
}


def reference(u: torch.Tensor, g0: torch.Tensor, fallback: str = "none") -> tuple[list, list, dict]:
    """Literal transcription, one row at a time, in Python floats (math.fsum)."""
    rows = [[float(x) for x in row] for row in u.double()]
    g = [float(x) for x in g0.double()]
    k, p = len(rows), len(g)

    def norm(x: list[float]) -> float:
        if any(math.isnan(t) for t in x):
            return math.nan
        return math.sqrt(math.fsum(t * t for t in x)) if all(math.isfinite(t) for t in x) else math.inf

    def valid(n: float) -> bool:
        return math.isfinite(n) and n > EPS

    n0 = norm(g)
    norms = [norm(r) for r in rows]
    invalid = sum(not valid(n) for n in norms)
    degenerate = not valid(n0)
    ts = [0.0] * k
    if not degenerate:
        for i in range(k):
            if valid(norms[i]):
                c = math.fsum(a * b for a, b in zip(rows[i], g, strict=True)) / (norms[i] * n0)
                ts[i] = max(0.0, c)
    total = math.fsum(ts)
    all_zero = not degenerate and total <= EPS
    if degenerate:
        w = [0.0] * k
    elif all_zero:
        nv = k - invalid
        w = (
            [1.0 / nv if valid(norms[i]) else 0.0 for i in range(k)]
            if fallback == "uniform" and nv
            else [0.0] * k
        )
    else:
        w = [t / total for t in ts]
    vec = [0.0] * p
    for i in range(k):
        if w[i] > 0:
            for j in range(p):
                vec[j] += w[i] * (n0 / norms[i]) * rows[i][j]
    stats = {
        "mean_trust": math.fsum(ts) / k,
        "num_zero_trust": float(sum(t == 0 for t in ts)),
        "num_invalid": float(invalid),
        "server_update_norm": n0,
        "max_weight": max(w),
        "weight_entropy": -math.fsum(x * math.log(x) for x in w if x > 0),
        "server_update_degenerate": float(degenerate),
        "all_zero_trust": float(all_zero),
    }
    return vec, w, stats


def check_against_reference(
    out: Aggregate, u: torch.Tensor, g0: torch.Tensor, tol: float, fallback: str = "none"
) -> None:
    vec, w, stats = reference(u, g0, fallback)
    assert out.weights is not None
    assert out.vector.dtype == u.dtype and out.weights.dtype == u.dtype
    got = out.vector.double().numpy()
    scale = max(float(np.linalg.norm(vec)), float(np.linalg.norm(g0.double().numpy())) * 1e-3, 1e-300)
    assert np.linalg.norm(got - np.array(vec)) <= tol * scale
    np.testing.assert_allclose(out.weights.double().numpy(), w, rtol=0, atol=tol)
    assert set(out.stats) == STAT_NAMES
    for name, value in stats.items():
        assert out.stats[name] == pytest.approx(value, rel=tol, abs=tol, nan_ok=True), name


def random_case(seed: int, k: int, p: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows b_i g0 + noise with random signs and scales, so trust scores span (0, 1] and 0."""
    gen = torch.Generator().manual_seed(seed)
    g0 = torch.randn(p, generator=gen, dtype=torch.float64)
    b = torch.randn(k, 1, generator=gen, dtype=torch.float64) * 1.5
    noise = torch.randn(k, p, generator=gen, dtype=torch.float64)
    scale = torch.exp(torch.randn(k, 1, generator=gen, dtype=torch.float64))
    return ((b * g0 + noise) * scale).to(dtype), (g0 * 0.3).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k", [1, 3, 10, 50])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_matches_slow_reference(seed: int, k: int, dtype: torch.dtype) -> None:
    u, g0 = random_case(seed, k, 23, dtype)
    out = FLTrust()(u, DefenseContext(reference=g0))
    check_against_reference(out, u, g0, 1e-12 if dtype == torch.float64 else 1e-5)
    assert out.stats["num_zero_trust"] < k or out.stats["all_zero_trust"] == 1.0


def test_hand_computed_case_differs_from_fedavg() -> None:
    g0 = torch.tensor([3.0, 4.0], dtype=torch.float64)  # ‖g0‖ = 5
    u = torch.tensor([[6.0, 8.0], [4.0, 0.0], [-30.0, -40.0]], dtype=torch.float64)
    # c = [1, 0.6, -1] -> TS = [1, 0.6, 0]; rescaled rows (3, 4), (5, 0); g = ((3, 4) + 0.6 (5, 0)) / 1.6
    out = FLTrust()(u, DefenseContext(reference=g0))
    torch.testing.assert_close(
        out.vector, torch.tensor([3.75, 2.5], dtype=torch.float64), rtol=1e-15, atol=1e-15
    )
    assert out.weights is not None
    torch.testing.assert_close(out.weights, torch.tensor([0.625, 0.375, 0.0], dtype=torch.float64))
    assert out.stats["mean_trust"] == pytest.approx(1.6 / 3, rel=1e-15)
    assert out.stats["num_zero_trust"] == 1.0
    assert out.stats["num_invalid"] == 0.0
    assert out.stats["server_update_norm"] == pytest.approx(5.0, rel=1e-15)
    assert out.stats["max_weight"] == pytest.approx(0.625, rel=1e-15)
    assert out.stats["weight_entropy"] == pytest.approx(-(0.625 * math.log(0.625) + 0.375 * math.log(0.375)))
    assert out.stats["server_update_degenerate"] == 0.0 and out.stats["all_zero_trust"] == 0.0
    fedavg = FedAvg()(u, DefenseContext()).vector  # (-20/3, -32/3): the rule is engaged, not bypassed
    assert float(torch.linalg.vector_norm(out.vector - fedavg)) > 10


@pytest.mark.parametrize("seed", range(5))
def test_output_norm_at_most_server_norm(seed: int) -> None:
    u, g0 = random_case(seed, 20, 15, torch.float64)
    out = FLTrust()(u, DefenseContext(reference=g0))
    assert float(torch.linalg.vector_norm(out.vector)) <= float(torch.linalg.vector_norm(g0)) * (1 + 1e-12)


def test_rows_equal_to_server_update_give_it_back() -> None:
    g0 = torch.randn(31, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    out = FLTrust()(g0.repeat(6, 1), DefenseContext(reference=g0))
    torch.testing.assert_close(out.vector, g0, rtol=1e-14, atol=1e-14)
    assert out.weights is not None
    torch.testing.assert_close(out.weights, torch.full((6,), 1 / 6, dtype=torch.float64))
    assert out.stats["weight_entropy"] == pytest.approx(math.log(6), rel=1e-12)
    # positive multiples of g0 are rescaled back to it
    multiples = torch.tensor([[0.01], [1.0], [250.0]], dtype=torch.float64) * g0
    torch.testing.assert_close(
        FLTrust()(multiples, DefenseContext(reference=g0)).vector, g0, rtol=1e-14, atol=1e-14
    )


@pytest.mark.parametrize("c", [1e-3, 0.5, 7.0, 1e4])
def test_scaling_a_row_changes_nothing(c: float) -> None:
    u, g0 = random_case(8, 10, 12, torch.float64)
    ctx = DefenseContext(reference=g0)
    out = FLTrust()(u, ctx)
    scaled = u.clone()
    scaled[3] *= c
    out2 = FLTrust()(scaled, ctx)
    assert out.weights is not None and out2.weights is not None
    torch.testing.assert_close(out2.vector, out.vector, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(out2.weights, out.weights, rtol=1e-12, atol=1e-13)


def test_non_positive_cosine_rows_have_no_influence() -> None:
    gen = torch.Generator().manual_seed(9)
    g0 = torch.zeros(6, dtype=torch.float64)
    g0[0] = 2.0
    u = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    u[:3, 0] = u[:3, 0].abs() + 0.5  # rows 0-2 trusted
    u[3, 0] = 0.0  # row 3: exactly orthogonal to g0 (c = 0)
    u[4, 0] = -abs(float(u[4, 0])) - 0.1  # row 4: opposed
    out = FLTrust()(u, DefenseContext(reference=g0))
    assert out.weights is not None and out.weights[3] == 0 and out.weights[4] == 0
    assert out.stats["num_zero_trust"] == 2.0
    for trial in range(5):
        v = u.clone()
        v[3, 1:] = torch.randn(5, generator=gen, dtype=torch.float64) * 10**trial
        v[4] = torch.randn(6, generator=gen, dtype=torch.float64) * 100
        v[4, 0] = -abs(float(v[4, 0])) - 1e-3
        torch.testing.assert_close(
            FLTrust()(v, DefenseContext(reference=g0)).vector, out.vector, rtol=0, atol=0
        )


@pytest.mark.parametrize("bad", ["zero", "tiny", "nan", "inf"])
def test_degenerate_server_update(bad: str) -> None:
    u, g0 = random_case(2, 5, 7, torch.float64)
    g0 = g0.clone()
    if bad == "zero":
        g0.zero_()
    elif bad == "tiny":
        g0.fill_(1e-14)
    else:
        g0[2] = float(bad)
    for fallback in ("none", "uniform"):
        out = FLTrust(fallback=fallback)(u, DefenseContext(reference=g0))
        assert torch.equal(out.vector, torch.zeros(7, dtype=torch.float64))
        assert out.weights is not None and torch.equal(out.weights, torch.zeros(5, dtype=torch.float64))
        assert out.stats["server_update_degenerate"] == 1.0
        assert out.stats["all_zero_trust"] == 0.0
        assert out.stats["num_zero_trust"] == 5.0 and out.stats["mean_trust"] == 0.0
        assert out.stats["max_weight"] == 0.0 and out.stats["weight_entropy"] == 0.0
        check_against_reference(out, u, g0, 1e-12, fallback)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 0.0])
def test_invalid_row_is_excluded(bad: float) -> None:
    u, g0 = random_case(3, 6, 9, torch.float64)
    u[:, 0] = u[:, 0].abs() + 1
    g0 = g0.abs() + 0.1  # every finite row trusted
    dirty = u.clone()
    if bad == 0.0:
        dirty[4] = 0.0  # a zero row is invalid too
    else:
        dirty[4, 5] = bad
    out = FLTrust()(dirty, DefenseContext(reference=g0))
    clean = FLTrust()(torch.cat([u[:4], u[5:]]), DefenseContext(reference=g0))
    assert bool(torch.isfinite(out.vector).all())
    torch.testing.assert_close(out.vector, clean.vector, rtol=1e-14, atol=1e-14)
    assert out.weights is not None and clean.weights is not None
    assert out.weights[4] == 0
    torch.testing.assert_close(torch.cat([out.weights[:4], out.weights[5:]]), clean.weights)
    assert out.stats["num_invalid"] == 1.0
    assert out.stats["num_zero_trust"] == clean.stats["num_zero_trust"] + 1
    check_against_reference(out, dirty, g0, 1e-12)


def test_all_rows_opposing_give_zero() -> None:
    u, g0 = random_case(4, 8, 10, torch.float64)
    u = -(u.abs() + 0.1) * torch.sign(g0)  # every row on the other side of g0
    out = FLTrust()(u, DefenseContext(reference=g0))
    assert torch.equal(out.vector, torch.zeros(10, dtype=torch.float64))
    assert out.weights is not None and torch.equal(out.weights, torch.zeros(8, dtype=torch.float64))
    assert out.stats["all_zero_trust"] == 1.0 and out.stats["server_update_degenerate"] == 0.0
    assert out.stats["num_zero_trust"] == 8.0 and out.stats["mean_trust"] == 0.0
    assert out.stats["max_weight"] == 0.0 and out.stats["weight_entropy"] == 0.0
    check_against_reference(out, u, g0, 1e-12)


def test_uniform_fallback() -> None:
    u, g0 = random_case(5, 7, 10, torch.float64)
    u = -(u.abs() + 0.1) * torch.sign(g0)
    u[2, 3] = float("nan")
    out = FLTrust(fallback="uniform")(u, DefenseContext(reference=g0))
    # equal shares of the rescaled valid rows (‖g0‖/‖u_i‖) u_i
    n0 = float(torch.linalg.vector_norm(g0))
    keep = [0, 1, 3, 4, 5, 6]
    expected = sum(n0 / float(torch.linalg.vector_norm(u[i])) * u[i] for i in keep) / 6
    torch.testing.assert_close(out.vector, expected, rtol=1e-13, atol=1e-13)
    assert out.weights is not None
    assert out.weights.tolist() == [1 / 6, 1 / 6, 0.0, 1 / 6, 1 / 6, 1 / 6, 1 / 6]
    assert out.stats["all_zero_trust"] == 1.0 and out.stats["num_invalid"] == 1.0
    assert out.stats["weight_entropy"] == pytest.approx(math.log(6), rel=1e-13)
    assert float(torch.linalg.vector_norm(out.vector)) <= n0 * (1 + 1e-12)
    check_against_reference(out, u, g0, 1e-12, "uniform")
    # with trusted rows the fallback changes nothing; with no valid row it is the zero update
    u2, g2 = random_case(6, 9, 10, torch.float64)
    a, b = (
        FLTrust(fallback="uniform")(u2, DefenseContext(reference=g2)),
        FLTrust()(u2, DefenseContext(reference=g2)),
    )
    assert torch.equal(a.vector, b.vector)
    nan_rows = torch.full((3, 10), float("nan"), dtype=torch.float64)
    out3 = FLTrust(fallback="uniform")(nan_rows, DefenseContext(reference=g2))
    assert torch.equal(out3.vector, torch.zeros(10, dtype=torch.float64)) and out3.stats["num_invalid"] == 3.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dtype_and_no_mutation(dtype: torch.dtype) -> None:
    u, g0 = random_case(7, 5, 6, dtype)
    u0, g00 = u.clone(), g0.clone()
    out = FLTrust()(u, DefenseContext(reference=g0.float()))  # a float32 reference is cast to the rows' dtype
    assert out.vector.dtype == dtype and out.weights is not None and out.weights.dtype == dtype
    assert torch.equal(u, u0) and torch.equal(g0, g00)


def test_missing_or_misshaped_reference() -> None:
    u, g0 = random_case(0, 3, 4, torch.float64)
    msg = r"fltrust: needs the server's reference update \(set server.root_size > 0\), got none"
    with pytest.raises(InputError, match=msg):
        FLTrust()(u, DefenseContext())
    with pytest.raises(InputError, match="fltrust: reference must have shape"):
        FLTrust()(u, DefenseContext(reference=torch.zeros(5, dtype=torch.float64)))
    with pytest.raises(InputError, match="fltrust"):
        FLTrust()(torch.zeros(4), DefenseContext(reference=g0))


def test_parameters_and_registry() -> None:
    assert FLTrust().fallback == "none"
    message = "defense fltrust: parameter fallback must be one of 'none', 'uniform', got 'mean'"
    with pytest.raises(ParameterError, match=message):
        FLTrust(fallback="mean")
    rule = defenses.create("fltrust", fallback="uniform")
    assert isinstance(rule, FLTrust) and rule.fallback == "uniform"
    assert rule.min_clients(0) == 1 and rule.min_clients(7) == 1
    u, g0 = random_case(1, 4, 3, torch.float64)
    before = rule(u, DefenseContext(reference=g0)).vector
    rule.reset()  # stateless: nothing to forget
    assert torch.equal(rule(u, DefenseContext(reference=g0)).vector, before)


def test_declared_properties_hold() -> None:
    assert FLTrust.properties == {"permutation_invariant", "scale_invariant_rows"}
    rule = FLTrust()
    for seed in range(5):
        u, g0 = random_case(20 + seed, 9, 11, torch.float64)
        gen = torch.Generator().manual_seed(seed)
        ctx = DefenseContext(reference=g0)
        out = rule(u, ctx)
        assert out.weights is not None
        perm = torch.randperm(9, generator=gen)
        pout = rule(u[perm], ctx)
        assert pout.weights is not None
        torch.testing.assert_close(pout.vector, out.vector, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(pout.weights, out.weights[perm], rtol=1e-12, atol=1e-13)
        c = torch.exp(torch.randn(9, 1, generator=gen, dtype=torch.float64) * 2)
        sout = rule(u * c, ctx)  # every row scaled by its own c > 0
        torch.testing.assert_close(sout.vector, out.vector, rtol=1e-12, atol=1e-13)
        w = out.weights
        assert bool((w >= 0).all()) and (abs(float(w.sum()) - 1) < 1e-12 or float(w.abs().sum()) == 0)
