"""robustfl kappa: the input families, the worst-case search, the table and its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from robustfl import attacks
from robustfl.attacks.worst_case import search
from robustfl.cli.main import main
from robustfl.errors import ConfigError
from robustfl.scenario import load_scenario
from robustfl.simulation import components as C
from robustfl.theory import kappa as K
from robustfl.theory.kappa_families import family_rows, task_rounds
from robustfl.types import DefenseContext
from tests.factories import gen

CATALOGUE = [n for n, o in attacks.registry.items() if o == "built-in" and n != "worst_case"]


def _rule(spec: Any, honest: torch.Tensor, f_hat: int) -> Any:
    rule = C.build_defense(spec)
    n = honest.shape[0] + f_hat

    def evaluate(byz: torch.Tensor) -> torch.Tensor:
        rule.reset()
        ctx = DefenseContext(assumed_byzantine=f_hat, client_ids=torch.arange(n), generator=gen(0))
        return rule(torch.cat([honest, byz]), ctx).vector

    return evaluate


def _kappa_by_hand(out: torch.Tensor, honest: torch.Tensor) -> float:
    """||F - mean(H)||^2 / ((1/|H|) sum ||h - mean(H)||^2): the definition, written out."""
    mean = honest.mean(0)
    spread = sum(float(((h - mean) ** 2).sum()) for h in honest) / honest.shape[0]
    return float(((out - mean) ** 2).sum()) / spread


def test_the_lower_bound_family_is_the_construction() -> None:
    rows = family_rows("lower_bound", 11, 2, 5, gen(1))
    assert rows.honest.shape == (9, 5) and rows.own.shape == (2, 5)
    assert torch.equal(rows.honest[0], rows.honest[1]) and rows.honest[2:].abs().sum() == 0
    assert rows.own.abs().sum() == 0
    # B = f zeros: every rule with finite kappa outputs 0, kappa_hat = f / (n - 2f) = 2/7 exactly
    assert _kappa_by_hand(torch.zeros(5, dtype=torch.float64), rows.honest) == pytest.approx(2 / 7, rel=1e-12)


@pytest.mark.parametrize("family", ["isotropic", "anisotropic", "clustered"])
def test_families_are_seeded_and_shaped(family: str) -> None:
    a, b = family_rows(family, 20, 4, 30, gen(3)), family_rows(family, 20, 4, 30, gen(3))
    assert a.honest.shape == (16, 30) and a.own.shape == (4, 30)
    assert torch.equal(a.honest, b.honest) and torch.equal(a.own, b.own)
    with pytest.raises(ConfigError, match="family 'gauss'"):
        family_rows("gauss", 20, 4, 30, gen(3))


@pytest.mark.parametrize("spec", ["median", "krum", "trimmed_mean", {"name": "krum", "pre": ["nnm"]}])
def test_the_search_reaches_the_lower_bound_on_its_construction(spec: Any) -> None:
    rows = family_rows("lower_bound", 11, 2, 5, gen(1))
    found = search(
        _rule(spec, rows.honest, 2),
        rows.honest,
        rows.own,
        budget=300,
        generator=gen(2),
        attacks=CATALOGUE,
        num_clients=11,
    )
    assert found.kappa >= 2 / 7 * (1 - 1e-12)


@pytest.mark.parametrize("spec", ["fedavg", "median", "krum", "geometric_median", "centered_clipping"])
def test_the_search_is_at_least_every_fixed_attack_and_reports_its_value_truthfully(spec: Any) -> None:
    rows = family_rows("clustered", 15, 3, 12, gen(4))
    rule = _rule(spec, rows.honest, 3)
    found = search(
        rule, rows.honest, rows.own, budget=400, generator=gen(5), attacks=CATALOGUE, num_clients=15
    )
    assert found.fixed and found.kappa >= max(found.fixed.values())
    assert found.evaluations <= 400
    assert found.kappa == pytest.approx(_kappa_by_hand(rule(found.rows), rows.honest), rel=1e-9)


def test_fedavg_kappa_grows_without_limit() -> None:
    rows = family_rows("isotropic", 20, 4, 20, gen(6))
    small = search(_rule("fedavg", rows.honest, 4), rows.honest, rows.own, budget=30, generator=gen(7))
    big = search(_rule("fedavg", rows.honest, 4), rows.honest, rows.own, budget=1000, generator=gen(7))
    assert big.kappa >= 100 and big.kappa > small.kappa


def test_same_seed_same_kappa_bit_for_bit() -> None:
    kw: dict[str, Any] = {"budget": 80, "seed": 3, "dim": 10}
    sets = K.settings(11, [2])
    a = K.run_kappa(["median", "krum"], sets, ["isotropic", "clustered"], **kw)
    b = K.run_kappa(["median", "krum"], sets, ["isotropic", "clustered"], **kw)
    assert [r["kappa"] for r in a] == [r["kappa"] for r in b]
    assert [r["attack"] for r in a] == [r["attack"] for r in b]


def test_rules_outside_their_precondition_are_refused_or_flagged() -> None:
    rows = K.run_kappa(["krum"], K.settings(9, [4]), ["isotropic"], budget=20, dim=5)
    assert rows[0]["status"] == "refused" and "krum needs n >= 11 for f_hat = 4" in rows[0]["error"]
    flagged = K.run_kappa(
        ["krum"], K.settings(9, [4]), ["isotropic"], budget=20, dim=5, allow_outside_guarantee=True
    )
    assert flagged[0]["status"] == "outside_guarantee" and flagged[0]["kappa"] is not None


def test_fltrust_is_measured_on_a_tasks_rounds_only(tmp_path: Path) -> None:
    fam = K.run_kappa(["fltrust"], K.settings(10, [2]), ["isotropic"], budget=20, dim=5)
    assert fam[0]["status"] == "refused" and "reference" in fam[0]["error"]
    sc = load_scenario(
        {"task": {"name": "ridge"}, "federation": {"clients": 10, "rounds": 4}, "threat": {"byzantine": 2}}
    )
    task = task_rounds(sc, 0, [1, 4], 2)
    assert [r.family for r in task] == ["task:scenario round 1", "task:scenario round 4"]
    assert all(r.reference is not None and r.honest.shape == (8, 20) for r in task)
    rows = K.run_kappa(["fltrust"], [K.Setting(10, 2, 2)], task=task, budget=60)
    assert all(r["status"] == "ok" and r["kappa"] is not None for r in rows)


def test_a_kappa_above_a_bound_is_a_finding_with_its_inputs_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        K, "bound_for", lambda label, n, f: (1e-6, "a bound too small to hold", "n > 2f", True)
    )
    rows = K.run_kappa(["median"], K.settings(11, [2]), ["isotropic"], budget=30, dim=5, save_dir=tmp_path)
    assert rows[0]["status"] == "exceeds_bound"
    saved = torch.load(rows[0]["saved"])
    honest, byz = saved["honest"], saved["byzantine"]
    out = C.build_defense("median")(torch.cat([honest, byz]), DefenseContext(assumed_byzantine=2)).vector
    assert _kappa_by_hand(out, honest) == pytest.approx(rows[0]["kappa"], rel=1e-9)  # it reproduces


def test_cli_writes_the_rows_and_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k.json"
    argv = [
        "kappa",
        "--rules",
        "median,nnm+krum",
        "--f",
        "2",
        "--n",
        "11",
        "--families",
        "isotropic,lower_bound",
        "--budget",
        "40",
        "--dim",
        "6",
        "--json",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["rule"], r["family"]) for r in rows] == [
        ("median", "isotropic"),
        ("nnm+krum", "isotropic"),
        ("median", "lower_bound"),
        ("nnm+krum", "lower_bound"),
    ]
    from robustfl.theory.kappa import bound_for

    for r in rows:  # the bound's columns as the bound table gives them, verification flag included
        value, source, condition, verified = bound_for(r["rule"], r["n"], r["f_hat"])
        assert (r["upper_bound"], r["upper_source"], r["upper_condition"]) == (value, source, condition)
        assert r["upper_verified"] is verified
    assert rows[0]["upper_verified"] is False  # median's bound is the reported, unchecked constant
    assert rows[0]["upper_bound"] == pytest.approx(4 * (1 + 2 / 7) ** 2)  # 4 (1 + r)^2, r = f/(n - 2f)
    assert rows[0]["lower_bound"] == pytest.approx(2 / 7) and rows[0]["evaluations"] <= 40
    assert main(["kappa", "--rules", "medain", "--quiet"]) == 2
    assert "unknown defense 'medain'" in capsys.readouterr().err
    assert main(["kappa", "--families", "gauss", "--quiet"]) == 2
    assert main(["kappa", "--rules", "krum+nnm", "--quiet"]) == 2
    assert "the rule comes last ('nnm+krum'?)" in capsys.readouterr().err
    assert main(["kappa", "--rules", "nnm+krum+", "--quiet"]) == 2
    assert "has an empty part" in capsys.readouterr().err
    assert main(["kappa", "--rules", "median,median", "--quiet"]) == 2
    assert "--rules lists 'median' twice" in capsys.readouterr().err
    for extra in (["--n", "7"], ["--dim", "3"], ["--families", "isotropic"], ["--misspecified", "4:2"]):
        assert main(["kappa", "quick", *extra, "--quiet"]) == 2  # the families' options, not a scenario's
        assert f"{extra[0]} applies to the synthetic input families" in capsys.readouterr().err


def test_worst_case_runs_in_a_matrix_cell() -> None:
    from robustfl.simulation.runner import simulate

    sc = load_scenario(
        {"task": {"name": "ridge"}, "federation": {"clients": 10, "rounds": 3}, "threat": {"byzantine": 2}}
    )
    attacked = simulate(sc, {"name": "worst_case", "budget": 60}, "median", 0).cell
    alie = simulate(sc, "alie", "median", 0).cell
    assert attacked.status == "ok"
    stats = attacked.rounds[-1]["attack"]
    assert stats["kappa"] >= stats["best_fixed"] and stats["evaluations"] <= 60
    assert attacked.rounds[0]["aggregation_error"] >= alie.rounds[0]["aggregation_error"]


def test_the_published_bound_follows_the_rule_not_its_label() -> None:
    """A median labelled "krum" is checked against no Krum bound, and a labelled Krum keeps Krum's;
    an entry that sets parameters gets none (the bounds are for the rules as published)."""
    from robustfl.theory.kappa import Setting, _row, bound_for, bound_key

    s = Setting(20, 2, 2)
    assert bound_key({"name": "median", "label": "krum"}) == "median"
    assert bound_key({"name": "krum", "pre": ["nnm"], "label": "x"}) == "nnm+krum"
    assert bound_key({"name": "trimmed_mean", "beta": 0.1}) is None
    def upper(spec: Any) -> Any:
        return _row(spec, s, "isotropic")["upper_bound"]

    assert upper({"name": "median", "label": "krum"}) == bound_for("median", 20, 2)[0]
    assert upper({"name": "krum", "label": "krum-v2"}) == bound_for("krum", 20, 2)[0]
    assert bound_for("median", 20, 2)[0] != bound_for("krum", 20, 2)[0]
    assert upper({"name": "krum", "pre": [{"name": "bucketing", "size": 2}]}) is None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rules": "median"}, "rules must be a non-empty list, got 'median'"),
        ({"rules": []}, "rules must be a non-empty list, got []"),
        ({"setting_list": []}, "setting_list must be a non-empty list"),  # ran the default table
        ({"families": []}, "families must be a non-empty list"),
        ({"budget": float("nan")}, "budget must be an integer >= 1, got nan"),  # an endless search
        ({"budget": 2.5}, "budget must be an integer >= 1, got 2.5"),
        ({"seed": -1}, "a seed must be an integer in [0, 2**63 - 1], got -1"),
        ({"dim": 0}, "dim must be an integer >= 1, got 0"),
        ({"on_row": 5}, "on_row must be a function"),
    ],
)
def test_run_kappa_refuses_arguments_before_any_work(kwargs: dict[str, Any], needle: str) -> None:
    from robustfl.errors import ConfigError
    from robustfl.theory.kappa import run_kappa, settings

    args: dict[str, Any] = {"rules": ["median"], "setting_list": settings(7, [1]), "families": ["isotropic"],
                            "budget": 5, **kwargs}
    with pytest.raises(ConfigError) as info:
        run_kappa(**args)
    assert needle in str(info.value)


def test_run_kappa_takes_save_dir_as_a_string_and_refuses_a_file(tmp_path: Path) -> None:
    from robustfl.errors import ConfigError
    from robustfl.theory.kappa import run_kappa, settings

    rows = run_kappa(["median"], settings(7, [1]), ["isotropic"], budget=5, save_dir=str(tmp_path / "out"))  # type: ignore[arg-type]
    assert len(rows) == 1 and rows[0]["status"] == "ok"
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file: expected a folder"):
        run_kappa(["median"], settings(7, [1]), ["isotropic"], budget=5, save_dir=tmp_path / "f")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--rules", "nnm"], "--rules: 'nnm' is a pre-aggregator: put it before a rule (nnm+krum?)"),
        (["--set", "federation.x=2", "--rules", "median"], "--set applies to a SCENARIO's rounds"),
    ],
)
def test_kappa_refuses_a_lone_pre_aggregator_and_set_without_a_scenario(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["kappa", *argv]) == 2  # --set was ignored, exit 0; nnm got "did you mean 'monna'?"
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
