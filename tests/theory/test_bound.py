"""``robustfl bound``: Theorem 1's constants, the setting's gradients, the lemma checks against a slow
literal transcription, the fits, and the whole command on a small scenario with its claims."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats as sps

from robustfl import attacks, defenses
from robustfl.capabilities import DefenseBase
from robustfl.cli import main
from robustfl.errors import ConfigError, ParameterError
from robustfl.scenario import load_scenario
from robustfl.theory import bound as B
from robustfl.theory import constants as K
from robustfl.types import Aggregate, DefenseContext, Knowledge

SMALL = """
[task]
name = "ridge"
dim = 8
samples_per_client = 200
cond = 2.0

[federation]
clients = 20

[server]
root_size = 50

[bound]
fractions = [0.0, 0.6, 0.9]
root_sizes = [32, 256, 2048]
draws = 40
rounds = 40
attacks = ["none", "sign_flip", "scaling", "similarity_poisoning", { name = "fltrust_adaptive", steps = 3 }]
defenses = ["fltrust", "fedavg", "median"]
"""


# -- constants -----------------------------------------------------------------------------------
def _rho_literal_ref(mu: float, lip: float, alpha: float) -> float:
    return 1 - (math.sqrt(1 - mu**2 / (4 * lip**2)) + 2 * alpha * lip)


def _rho_proof_ref(mu: float, lip: float, alpha: float) -> float:
    return 1 - (math.sqrt(1 - alpha * mu + alpha**2 * lip**2) + 2 * alpha * lip)


def test_rho_is_negative_over_a_grid() -> None:
    count = 0
    for lip in (0.1, 1.0, 7.0):
        for mu in lip * np.array([1e-3, 0.05, 0.3, 0.7, 1.0]):
            for alpha in np.geomspace(1e-5, 10, 25) / lip:
                r = K.rho(float(mu), lip, float(alpha))
                assert r == pytest.approx(_rho_proof_ref(float(mu), lip, float(alpha)), abs=1e-14)
                assert r < 0, (mu, lip, alpha)
                count += 1
    assert count == 3 * 5 * 25
    # Delta2 > 0 only lowers it
    assert K.rho(0.3, 1.0, 0.1, delta2=0.5) < K.rho(0.3, 1.0, 0.1)


def test_rho_literal_can_be_positive_at_a_small_alpha() -> None:
    # mu = 0.25, L = 1, alpha = 1e-3: 1 - sqrt(1 - 1/64) - 0.002 = 0.005843...
    lit = K.rho_literal(0.25, 1.0, 1e-3)
    assert lit == pytest.approx(1 - math.sqrt(63 / 64) - 0.002, abs=1e-15)
    assert lit > 0
    assert K.rho(0.25, 1.0, 1e-3) < 0  # the proof does not cover that alpha
    # at Lemma 2's alpha the two agree, and both are negative: 2 alpha L = mu / L > 1 - sqrt(1 - mu^2/4L^2)
    a = K.lemma_alpha(0.25, 1.0)
    assert a == pytest.approx(0.125)
    assert K.rho(0.25, 1.0, a) == pytest.approx(K.rho_literal(0.25, 1.0, a), abs=1e-15)
    assert K.rho(0.25, 1.0, a) == pytest.approx(_rho_literal_ref(0.25, 1.0, a)) and K.rho(0.25, 1.0, a) < 0


def test_constants_refuse_bad_values() -> None:
    with pytest.raises(ParameterError, match="mu"):
        K.rho(2.0, 1.0, 0.1)
    with pytest.raises(ParameterError, match="alpha"):
        K.rho(0.5, 1.0, 0.0)
    with pytest.raises(ParameterError, match="delta"):
        K.delta1(1.0, 10, 5, delta=1.5)
    # out of the theorem's domain: a negative Delta2 gave a positive rho ("the guarantee holds")
    for call, needle in [(lambda: K.rho(0.5, 1.0, 0.1, delta2=-1), "delta2 must be a finite number >= 0"),
                         (lambda: K.rho_literal(0.5, 1.0, 0.1, delta2=float("nan")), "delta2"),
                         (lambda: K.delta1(-1.0, 100, 10), "sigma1 must be a finite number >= 0"),
                         (lambda: K.delta1(1.0, 1.5, 10), "root_size must be an integer >= 1, got 1.5")]:
        with pytest.raises(ParameterError, match=needle):
            call()


def test_delta1_by_hand() -> None:
    # sigma1 = 2, |D0| = 50, d = 4, delta = 0.1: 2 * sqrt(2/50) * sqrt(4 ln 6 + ln 30)
    assert K.delta1(2.0, 50, 4, 0.1) == pytest.approx(2 * 0.2 * math.sqrt(4 * math.log(6) + math.log(30)))


def test_sigma1_closed_form_matches_monte_carlo() -> None:
    g = torch.Generator().manual_seed(3)
    d = 5
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    sigma = (q * torch.tensor([1.0, 0.7, 0.5, 0.3, 0.2], dtype=torch.float64)) @ q.T
    w_true = torch.randn(d, generator=g, dtype=torch.float64)
    l2, noise = 0.3, 0.4  # a large l2 so that w* - w_true matters
    w_star = torch.linalg.solve(sigma + l2 * torch.eye(d, dtype=torch.float64), sigma @ w_true)
    from robustfl.tasks.ridge import sampler

    mc = K.sigma1_monte_carlo(sampler(sigma, w_true, noise), w_star, l2, 400_000, g)
    exact = K.sigma1_ridge(sigma, w_true, w_star, noise)
    assert exact == pytest.approx(mc, rel=0.02)


# -- the setting ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bound") / "small.toml"
    path.write_text(SMALL)
    return path


@pytest.fixture(scope="module")
def setting(small: Path) -> B.Setting:
    return B.Setting.build(load_scenario(small), 0, torch.device("cpu"))


def test_client_gradients_match_autograd_of_the_task_loss(small: Path, setting: B.Setting) -> None:
    from robustfl.simulation.runner import build_problem

    p = build_problem(load_scenario(small), 0)
    w = torch.randn(p.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ours = setting.client_grads(w)
    for k in (0, 7, 19):
        wk = w.clone().requires_grad_(True)
        batch = tuple(t[k] for t in p.client_data)
        (ref,) = torch.autograd.grad(p.loss(wk, batch, p.client_mask[k]), wk)
        torch.testing.assert_close(ours[k], ref, rtol=1e-10, atol=1e-12)


def test_population_gradient_and_optimum(setting: B.Setting) -> None:
    ex_sigma, w_true, l2 = setting.sigma.numpy(), setting.w_true.numpy(), setting.l2
    w = np.linspace(-1, 1, len(w_true))

    def f_pop(v: np.ndarray) -> float:  # F up to the constant noise^2 / 2
        return 0.5 * (v - w_true) @ ex_sigma @ (v - w_true) + 0.5 * l2 * v @ v

    h = 1e-6
    fd = np.array([(f_pop(w + h * e) - f_pop(w - h * e)) / (2 * h) for e in np.eye(len(w))])
    np.testing.assert_allclose(setting.grad(torch.from_numpy(w)).numpy(), fd, rtol=1e-6, atol=1e-8)
    assert float(torch.linalg.vector_norm(setting.grad(setting.w_star))) < 1e-12
    evals = np.linalg.eigvalsh(ex_sigma + l2 * np.eye(len(w)))
    cs = setting.constants(None)
    assert (cs.mu, cs.L) == pytest.approx((evals[0], evals[-1]))
    assert cs.alpha == pytest.approx(evals[0] / (2 * evals[-1] ** 2))


def test_constants_at_another_alpha(setting: B.Setting) -> None:
    cs = setting.constants(0.01)
    evals = torch.linalg.eigvalsh(setting.hessian)
    assert cs.alpha == 0.01 and cs.alpha_lemma == pytest.approx(cs.mu / (2 * cs.L**2))
    assert cs.rho == pytest.approx(_rho_proof_ref(cs.mu, cs.L, 0.01))
    assert cs.rho_literal == pytest.approx(_rho_literal_ref(cs.mu, cs.L, 0.01))
    assert cs.gradient_descent_factor == pytest.approx(float((1 - 0.01 * evals).abs().max()))
    assert cs.theorem_floor is None and cs.theorem_vacuous


def _literal_fltrust(rows: np.ndarray, g0: np.ndarray) -> np.ndarray:
    """FLTrust by the paper's formula, one row at a time."""
    num, total = np.zeros_like(g0), 0.0
    for u in rows:
        c = u @ g0 / (np.linalg.norm(u) * np.linalg.norm(g0))
        ts = max(0.0, c)
        num += ts * (np.linalg.norm(g0) / np.linalg.norm(u)) * u
        total += ts
    return num / total if total > 1e-12 else np.zeros_like(g0)


def test_trajectory_and_lemma_columns_match_a_slow_literal_replay(setting: B.Setting) -> None:
    """Sign flip at f = 12 of 20 on FLTrust: iterates, Lemma 1 and Lemma 2 columns, root error."""
    st, cs, f, rounds = setting, setting.constants(None), 12, 15
    traj = B.run_trajectory(
        st,
        attacks.create("sign_flip"),
        defenses.create("fltrust"),
        f=f,
        f_hat=f,
        alpha=cs.alpha,
        alpha_lemma=cs.alpha_lemma,
        lemma2_factor=cs.lemma2_factor,
        rounds=rounds,
        root=st.root,
        attack_gen=torch.Generator().manual_seed(0),
        defense_gen=torch.Generator().manual_seed(0),
        granted=Knowledge.grant("full"),
        check=True,
    )
    assert traj.checks is not None
    byz = set(st.byz_order[:f].tolist())
    a, b = st.a.numpy(), st.b.numpy()
    x0, y0 = (t.numpy() for t in st.root)
    sig, wt, l2, ws = st.sigma.numpy(), st.w_true.numpy(), st.l2, st.w_star.numpy()
    w = st.w0.numpy().copy()
    q = math.sqrt(1 - cs.mu**2 / (4 * cs.L**2))
    for t in range(rounds):
        grads = np.stack([a[k] @ w - b[k] + l2 * w for k in range(st.num_clients)])
        # sign flip sends -own in update convention, i.e. +grad; negated back: the row is -grad F_k
        rows = np.stack([-grads[k] if k in byz else grads[k] for k in range(st.num_clients)])
        g0 = x0.T @ (x0 @ w - y0) / len(y0) + l2 * w
        g = _literal_fltrust(rows, g0)
        gf = sig @ (w - wt) + l2 * w
        lhs1, rhs1 = np.linalg.norm(g - gf), 3 * np.linalg.norm(g0 - gf) + 2 * np.linalg.norm(gf)
        lhs2, rhs2 = np.linalg.norm(w - cs.alpha_lemma * gf - ws), q * np.linalg.norm(w - ws)
        ref = [lhs1, rhs1, lhs2, rhs2, np.linalg.norm(g0 - gf)]
        np.testing.assert_allclose(traj.checks[t], ref, rtol=1e-9)
        assert lhs1 <= rhs1 and lhs2 <= rhs2
        assert traj.errors[t] == pytest.approx(np.linalg.norm(w - ws), rel=1e-9)
        w = w - cs.alpha * g
    assert traj.errors[-1] == pytest.approx(np.linalg.norm(w - ws), rel=1e-9)


def test_divergence_stops_the_run(setting: B.Setting) -> None:
    cs = setting.constants(None)
    traj = B.run_trajectory(
        setting,
        attacks.create("scaling"),
        defenses.create("fedavg"),
        f=18,
        f_hat=18,
        alpha=cs.alpha,
        alpha_lemma=cs.alpha_lemma,
        lemma2_factor=cs.lemma2_factor,
        rounds=200,
        root=setting.root,
        attack_gen=torch.Generator(),
        defense_gen=torch.Generator(),
        granted=Knowledge.grant("full"),
        check=False,
    )
    assert traj.status == "diverged" and traj.final_error is None and traj.rounds < 200


class _NoisyMean(DefenseBase):
    """The mean plus one N(0, 1e-3) draw per coordinate from the round's stream; it records the
    stream's state at every call made with the round's own generator (the real aggregations)."""

    def __init__(self, stream: torch.Generator) -> None:
        self.stream, self.real_states, self.calls = stream, [], 0

    def __call__(self, updates: torch.Tensor, ctx: DefenseContext) -> Aggregate:
        assert ctx.generator is not None
        self.calls += 1
        if ctx.generator is self.stream:
            self.real_states.append(ctx.generator.get_state())
        noise = torch.randn(updates.shape[1], generator=ctx.generator, dtype=updates.dtype)
        return Aggregate(vector=updates.mean(0) + 1e-3 * noise, weights=None, stats={})


@pytest.mark.parametrize("steps", [0, 5])
def test_oracle_trials_leave_the_rounds_defense_stream_alone(setting: B.Setting, steps: int) -> None:
    """An oracle attack's trials run on a copy of the defense's stream (as in the scenario runner):
    the real aggregation of round t sees the stream after exactly t real draws, however many trials
    the search made (21 + steps + 1 a round)."""
    cs, rounds, seed = setting.constants(None), 4, 11
    stream = torch.Generator().manual_seed(seed)
    rule = _NoisyMean(stream)
    B.run_trajectory(
        setting, attacks.create("optimal", steps=steps), rule, f=6, f_hat=6, alpha=cs.alpha,
        alpha_lemma=cs.alpha_lemma, lemma2_factor=cs.lemma2_factor, rounds=rounds, root=setting.root,
        attack_gen=torch.Generator().manual_seed(0), defense_gen=stream,
        granted=Knowledge.grant("full"), check=False,
    )
    assert rule.calls == rounds * (1 + 21 + steps + (1 if steps else 0))  # the trials did run
    ref = torch.Generator().manual_seed(seed)
    expected = []
    for _ in range(rounds):  # one draw of P normals per real call, nothing else
        expected.append(ref.get_state())
        torch.randn(setting.w0.shape[0], generator=ref, dtype=torch.float64)
    assert len(rule.real_states) == rounds
    assert all(torch.equal(a, b) for a, b in zip(rule.real_states, expected, strict=True))


# -- fits and JSON -------------------------------------------------------------------------------
def test_loglog_slope_matches_scipy_and_a_dummy_variable_fit() -> None:
    rng = np.random.default_rng(0)
    x = np.repeat([10.0, 40.0, 160.0, 640.0], 30)
    y = 3 * x**-0.5 * np.exp(rng.normal(0, 0.2, len(x)))
    fit = B.loglog_slope(x, y)
    ref = sps.linregress(np.log(x), np.log(y))
    half = sps.t.ppf(0.975, len(x) - 2) * ref.stderr
    assert fit["estimate"] == pytest.approx(ref.slope)
    assert fit["ci95"] == pytest.approx([ref.slope - half, ref.slope + half])
    # two groups with their own intercepts: the same slope as least squares with a dummy column
    g = np.arange(len(x)) % 2
    y2 = y * np.where(g == 1, 5.0, 1.0)
    design = np.column_stack([np.log(x), g == 0, g == 1]).astype(float)
    coef, *_ = np.linalg.lstsq(design, np.log(y2), rcond=None)
    assert B.loglog_slope(x, y2, g)["estimate"] == pytest.approx(coef[0])
    # too few points: no estimate
    assert B.loglog_slope([1.0], [1.0])["estimate"] is None


def test_linear_rate_of_a_geometric_sequence() -> None:
    t = np.arange(201)
    e = np.maximum(4 * 0.93**t, 1e-3)  # geometric, then a flat floor
    fit = B.linear_rate(e)
    assert fit["estimate"] == pytest.approx(0.93, rel=1e-9) and fit["floor"] == pytest.approx(1e-3)
    assert fit["rounds_fitted"] == int(np.nonzero(e <= 3e-3)[0][0])


def test_non_finite_values_become_null() -> None:
    out = B.to_json({"a": math.inf, "b": [math.nan, 1.5, np.float64(-np.inf)], "c": (np.int64(3), True)})
    assert out == {"a": None, "b": [None, 1.5, None], "c": [3, True]}
    json.dumps(out, allow_nan=False)


# -- the plan ------------------------------------------------------------------------------------
def test_plan_validation(small: Path) -> None:
    with pytest.raises(ConfigError, match="ridge"):
        B.Plan.of(load_scenario(small, ["task.name=quadratic"]))
    with pytest.raises(ConfigError, match=r"bound\.fractions"):
        B.Plan.of(load_scenario(small, ["bound.fractions=[0.0, 1.0]"]))
    with pytest.raises(ConfigError, match=r"bound\.root_sizes"):
        B.Plan.of(load_scenario(small, ["bound.root_sizes=[64]"]))
    plan = B.Plan.of(load_scenario(small, ['bound.attacks=["sign_flip"]', 'bound.defenses=["median"]']))
    assert plan.attacks == ("none", "sign_flip") and plan.defenses == ("fltrust", "median")


def test_floor_draws() -> None:
    assert B.floor_draws(200) == 3 and B.floor_draws(2) == 2 and B.floor_draws(40) == 2


# -- the whole command on the small scenario -------------------------------------------------------
@pytest.fixture(scope="module")
def ran(small: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("bound_out")
    code = main(["bound", str(small), "--json", str(out / "b.json"), "--plot", str(out / "b.png"), "--quiet"])
    return code, json.loads((out / "b.json").read_text()), out / "b.png"


def test_cli_writes_json_and_png(ran: tuple[int, dict[str, Any], Path]) -> None:
    code, r, png = ran
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    for key, typ in {
        "rho": float,
        "rho_literal": float,
        "theorem_vacuous": bool,
        "lemma1_violations": int,
        "lemma1_max_ratio": float,
        "lemma2_violations": int,
        "rounds_checked": int,
        "fractions": list,
        "root_optimum_error": float,
        "root_error_slope": dict,
        "floor_slope": dict,
        "linear_rate": dict,
    }.items():
        assert isinstance(r[key], typ), key
    for key in ("root_error_slope", "floor_slope"):
        assert isinstance(r[key]["estimate"], float) and len(r[key]["ci95"]) == 2
    assert isinstance(r["floor_slope"]["meaning"], str) and r["floor_slope"]["meaning"]
    rows = r["fractions"]
    assert {(x["attack"], x["fraction"], x["defense"]) for x in rows} == {
        (a, f, d)
        for a in ("none", "sign_flip", "scaling", "similarity_poisoning", "fltrust_adaptive")
        for f in (0.0, 0.6, 0.9)
        for d in ("fltrust", "fedavg", "median")
    }
    assert all(set(x) >= {"fraction", "attack", "defense", "final_error"} for x in rows)


def test_cli_claims(ran: tuple[int, dict[str, Any], Path], setting: B.Setting) -> None:
    _, r, _ = ran
    cs = setting.constants(None)
    # the theorem as proved is vacuous
    assert r["rho"] == pytest.approx(_rho_proof_ref(cs.mu, cs.L, cs.alpha))
    assert r["rho"] < 0 and r["theorem_vacuous"] is True
    # lemmas: no violation; FLTrust rounds = (1 + 4 attacks x 2 nonzero fractions
    # + 5 attacks x 3 root sizes x 2 floor draws) x 40 rounds
    assert r["lemma1_violations"] == 0 and r["lemma2_violations"] == 0
    assert 0 < r["lemma1_max_ratio"] <= 1 and 0 < r["lemma2_max_ratio"] <= 1
    assert r["rounds_checked"] == (1 + 4 * 2 + 5 * 3 * 2) * 40
    assert set(r["floor_slopes"]) == {
        "none",
        "sign_flip",
        "scaling",
        "similarity_poisoning",
        "fltrust_adaptive",
    }
    assert r["floor_slope"] == r["floor_slopes"][r["per_seed"][0]["strongest_attack"]]
    # w_D0 by hand
    x0, y0 = (t.numpy() for t in setting.root)
    w_d0 = np.linalg.solve(x0.T @ x0 / len(y0) + setting.l2 * np.eye(x0.shape[1]), x0.T @ y0 / len(y0))
    assert r["root_optimum_error"] == pytest.approx(np.linalg.norm(w_d0 - setting.w_star.numpy()))
    # FLTrust within 1.5 x max(no-attack error, ||w_D0 - w*||) for every attack and fraction
    fl = [x for x in r["fractions"] if x["defense"] == "fltrust"]
    base = max(next(x["final_error"] for x in fl if x["attack"] == "none"), r["root_optimum_error"])
    assert all(x["status"] == "ok" and x["final_error"] <= 1.5 * base for x in fl)
    worst = max(x["final_error"] for x in fl)
    for name in ("fedavg", "median"):
        row = next(
            x
            for x in r["fractions"]
            if x["attack"] == "sign_flip" and x["fraction"] == 0.6 and x["defense"] == name
        )
        assert row["status"] == "diverged" or row["final_error"] >= 10 * worst
        assert row["inside_guarantee"] is False
    # the root error's slope: -0.5 inside the interval, 0 outside
    lo, hi = r["root_error_slope"]["ci95"]
    assert lo <= -0.5 <= hi and hi < 0
    assert {c["status"] for c in r["claims"]} <= {"holds", "vacuous", "finding"}
    assert r["linear_rate"]["lemma2_factor"] == pytest.approx(cs.lemma2_factor)
    assert 0 < r["linear_rate"]["estimate"] < 1


@pytest.mark.slow
def test_workers_do_not_change_the_report(small: Path) -> None:
    tiny = [
        "bound.rounds=8",
        'bound.attacks=["none", "sign_flip"]',
        'bound.defenses=["fltrust", "fedavg"]',
        "bound.root_sizes=[16, 64]",
        "bound.draws=4",
    ]
    one = B.run_bound(load_scenario(small, tiny), workers=1)
    two = B.run_bound(load_scenario(small, tiny), workers=2)
    for r in (one, two):
        r.pop("elapsed_s")
        r["settings"].pop("cpu_s")
        r["settings"].pop("workers")
    assert one == two


def test_run_bound_applies_overrides_to_a_scenario_object_and_refuses_what_it_would_not_use(
    small: Path, tmp_path: Path
) -> None:
    """Overrides given with a Scenario object are applied (they were dropped); a dict or a path works
    as load_scenario takes them; algorithms, sharing schemes, workers and devices the theorem's
    setting cannot use are refused before any work; a plugin is loaded here (it was not)."""
    tiny = ["bound.rounds=2", 'bound.attacks=["none"]', 'bound.defenses=["fltrust"]',
            "bound.root_sizes=[16, 64]", "bound.draws=2", "bound.fractions=[0.0]"]
    by_object = B.run_bound(load_scenario(small), tiny, workers=1)
    by_path = B.run_bound(small, tiny, workers=1)
    assert by_object["settings"]["rounds"] == by_path["settings"]["rounds"] == 2
    for bad, needle in [("algorithm.name='fedprox'", "algorithm.name must be 'fedavg'"),
                        ("sharing.name='psfed'", "sharing.name must be 'full'")]:
        with pytest.raises(ConfigError, match=needle):
            B.run_bound(small, [*tiny, bad], workers=1)
    with pytest.raises(ConfigError, match=r"workers must be an integer >= 1 \(or None\), got 1.5"):
        B.run_bound(small, tiny, workers=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="device 'xyz': expected cpu, cuda or cuda:N"):
        B.run_bound(small, tiny, workers=1, device="xyz")
    plugin = tmp_path / "bound_plugin.py"
    plugin.write_text("from robustfl.attacks.sign_flip import SignFlip\nATTACKS = {'flip_copy_b': SignFlip}")
    with_plugin = [*tiny, 'bound.attacks=["none", "flip_copy_b"]']
    report = B.run_bound(small, with_plugin, workers=1, plugins=[str(plugin)])
    assert "flip_copy_b" in json.dumps(report)
