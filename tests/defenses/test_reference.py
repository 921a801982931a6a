"""Every robust rule against an independent reference, on a seeded bank of inputs at scales
1e-10, 1e-5, 1, 1e5 and 1e12 (float64): agreement within 1e-6 relative.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import scipy.optimize
import torch

import robustfl.defenses as D
from robustfl.testing.strategies import SCALES

from ..factories import builtins
from ..factories import defense_ctx as ctx
from . import _refs as ref

# (K, P, f): inside and at the edge of the rules' guarantees
SHAPES = [(7, 5, 1), (11, 20, 2), (16, 3, 3), (23, 40, 5), (9, 1, 2), (4, 6, 0)]


def bank(k: int, p: int, f: int, scale: float, seed: int) -> np.ndarray:
    """Honest Gaussian rows around a shared mean; f rows displaced (outliers of varied size)."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(k, p)) + rng.normal(size=(1, p))
    bad = rng.choice(k, size=f, replace=False)
    u[bad] += rng.normal(size=(f, p)) * rng.choice([3.0, 30.0], size=(f, 1))
    return u * scale


def cases():
    for scale in SCALES:
        for i, (k, p, f) in enumerate(SHAPES):
            yield pytest.param(k, p, f, scale, i, id=f"K{k}-P{p}-f{f}-s{scale:g}")


def assert_rel(ours: torch.Tensor, expected: np.ndarray, rtol: float = 1e-6) -> None:
    exp = np.asarray(expected, dtype=np.float64)
    got = ours.detach().to(torch.float64).numpy()
    err = float(np.max(np.abs(got - exp))) if exp.size else 0.0
    assert err <= rtol * float(np.max(np.abs(exp))), (
        f"max error {err:.3e} vs max |ref| {np.max(np.abs(exp)):.3e}"
    )


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
def test_median_and_trimmed_mean(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    t = torch.from_numpy(u)
    assert_rel(D.create("median")(t, ctx(f)).vector, np.median(u, axis=0), rtol=1e-15)
    assert_rel(D.create("trimmed_mean")(t, ctx(f)).vector, ref.trimmed_mean(u, f), rtol=1e-13)


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
def test_krum_family(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    t = torch.from_numpy(u)
    expected, best = ref.krum(u, f)
    out = D.create("krum")(t, ctx(f))
    assert_rel(out.vector, expected, rtol=0)
    assert out.stats["selected_index"] == best
    assert out.weights is not None and out.weights.tolist() == [1.0 if i == best else 0.0 for i in range(k)]
    for m in (None, 1, max(1, k // 2)):
        mk = D.create("multi_krum") if m is None else D.create("multi_krum", selected=m)
        expected, chosen = ref.multi_krum(u, f, m if m is not None else k - f)
        out = mk(t, ctx(f))
        assert_rel(out.vector, expected, rtol=1e-14)
        assert out.weights is not None
        assert sorted(torch.nonzero(out.weights).flatten().tolist()) == sorted(chosen)
    if k >= 4 * f + 1:
        assert_rel(D.create("bulyan")(t, ctx(f)).vector, ref.bulyan(u, f), rtol=1e-13)


def _gm_objective(u: np.ndarray, z: np.ndarray) -> float:
    return float(np.sum(np.linalg.norm(u - z, axis=1)))


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
def test_geometric_median_objective_matches_scipy(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    out = D.create("geometric_median")(torch.from_numpy(u), ctx(f))
    # scipy on the same problem in units of `scale` (the objective is positively homogeneous)
    v = u / scale

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        diff = z - v
        d = np.linalg.norm(diff, axis=1)
        return float(d.sum()), (diff / np.maximum(d, 1e-300)[:, None]).sum(0)

    start = v.mean(0)
    runs = [
        scipy.optimize.minimize(
            fun, start, jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 10_000}
        )
    ]
    if p <= 6:  # the optimum may sit on a kink (a data point, always for P = 1): add a derivative-free run
        opts = {"xatol": 1e-13, "fatol": 1e-15, "maxiter": 20_000, "maxfev": 40_000}
        runs.append(scipy.optimize.minimize(lambda z: fun(z)[0], start, method="Nelder-Mead", options=opts))
    theirs = min(r.fun for r in runs)
    ours = _gm_objective(u, out.vector.numpy()) / scale
    assert abs(ours - theirs) <= 1e-6 * theirs, (ours, theirs)
    assert out.weights is not None
    assert_rel(out.vector, out.weights.numpy() @ u, rtol=1e-12)  # weights are the last step's beta


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize(("tau", "iterations"), [(None, 1), (None, 3), (0.8, 2)])
def test_centered_clipping_two_rounds(scale: float, tau: float | None, iterations: int) -> None:
    rounds = [bank(9, 6, 2, scale, 10), bank(9, 6, 2, scale, 11)]
    rule = D.create("centered_clipping", tau=None if tau is None else tau * scale, iterations=iterations)
    expected = ref.centered_clipping(rounds, None if tau is None else tau * scale, iterations)
    for u, exp in zip(rounds, expected, strict=True):
        assert_rel(rule(torch.from_numpy(u), ctx(2)).vector, exp, rtol=1e-12)
    rule.reset()
    assert_rel(
        rule(torch.from_numpy(rounds[1]), ctx(2)).vector,
        ref.centered_clipping(rounds[1:], rule.tau, iterations)[0],
    )


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("kappa", [1.0, 0.3])
def test_foolsgold_three_rounds_with_changing_participants(scale: float, kappa: float) -> None:
    rng = np.random.default_rng(5)
    base = rng.normal(size=12)
    sybil = rng.normal(size=12)
    rule = D.create("foolsgold", kappa=kappa)
    history: dict[int, np.ndarray] = {}
    for ids in ([0, 1, 2, 3, 4, 5, 6], [6, 2, 7, 0, 3], [1, 7, 3, 5, 4, 0]):
        u = (
            np.stack(
                [
                    (sybil + 0.01 * rng.normal(size=12)) if i in (5, 6, 7) else base + rng.normal(size=12)
                    for i in ids
                ]
            )
            * scale
        )
        expected = ref.foolsgold_round(history, ids, u, kappa)
        out = rule(torch.from_numpy(u), ctx(0, client_ids=torch.tensor(ids)))
        assert_rel(out.vector, expected, rtol=1e-10)
    sybil_weight = sum(float(out.weights[j]) for j, i in enumerate(ids) if i in (5, 6, 7))
    assert sybil_weight < 0.05  # the near-identical Sybils are found


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
@pytest.mark.parametrize(("subsample", "c"), [(10_000, 1.0), (3, 1.5)])
def test_dnc_matches_numpy_transcription(
    k: int, p: int, f: int, scale: float, seed: int, subsample: int, c: float
) -> None:
    u = bank(k, p, f, scale, seed)
    g = torch.Generator().manual_seed(seed)
    subsets = [torch.sort(torch.randperm(p, generator=g)[:subsample]).values.numpy() for _ in range(5)]
    out = D.create("dnc", subsample=subsample, c=c)(torch.from_numpy(u), ctx(f, seed))
    assert_rel(out.vector, ref.dnc(u, f, c, subsets), rtol=1e-13)


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
def test_flame_matches_slow_transcription(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    out = D.create("flame")(torch.from_numpy(u), ctx(f))
    expected, kept = ref.flame(u)
    assert_rel(out.vector, expected, rtol=1e-12)
    assert out.weights is not None
    assert torch.nonzero(out.weights).flatten().tolist() == kept
    assert out.stats["num_kept"] == len(kept)


def test_flame_noise_is_drawn_from_the_generator_with_std_noise_times_median_norm() -> None:
    u = bank(11, 2000, 2, 1.0, 3)
    plain = D.create("flame")(torch.from_numpy(u), ctx(2, 4)).vector
    noisy = D.create("flame", noise=0.01)(torch.from_numpy(u), ctx(2, 4))
    draw = torch.randn(2000, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    s = float(np.median(np.linalg.norm(u, axis=1)))
    assert noisy.stats["median_norm"] == pytest.approx(s, rel=1e-14)
    assert_rel(noisy.vector - plain, (0.01 * s * draw).numpy(), rtol=1e-12)


def test_krum_refines_near_ties_in_float64() -> None:
    """Rows sharing a large offset: float32 Gram distances are pure rounding, the choice is not."""
    rng = np.random.default_rng(0)
    u32 = (1e4 + rng.normal(size=(12, 300)) * 1e-2 * rng.uniform(0.5, 2, size=(12, 1))).astype(np.float32)
    u = u32.astype(np.float64)  # the reference sees the same float32 values, exactly
    for f in (0, 2, 4):
        out = D.create("krum")(torch.from_numpy(u32), ctx(f))
        assert out.stats["selected_index"] == ref.krum(u, f)[1]
        _, chosen = ref.multi_krum(u, f, 5)
        mk = D.create("multi_krum", selected=5)(torch.from_numpy(u32), ctx(f))
        assert sorted(torch.nonzero(mk.weights).flatten().tolist()) == sorted(chosen)


def test_exact_ties_go_to_the_lower_index() -> None:
    rng = np.random.default_rng(1)
    honest = rng.normal(size=(6, 4))
    u = np.concatenate([honest, np.repeat(honest[2:3], 3, axis=0)])  # three copies of row 2
    out = D.create("krum")(torch.from_numpy(u), ctx(1))
    assert out.stats["selected_index"] == ref.krum(u, 1)[1] == 2
    mk = D.create("multi_krum", selected=2)(torch.from_numpy(u), ctx(1))
    assert torch.nonzero(mk.weights).flatten().tolist() == sorted(ref.multi_krum(u, 1, 2)[1]) == [2, 6]
    assert mk.stats["tie_break"] == 1.0


def test_trimmed_mean_trims_exactly_f_where_scipy_would_not() -> None:
    u = bank(49, 3, 1, 1.0, 0)
    u[0] = 1e9  # one huge row: trimming f = 1 removes it, int(1/49 * 49) = 0 in float does not
    out = D.create("trimmed_mean")(torch.from_numpy(u), ctx(1)).vector.numpy()
    np.testing.assert_allclose(out, np.sort(u, axis=0)[1:48].mean(0), rtol=1e-14)
    assert float(np.abs(out).max()) < 10


def test_float32_in_float32_out_close_to_float64() -> None:
    u = bank(11, 30, 2, 1.0, 2)
    for name in (
        "krum",
        "multi_krum",
        "median",
        "trimmed_mean",
        "bulyan",
        "geometric_median",
        "centered_clipping",
        "foolsgold",
        "flame",
        "dnc",
    ):
        a = D.create(name)(torch.from_numpy(u), ctx(2)).vector
        b = D.create(name)(torch.from_numpy(u).float(), ctx(2)).vector
        assert b.dtype == torch.float32 and a.dtype == torch.float64
        assert float((a - b.double()).abs().max()) <= 1e-4 * float(a.abs().max()), name
        assert not math.isnan(float(b.sum()))


# -- every built-in has its reference ---------------------------------------------------------------
REFERENCES = {  # built-in -> (module in tests/defenses, the test comparing it with a literal transcription)
    "fedavg": ("test_fedavg", "test_weighted_mean_matches_numpy"),
    "fedsim": ("test_fedsim", "test_matches_slow_reference"),
    "fltrust": ("test_fltrust", "test_matches_slow_reference"),
    "krum": ("test_reference", "test_krum_family"),
    "multi_krum": ("test_reference", "test_krum_family"),
    "bulyan": ("test_reference", "test_krum_family"),
    "median": ("test_reference", "test_median_and_trimmed_mean"),
    "trimmed_mean": ("test_reference", "test_median_and_trimmed_mean"),
    "geometric_median": ("test_reference", "test_geometric_median_objective_matches_scipy"),
    "centered_clipping": ("test_reference", "test_centered_clipping_two_rounds"),
    "foolsgold": ("test_reference", "test_foolsgold_three_rounds_with_changing_participants"),
    "flame": ("test_reference", "test_flame_matches_slow_transcription"),
    "dnc": ("test_reference", "test_dnc_matches_numpy_transcription"),
    "signguard": ("test_set_a", "test_set_a_matches_references"),
    "meamed": ("test_set_a", "test_set_a_matches_references"),
    "mda": ("test_set_a", "test_set_a_matches_references"),
    "caf": ("test_set_a", "test_set_a_matches_references"),
    "smea": ("test_set_b", "test_smea_matches_brute_force"),
    "monna": ("test_set_b", "test_monna_matches_transcription"),
    "foundationfl": ("test_set_b", "test_foundationfl_matches_transcription"),
    "fldetector": ("test_set_b", "test_fldetector_lbfgs_and_first_rounds"),
    "lasa": ("test_lasa", "test_lasa_matches_transcription"),
    "clipping": ("test_compose", "test_clipping_matches_literal"),
    "arc": ("test_compose", "test_arc_matches_literal"),
    "bucketing": ("test_compose", "test_bucketing_matches_literal_with_the_same_permutation"),
    "nnm": ("test_compose", "test_nnm_matches_literal"),
}


@pytest.mark.parametrize("name", [*builtins(D.registry), *builtins(D.pre_registry)])
def test_every_builtin_has_a_reference(name: str) -> None:
    """Read from the registries: a new built-in rule or pre-aggregator fails here until a test
    compares it with an independent transcription (and is named in REFERENCES)."""
    assert name in REFERENCES, f"built-in {name!r} has no reference test: write one and add it to REFERENCES"
    module, test = REFERENCES[name]
    found = getattr(importlib.import_module(f".{module}", __package__), test, None)
    assert callable(found), f"REFERENCES names {module}.{test} for {name!r}, which does not exist"
