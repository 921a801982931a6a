"""Scenario loading: defaults, overrides, and bad input named precisely."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustfl.errors import ConfigError, UnknownNameError
from robustfl.scenario import count_of, load_scenario, parse_override


def test_defaults_filled() -> None:
    sc = load_scenario({})
    fed = sc.section("federation")
    assert (fed["clients"], fed["rounds"], fed["local_lr"], fed["batch_size"]) == (20, 100, 0.1, 0)
    assert sc.section("threat")["byzantine"] == 0.2 and sc.byzantine_count() == 4
    assert sc.section("server")["root_size"] == 100
    assert sc.section("task") == {"name": "ridge"}


@pytest.mark.parametrize(
    ("value", "n", "expected"),
    [(0.2, 50, 10), (0.25, 10, 3), (0.05, 10, 1), (0.04, 10, 0), (3, 10, 3), (1.0, 7, 7), (0.5, 5, 3)],
)
def test_fraction_to_count_rounds_half_up(value: float, n: int, expected: int) -> None:
    assert count_of(value, n) == expected


def test_override_parsing_and_application() -> None:
    assert parse_override("federation.clients=50") == ("federation.clients", 50)
    assert parse_override("attack.z=1.5") == ("attack.z", 1.5)
    assert parse_override("task.name=logreg") == ("task.name", "logreg")
    sc = load_scenario({}, ["federation.clients=50", "threat.byzantine=0.3"])
    assert sc.section("federation")["clients"] == 50 and sc.byzantine_count() == 15


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"federation": {"clientz": 3}}, "federation.clientz"),
        ({"federaton": {}}, "federaton"),
        ({"federation": {"clients": "ten"}}, "federation.clients must be an integer"),
        ({"clients": 5}, "scenario key 'clients' is outside any [section]; it belongs under [federation]"),
        ({"matrix": {"sweep": {"federation": {"clients": [10, 20]}}}},
         'a sweep key is one quoted dotted name, e.g. { "federation.clients" = [...] }'),
        ({"fedration": {"clients": 5}}, "unknown scenario section [fedration]; did you mean 'federation'?"),
        ({"partition": {"alpha": 1.0}}, "partition.alpha = 1.0 applies to partition 'dirichlet' only"),
        ({"partition": {"name": "dirichlet", "q": 0.3}}, "partition.q = 0.3 applies to partition 'bias'"),
        ({"federation": {"clients": 2.5}}, "federation.clients"),
        ({"federation": {"local_lr": -1.0}}, "federation.local_lr must be >0"),
        ({"federation": {"participation": 1.5}}, "federation.participation"),
        ({"threat": {"byzantine": 30, "knowledge": "full"}, "federation": {"clients": 20}}, "more than"),
        ({"threat": {"knowledge": "everything"}}, "threat.knowledge must be one of"),
        ({"matrix": {"attacks": []}}, "matrix.attacks must be a non-empty list"),
        ({"matrix": {"seeds": [0, -1]}}, "matrix.seeds"),
        ({"algorithm": {"name": "feddyn"}, "sharing": {"name": "psfed"}}, "feddyn with sharing psfed"),
        ({"algorithm": {"name": "fedprox", "nu": 1.0}}, "algorithm.nu"),
        ({"matrix": {"sweep": {"threat.byzantine": []}}}, "matrix.sweep.threat.byzantine"),
    ],
)
def test_bad_values_name_the_key(raw: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(raw)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_scenario_name_suggests(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError) as info:
        load_scenario("quik")
    assert "quick" in str(info.value)


def test_malformed_toml_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[task\nname = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_scenario(p)


def test_sweep_point_revalidated() -> None:
    sc = load_scenario({"federation": {"clients": 10}})
    assert sc.with_values({"threat.byzantine": 0.5}).byzantine_count() == 5
    with pytest.raises(ConfigError):
        sc.with_values({"threat.byzantine": 11})


def test_assumed_byzantine_against_round_rows() -> None:
    sc = load_scenario(
        {"federation": {"clients": 20}, "threat": {"byzantine": 0.2, "assumed_byzantine": 0.3}}
    )
    assert sc.assumed_count(20) == 6 and sc.assumed_count(10) == 3
    sc2 = load_scenario({"federation": {"clients": 20}, "threat": {"byzantine": 0.2}})
    assert sc2.assumed_count(20) == 4 and sc2.assumed_count(10) == 2
