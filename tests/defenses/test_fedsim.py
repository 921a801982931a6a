"""FedSim (SPEC.md §1) against a slow per-row transcription in float64, plus every listed invariant."""

from __future__ import annotations

import logging
import math
import statistics

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import robustfl.defenses as defenses
from robustfl.defenses.fedsim import FedSim, water_fill
from robustfl.errors import InputError, ParameterError
from robustfl.types import Aggregate, DefenseContext

EPS = 1e-12
STAT_NAMES = {
    "avg_similarity",
    "similarity_variance",
    "max_weight",
    "min_weight",
    "weight_entropy",
    "num_capped",
    "cap_infeasible",
    "fallback_used",
    "excluded",
}


# -- independent references ---------------------------------------------------------------------------


def slow_water_fill(a: list[float], cap: float) -> tuple[list[float], int, bool]:
    """Closed form by sorting: the fewest m largest rows held at c such that the rest, sharing 1 - m c
    in proportion to a, all stay below c (no loop over passes)."""
    pos = [i for i, x in enumerate(a) if x > 0]
    infeasible = cap * len(pos) < 1
    c = 1 / len(pos) if infeasible else cap
    total = math.fsum(a)
    num_capped = sum(a[i] / total > c for i in pos)
    order = sorted(pos, key=lambda i: -a[i])
    out = [0.0] * len(a)
    for m in range(len(order) + 1):
        rest = order[m:]
        mass = math.fsum(a[i] for i in rest)
        if m == len(order) or (1 - m * c) * a[rest[0]] / mass < c:
            for i in order[:m]:
                out[i] = c
            for i in rest:
                out[i] = (1 - m * c) * a[i] / mass
            return out, num_capped, infeasible
    raise AssertionError("unreachable")


def reference(
    u: torch.Tensor,
    w: torch.Tensor | None = None,
    ref: torch.Tensor | None = None,
    basis: str = "model",
    threshold: float = 0.0,
    cap: float = 1.0,
) -> tuple[list[float], list[float], dict[str, float]]:
    """SPEC.md §1 FedSim steps 1-7, one row at a time, in Python floats."""
    rows = [[float(x) for x in row] for row in u.double()]
    k, p = len(rows), len(rows[0])

    def norm(x: list[float]) -> float:
        return math.sqrt(math.fsum(t * t for t in x)) if all(math.isfinite(t) for t in x) else math.nan

    def ok(x: list[float]) -> bool:
        n = norm(x)
        return math.isfinite(n) and n > EPS

    if basis == "model":
        assert w is not None
        r = [float(x) for x in w.double()]
        vs = [[ri + ui for ri, ui in zip(r, row, strict=True)] for row in rows]
    else:
        vs = rows
        if ref is not None:
            r = [float(x) for x in ref.double()]
        else:
            good = [row for row in rows if ok(row)]
            r = [statistics.median(col) for col in zip(*good, strict=True)] if good else [0.0] * p
    valid = [ok(v) for v in vs]
    r_ok = ok(r)
    s = [0.0] * k
    if r_ok:
        for i in range(k):
            if valid[i]:
                cos = math.fsum(a * b for a, b in zip(vs[i], r, strict=True)) / (norm(vs[i]) * norm(r))
                s[i] = min(1.0, max(-1.0, cos))
    sv = [s[i] for i in range(k) if valid[i]] if r_ok else []
    a = [s[i] if valid[i] and r_ok and s[i] >= max(threshold, 0.0) else 0.0 for i in range(k)]
    fallback = math.fsum(a) <= EPS
    if fallback:
        omega, num_capped, infeasible = [0.0] * k, 0, False
    else:
        omega, num_capped, infeasible = slow_water_fill(a, cap)
    vec = [math.fsum(omega[i] * rows[i][j] for i in range(k) if omega[i] > 0) for j in range(p)]
    mean = math.fsum(sv) / len(sv) if sv else 0.0
    stats = {
        "avg_similarity": mean,
        "similarity_variance": math.fsum((x - mean) ** 2 for x in sv) / len(sv) if sv else 0.0,
        "max_weight": max(omega),
        "min_weight": min(omega),
        "weight_entropy": -math.fsum(x * math.log(x) for x in omega if x > 0),
        "num_capped": float(num_capped),
        "cap_infeasible": float(infeasible),
        "fallback_used": float(fallback),
        "excluded": float(k - sum(valid)),
    }
    return vec, omega, stats


def check(out: Aggregate, u: torch.Tensor, tol: float, **kw: object) -> None:
    vec, omega, stats = reference(u, **kw)  # type: ignore[arg-type]
    assert out.weights is not None
    assert out.vector.dtype == u.dtype and out.weights.dtype == u.dtype
    got = out.vector.double().numpy()
    scale = max(float(np.linalg.norm(vec)), 1e-300)
    assert np.linalg.norm(got - np.array(vec)) <= tol * scale + 1e-300
    np.testing.assert_allclose(out.weights.double().numpy(), omega, rtol=0, atol=tol)
    assert set(out.stats) == STAT_NAMES
    for name, value in stats.items():
        assert out.stats[name] == pytest.approx(value, rel=tol, abs=tol), name


def ctx_for(basis: str, w: torch.Tensor | None = None, ref: torch.Tensor | None = None) -> DefenseContext:
    return DefenseContext(global_model=w, reference=ref if basis == "update" else None)


def rows_with_similarities(sims: list[float], p: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Update-basis rows with cos(u_k, r) = sims[k] exactly (up to rounding): r = e_0, u_k in the
    (e_0, e_{k+1}) plane."""
    r = torch.zeros(p, dtype=torch.float64)
    r[0] = 1.0
    u = torch.zeros(len(sims), p, dtype=torch.float64)
    for k, s in enumerate(sims):
        u[k, 0] = s
        u[k, k + 1] = math.sqrt(1 - s * s)
    return u, r


def random_case(
    seed: int, k: int, p: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows b_k d + noise at random scales (cosines spread over [-1, 1]); w and a reference d."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(p, generator=gen, dtype=torch.float64)
    d = torch.randn(p, generator=gen, dtype=torch.float64)
    b = torch.randn(k, 1, generator=gen, dtype=torch.float64) * 1.5
    scale = torch.exp(torch.randn(k, 1, generator=gen, dtype=torch.float64))
    u = (b * d + torch.randn(k, p, generator=gen, dtype=torch.float64)) * scale
    return u.to(dtype), w.to(dtype), d.to(dtype)


# -- against the slow reference -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k", [1, 3, 10, 50])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("basis", ["model", "update", "update-median"])
def test_matches_slow_reference(basis: str, seed: int, k: int, dtype: torch.dtype) -> None:
    u, w, d = random_case(seed, k, 19, dtype)
    ref = d if basis == "update" else None
    name = "update" if basis.startswith("update") else "model"
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for threshold, cap in [(0.0, 1.0), (0.3, 1.0), (0.0, 0.15), (0.2, 0.4)]:
        rule = FedSim(basis=name, threshold=threshold, cap=cap)
        out = rule(u, DefenseContext(global_model=w, reference=ref))
        check(out, u, tol, w=w, ref=ref, basis=name, threshold=threshold, cap=cap)


def test_update_basis_median_reference_of_even_count() -> None:
    """No server reference: r is the coordinate-wise median of the valid rows (mean of the two middle)."""
    u = torch.tensor(
        [[1.0, 4.0], [3.0, 0.0], [2.0, 2.0], [10.0, 1.0], [float("nan"), 1.0]], dtype=torch.float64
    )
    out = FedSim(basis="update")(u, DefenseContext())
    r = torch.tensor([2.5, 1.5], dtype=torch.float64)  # median of the four valid rows
    cos = (u[:4] @ r) / (torch.linalg.vector_norm(u[:4], dim=1) * torch.linalg.vector_norm(r))
    assert out.weights is not None
    torch.testing.assert_close(out.weights[:4], cos / cos.sum(), rtol=1e-14, atol=1e-15)
    assert out.weights[4] == 0 and out.stats["excluded"] == 1.0
    check(out, u, 1e-12, basis="update")


# -- SPEC.md invariants ---------------------------------------------------------------------------------


@pytest.mark.parametrize("basis", ["model", "update"])
@pytest.mark.parametrize("seed", range(4))
def test_weights_are_a_distribution_and_output_is_their_combination(basis: str, seed: int) -> None:
    u, w, d = random_case(seed, 12, 9, torch.float64)
    out = FedSim(basis=basis, cap=0.2)(u, ctx_for(basis, w, d))
    assert out.weights is not None and out.stats["fallback_used"] == 0.0
    npos = int((out.weights > 0).sum())
    assert out.stats["cap_infeasible"] == float(0.2 * npos < 1)
    assert bool((out.weights >= 0).all()) and bool((out.weights <= max(0.2, 1 / npos) + 1e-15).all())
    assert float(out.weights.sum()) == pytest.approx(1.0, abs=1e-14)
    torch.testing.assert_close(out.vector, out.weights @ u, rtol=1e-13, atol=1e-13)
    if basis == "model":  # equivalently the model Σ ω_k v_k
        torch.testing.assert_close(w + out.vector, out.weights @ (w + u), rtol=1e-13, atol=1e-13)
    assert 0 <= out.stats["weight_entropy"] <= math.log(12) + 1e-12


def test_similarities_stay_in_unit_interval() -> None:
    w = torch.randn(40, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 1e3
    u = torch.tensor([[0.1], [3.0], [-0.3], [1e-9]], dtype=torch.float64) * w  # models along ±w: |cos| = 1
    out = FedSim()(u, DefenseContext(global_model=w))
    assert out.stats["avg_similarity"] == 1.0 and out.stats["similarity_variance"] == pytest.approx(
        0, abs=1e-15
    )
    # on the update basis these rows' cosines round to 1 + 2.2e-16 without the clip
    w8 = torch.randn(40, generator=torch.Generator().manual_seed(8), dtype=torch.float64) * 1e3
    u8 = torch.tensor([[0.1], [3.0], [0.3], [1e-9], [7.0], [0.77]], dtype=torch.float64) * w8
    up = FedSim(basis="update")(u8, DefenseContext(reference=w8)).stats
    assert up["avg_similarity"] == 1.0 and up["similarity_variance"] == pytest.approx(0, abs=1e-15)
    u2 = torch.cat([u, -5 * w[None]])  # v = -4w: s = -1 after clipping
    out2 = FedSim()(u2, DefenseContext(global_model=w))
    assert out2.stats["avg_similarity"] == pytest.approx(3 / 5, abs=1e-15)
    assert out2.stats["similarity_variance"] == pytest.approx(0.64, abs=1e-14)
    for seed in range(3):
        uu, ww, dd = random_case(seed, 30, 5, torch.float64)
        for basis in ("model", "update"):
            st_ = FedSim(basis=basis)(uu, ctx_for(basis, ww, dd)).stats
            assert -1 <= st_["avg_similarity"] <= 1 and 0 <= st_["similarity_variance"] <= 1


@pytest.mark.parametrize("basis", ["model", "update"])
@pytest.mark.parametrize("k", [1, 2, 7, 25])
def test_identical_rows_get_uniform_weights(basis: str, k: int) -> None:
    gen = torch.Generator().manual_seed(k)
    w, row = (
        torch.randn(6, generator=gen, dtype=torch.float64),
        torch.randn(6, generator=gen, dtype=torch.float64),
    )
    out = FedSim(basis=basis)(row.repeat(k, 1), DefenseContext(global_model=w))
    assert out.weights is not None
    torch.testing.assert_close(
        out.weights, torch.full((k,), 1 / k, dtype=torch.float64), rtol=1e-14, atol=1e-15
    )
    assert out.stats["weight_entropy"] == pytest.approx(math.log(k), abs=1e-13)
    torch.testing.assert_close(out.vector, row, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("basis", ["model", "update"])
def test_single_row_gets_weight_one(basis: str) -> None:
    gen = torch.Generator().manual_seed(3)
    w, row = (
        torch.randn(5, generator=gen, dtype=torch.float64),
        torch.randn(1, 5, generator=gen, dtype=torch.float64),
    )
    row[0] = row[0] + 0.5 * w  # keep cos(w + u, w) > 0
    out = FedSim(basis=basis, cap=0.1)(row, DefenseContext(global_model=w))
    assert out.weights is not None and out.weights.tolist() == [1.0]
    assert torch.equal(out.vector, row[0]) and out.stats["cap_infeasible"] == 1.0
    assert out.stats["weight_entropy"] == 0.0 and out.stats["max_weight"] == out.stats["min_weight"] == 1.0


def test_anti_correlated_model_gets_zero() -> None:
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(10, generator=gen, dtype=torch.float64)
    u = 0.05 * torch.randn(5, 10, generator=gen, dtype=torch.float64)
    u[2] = -3 * w  # v = -2w: cos = -1
    out = FedSim()(u, DefenseContext(global_model=w))
    assert out.weights is not None and out.weights[2] == 0 and out.stats["excluded"] == 0.0
    assert out.stats["min_weight"] == 0.0
    check(out, u, 1e-12, w=w)


def test_zero_model_is_excluded_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(12, generator=gen, dtype=torch.float64)
    u = 0.1 * torch.randn(4, 12, generator=gen, dtype=torch.float64)
    u[1] = -w  # v = 0
    with caplog.at_level(logging.WARNING, logger="robustfl.defenses.fedsim"):
        out = FedSim()(u, DefenseContext(global_model=w))
    assert any("excluded 1 of 4" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert out.weights is not None and out.weights[1] == 0 and out.stats["excluded"] == 1.0
    clean = FedSim()(u[[0, 2, 3]], DefenseContext(global_model=w))
    assert clean.weights is not None
    torch.testing.assert_close(out.vector, clean.vector, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(out.weights[[0, 2, 3]], clean.weights, rtol=1e-14, atol=1e-15)
    check(out, u, 1e-12, w=w)


def test_zero_row_on_update_basis_is_excluded_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    u, _, d = random_case(6, 5, 7, torch.float64)
    u[3] = 0.0
    with caplog.at_level(logging.WARNING, logger="robustfl.defenses.fedsim"):
        out = FedSim(basis="update")(u, DefenseContext(reference=d))
    assert any("excluded 1 of 5" in r.getMessage() for r in caplog.records)
    assert out.weights is not None and out.weights[3] == 0 and out.stats["excluded"] == 1.0
    check(out, u, 1e-12, ref=d, basis="update")


def test_near_zero_model_is_computed_without_cancellation() -> None:
    """v_k = w + u_k small next to w and u_k: its cosine must still be exact."""
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(16, generator=gen, dtype=torch.float64)
    u = 0.1 * torch.randn(4, 16, generator=gen, dtype=torch.float64)
    u[0] = -w + 1e-7 * torch.randn(16, generator=gen, dtype=torch.float64)  # v_0 tiny, direction random
    u[1] = -w * (1 - 1e-9)  # v_1 = 1e-9 w: cosine 1
    out = FedSim()(u, DefenseContext(global_model=w))
    check(out, u, 1e-12, w=w)
    assert out.weights is not None and out.weights[1] > 0.2


def test_cap_infeasible_gives_uniform() -> None:
    u, r = rows_with_similarities([0.9, 0.05, 0.05])
    out = FedSim(basis="update", cap=0.3)(u, DefenseContext(reference=r))
    assert out.weights is not None
    torch.testing.assert_close(
        out.weights, torch.full((3,), 1 / 3, dtype=torch.float64), rtol=1e-14, atol=1e-15
    )
    assert out.stats["cap_infeasible"] == 1.0 and out.stats["num_capped"] == 1.0
    assert out.stats["weight_entropy"] == pytest.approx(math.log(3), abs=1e-13)
    check(out, u, 1e-12, ref=r, basis="update", cap=0.3)


def test_cap_water_filling_example() -> None:
    u, r = rows_with_similarities([0.6, 0.1, 0.1, 0.1, 0.1])
    out = FedSim(basis="update", cap=0.3)(u, DefenseContext(reference=r))
    assert out.weights is not None
    expected = torch.tensor([0.3, 0.175, 0.175, 0.175, 0.175], dtype=torch.float64)
    torch.testing.assert_close(out.weights, expected, rtol=1e-13, atol=1e-14)
    assert out.stats["cap_infeasible"] == 0.0 and out.stats["num_capped"] == 1.0
    assert out.stats["max_weight"] == pytest.approx(0.3) and out.stats["min_weight"] == pytest.approx(0.175)
    assert out.stats["avg_similarity"] == pytest.approx(0.2, abs=1e-14)
    assert out.stats["similarity_variance"] == pytest.approx(0.04, abs=1e-14)  # mean of (0.16, 4 × 0.01)
    torch.testing.assert_close(out.vector, expected @ u, rtol=1e-14, atol=1e-15)
    # an uncapped rule gives the plain shares a / Σa
    plain = FedSim(basis="update")(u, DefenseContext(reference=r))
    assert plain.weights is not None
    torch.testing.assert_close(plain.weights, torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64))
    assert plain.stats["num_capped"] == 0.0


def test_cap_cascades_over_several_passes() -> None:
    # shares (0.4, 0.3, 0.15, 0.15) at c = 0.3: pass 1 caps row 0 -> row 1 gets 0.6·0.3/0.6 = 0.3 (saturates
    # too), leaving 0.4 for rows 2-3 -> (0.3, 0.3, 0.2, 0.2)
    u, r = rows_with_similarities([0.8, 0.6, 0.3, 0.3])
    out = FedSim(basis="update", cap=0.3)(u, DefenseContext(reference=r))
    assert out.weights is not None
    expected = torch.tensor([0.3, 0.3, 0.2, 0.2], dtype=torch.float64)
    torch.testing.assert_close(out.weights, expected, rtol=1e-13, atol=1e-14)
    assert out.stats["num_capped"] == 1.0  # only row 0's share exceeded c before the cap


def test_threshold_removes_rows_below_it() -> None:
    u, r = rows_with_similarities([0.9, 0.6, 0.3, -0.2])
    out = FedSim(basis="update", threshold=0.5)(u, DefenseContext(reference=r))
    assert out.weights is not None
    torch.testing.assert_close(out.weights, torch.tensor([0.6, 0.4, 0.0, 0.0], dtype=torch.float64))
    assert out.stats["avg_similarity"] == pytest.approx(0.4, abs=1e-14)  # over V, not over the kept rows
    relu = FedSim(basis="update", threshold=-0.5)(u, DefenseContext(reference=r))  # τ < 0 acts as 0
    assert relu.weights is not None
    torch.testing.assert_close(relu.weights, torch.tensor([0.5, 1 / 3, 1 / 6, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("basis", ["model", "update"])
def test_all_rows_below_threshold_fall_back_to_zero_update(basis: str) -> None:
    gen = torch.Generator().manual_seed(8)
    w = torch.randn(9, generator=gen, dtype=torch.float64)
    u = -(2 + torch.rand(4, 1, generator=gen, dtype=torch.float64)) * w + 0.01 * torch.randn(
        4, 9, generator=gen, dtype=torch.float64
    )
    out = FedSim(basis=basis, cap=0.5)(
        u, DefenseContext(global_model=w, reference=w if basis == "update" else None)
    )
    assert torch.equal(out.vector, torch.zeros(9, dtype=torch.float64))
    assert out.weights is not None and torch.equal(out.weights, torch.zeros(4, dtype=torch.float64))
    assert out.stats["fallback_used"] == 1.0 and out.stats["weight_entropy"] == 0.0
    assert out.stats["max_weight"] == 0.0 and out.stats["min_weight"] == 0.0
    assert out.stats["avg_similarity"] < -0.9  # still reported over V
    assert out.stats["num_capped"] == 0.0 and out.stats["cap_infeasible"] == 0.0
    check(out, u, 1e-12, w=w, ref=w, basis=basis, cap=0.5)


@pytest.mark.parametrize("basis", ["model", "update"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_row_excluded(basis: str, bad: float, caplog: pytest.LogCaptureFixture) -> None:
    u, w, d = random_case(9, 6, 8, torch.float64)
    u = u.abs() + 0.1
    w, d = w.abs() + 1.0, d.abs() + 0.1  # every finite row kept
    dirty = u.clone()
    dirty[2, 4] = bad
    with caplog.at_level(logging.WARNING, logger="robustfl.defenses.fedsim"):
        out = FedSim(basis=basis)(dirty, ctx_for(basis, w, d))
    assert any("excluded 1 of 6" in r.getMessage() for r in caplog.records)
    clean = FedSim(basis=basis)(u[[0, 1, 3, 4, 5]], ctx_for(basis, w, d))
    assert bool(torch.isfinite(out.vector).all()) and out.stats["excluded"] == 1.0
    torch.testing.assert_close(out.vector, clean.vector, rtol=1e-14, atol=1e-15)
    assert out.weights is not None and clean.weights is not None and out.weights[2] == 0
    torch.testing.assert_close(out.weights[[0, 1, 3, 4, 5]], clean.weights, rtol=1e-14, atol=1e-15)
    check(out, dirty, 1e-12, w=w, ref=d, basis=basis)


@pytest.mark.parametrize(
    "case", ["zero-model", "nan-model", "zero-reference", "all-rows-zero", "all-rows-nan"]
)
def test_degenerate_reference_or_empty_v_keeps_the_model(case: str, caplog: pytest.LogCaptureFixture) -> None:
    u, w, d = random_case(10, 4, 6, torch.float64)
    basis = "model" if case.endswith("model") else "update"
    ref: torch.Tensor | None = d
    if case == "zero-model":
        w = torch.zeros(6, dtype=torch.float64)
    elif case == "nan-model":
        w = w.clone()
        w[0] = float("nan")
    elif case == "zero-reference":
        ref = torch.zeros(6, dtype=torch.float64)
    else:
        u = torch.zeros_like(u) if case == "all-rows-zero" else torch.full_like(u, float("nan"))
        ref = None  # median of no valid row
    with caplog.at_level(logging.WARNING, logger="robustfl.defenses.fedsim"):
        out = FedSim(basis=basis)(u, DefenseContext(global_model=w, reference=ref))
    assert caplog.records  # every one of these paths says why it kept the model
    assert torch.equal(out.vector, torch.zeros(6, dtype=torch.float64))
    assert out.weights is not None and torch.equal(out.weights, torch.zeros(4, dtype=torch.float64))
    assert out.stats["fallback_used"] == 1.0 and out.stats["weight_entropy"] == 0.0
    assert out.stats["avg_similarity"] == 0.0 and out.stats["similarity_variance"] == 0.0


@pytest.mark.parametrize("c", [1e-3, 0.5, 4.0, 1e3])
def test_update_basis_row_scaling_invariance_model_basis_not(c: float) -> None:
    u, w, d = random_case(11, 8, 10, torch.float64)
    u[5] = u[5].abs() + 0.1  # row 5 kept on both bases
    w, d = w.abs() + 1.0, d.abs() + 0.1
    scaled = u.clone()
    scaled[5] *= c
    upd = FedSim(basis="update")
    a, b = upd(u, DefenseContext(reference=d)), upd(scaled, DefenseContext(reference=d))
    assert a.weights is not None and b.weights is not None
    torch.testing.assert_close(b.weights, a.weights, rtol=1e-13, atol=1e-14)
    mod = FedSim(basis="model")
    a2, b2 = mod(u, DefenseContext(global_model=w)), mod(scaled, DefenseContext(global_model=w))
    assert a2.weights is not None and b2.weights is not None
    assert float((b2.weights - a2.weights).abs().max()) > 1e-4  # v = w + c·u changes direction


@pytest.mark.parametrize("basis", ["model", "update", "update-median"])
def test_permuting_rows_permutes_weights(basis: str) -> None:
    u, w, d = random_case(12, 11, 7, torch.float64)
    name = "update" if basis.startswith("update") else "model"
    rule = FedSim(basis=name, cap=0.2, threshold=0.1)
    ctx = DefenseContext(global_model=w, reference=d if basis == "update" else None)
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(0))
    a, b = rule(u, ctx), rule(u[perm], ctx)
    assert a.weights is not None and b.weights is not None
    torch.testing.assert_close(b.weights, a.weights[perm], rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(b.vector, a.vector, rtol=1e-13, atol=1e-14)


def test_ordinary_models_have_nonzero_similarity_and_near_uniform_weights() -> None:
    """The seed code's bug returned s = 0 for every client; the IID scenario check: within 10% of uniform."""
    gen = torch.Generator().manual_seed(13)
    w = 0.1 * torch.randn(500, generator=gen, dtype=torch.float64)  # init_scale noise
    u = 0.01 * torch.randn(10, 500, generator=gen, dtype=torch.float64)
    out = FedSim()(u, DefenseContext(global_model=w))
    assert out.stats["avg_similarity"] > 0.9
    assert out.weights is not None
    assert bool(((out.weights - 0.1).abs() <= 0.01).all())
    # one client whose model is a random vector orthogonal to w gets weight < 0.05 (here exactly 0)
    z = torch.randn(500, generator=gen, dtype=torch.float64)
    z = z - (z @ w) / (w @ w) * w
    u[9] = z - w
    out2 = FedSim()(u, DefenseContext(global_model=w))
    assert out2.weights is not None and float(out2.weights[9]) < 0.05


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dtype_and_no_mutation(dtype: torch.dtype) -> None:
    u, w, d = random_case(14, 5, 6, dtype)
    copies = [t.clone() for t in (u, w, d)]
    for basis in ("model", "update"):
        out = FedSim(basis=basis)(u, DefenseContext(global_model=w.double(), reference=d))
        assert out.vector.dtype == dtype and out.weights is not None and out.weights.dtype == dtype
    assert all(torch.equal(a, b) for a, b in zip((u, w, d), copies, strict=True))


def test_missing_or_misshaped_context() -> None:
    u, w, d = random_case(0, 3, 4, torch.float64)
    with pytest.raises(InputError, match="fedsim: basis 'model' needs the global model"):
        FedSim()(u, DefenseContext())
    with pytest.raises(InputError, match="fedsim: ctx.global_model must have shape"):
        FedSim()(u, DefenseContext(global_model=torch.zeros(5)))
    with pytest.raises(InputError, match="fedsim: ctx.reference must have shape"):
        FedSim(basis="update")(u, DefenseContext(reference=torch.zeros(2)))
    with pytest.raises(InputError, match="fedsim"):
        FedSim()(torch.zeros(4), DefenseContext(global_model=w))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"basis": "gradient"}, "basis"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": float("nan")}, "threshold"),
        ({"threshold": "0.5"}, "threshold"),
        ({"cap": 0.0}, "cap"),
        ({"cap": 1.01}, "cap"),
        ({"cap": True}, "cap"),
    ],
)
def test_parameter_validation(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ParameterError, match=f"fedsim: parameter {name} must be"):
        FedSim(**kwargs)  # type: ignore[arg-type]


def test_defaults_registry_and_interface() -> None:
    rule = FedSim()
    assert (rule.basis, rule.threshold, rule.cap) == ("model", 0.0, 1.0)
    made = defenses.create("fedsim", basis="update", threshold=0.2, cap=0.5)
    assert isinstance(made, FedSim) and (made.basis, made.threshold, made.cap) == ("update", 0.2, 0.5)
    assert rule.min_clients(0) == 1 and rule.min_clients(9) == 1
    u, w, _ = random_case(1, 4, 3, torch.float64)
    before = rule(u, DefenseContext(global_model=w)).vector
    rule.reset()  # stateless: nothing to forget
    assert torch.equal(rule(u, DefenseContext(global_model=w)).vector, before)


def test_declared_properties_hold() -> None:
    assert FedSim.properties == {"permutation_invariant"}
    for seed in range(4):
        u, w, d = random_case(30 + seed, 9, 8, torch.float64)
        gen = torch.Generator().manual_seed(seed)
        for basis in ("model", "update"):
            rule = FedSim(basis=basis, cap=0.3)
            ctx = DefenseContext(global_model=w)  # update basis: the median reference
            perm = torch.randperm(9, generator=gen)
            a, b = rule(u, ctx), rule(u[perm], ctx)
            assert a.weights is not None and b.weights is not None
            torch.testing.assert_close(b.weights, a.weights[perm], rtol=1e-13, atol=1e-15)
            torch.testing.assert_close(b.vector, a.vector, rtol=1e-13, atol=1e-14)


# -- the water-filling cap, property-tested --------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(
        st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1.0)), min_size=1, max_size=30
    ).filter(lambda xs: sum(xs) > 1e-9),
    cap=st.floats(min_value=1e-3, max_value=1.0),
)
def test_water_filling_properties(a: list[float], cap: float) -> None:
    omega_t, num_capped, infeasible = water_fill(torch.tensor(a, dtype=torch.float64), cap)
    omega = omega_t.tolist()
    npos = sum(x > 0 for x in a)
    assert math.fsum(omega) == pytest.approx(1.0, abs=1e-12)
    if infeasible:
        assert cap * npos < 1
        assert omega == pytest.approx([1 / npos if x > 0 else 0.0 for x in a], abs=1e-12)
    else:
        assert max(omega) <= cap + 1e-12
    for i in range(len(a)):
        if a[i] == 0:
            assert omega[i] == 0.0
        for j in range(len(a)):
            if a[i] <= a[j]:
                assert omega[i] <= omega[j] + 1e-15
    expected, ref_capped, ref_infeasible = slow_water_fill(a, cap)
    assert omega == pytest.approx(expected, abs=1e-12)
    assert (num_capped, infeasible) == (ref_capped, ref_infeasible)
