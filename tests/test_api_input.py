"""The Python API's bad input: robustfl.run and robustfl.run_matrix refuse, before any work, what
the command line refuses (a ConfigError naming the value): seeds that are not integers in
[0, 2**63 - 1] or are listed twice (a duplicate seed was stored twice and averaged as two seeds),
an empty list, a worker count that is not a positive integer, a device this process cannot use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import robustfl
from robustfl.errors import ConfigError

SMALL = ["federation.rounds=2", "federation.clients=10"]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"seeds": ["0"]}, "seeds: a seed must be an integer in [0, 2**63 - 1], got '0'"),
        ({"seeds": [True]}, "got True"),
        ({"seeds": [-1]}, "got -1"),
        ({"seeds": [1.5]}, "got 1.5"),
        ({"seeds": [2**64]}, f"got {2**64}"),
        ({"seeds": "12"}, "seeds must be a list of integers, got '12'"),
        ({"seeds": [0, 1, 0]}, "seeds lists 0 twice"),
        ({"seeds": []}, "at least one of its seeds"),
        ({"attacks": []}, "at least one of its attacks"),
        ({"defenses": []}, "at least one of its defenses"),
        ({"workers": 0}, "workers must be an integer >= 1"),
        ({"workers": "2"}, "workers must be an integer >= 1"),
        ({"device": "gpu"}, "device 'gpu': expected cpu, cuda or cuda:N"),
    ],
)
def test_run_matrix_refuses_before_any_work(tmp_path: Path, kwargs: dict[str, Any], needle: str) -> None:
    sc = robustfl.load_scenario("quick", SMALL)
    store = tmp_path / "m.db"
    args: dict[str, Any] = {"attacks": ["none"], "defenses": ["median"], "seeds": [0], "workers": 1, **kwargs}
    with pytest.raises(ConfigError) as err:
        robustfl.run_matrix(sc, store=str(store), **args)
    assert needle in str(err.value) and len(str(err.value).splitlines()) == 1
    assert not store.exists()


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True, 2**63])
def test_run_refuses_a_seed_out_of_range(seed: Any) -> None:
    sc = robustfl.load_scenario("quick", SMALL)
    with pytest.raises(ConfigError, match=r"^seed: a seed must be an integer in \[0, 2\*\*63 - 1\]"):
        robustfl.run(sc, seed=seed)
    assert robustfl.run(sc, seed=2**63 - 1).status == "ok"  # the largest seed runs


def test_cuda_without_a_gpu_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    sc = robustfl.load_scenario("quick", SMALL)
    with pytest.raises(ConfigError, match="^device cuda: .*; use device cpu$"):
        robustfl.run(sc, device="cuda")
    with pytest.raises(ConfigError, match="^device cuda"):
        robustfl.run_matrix(sc, attacks=["none"], defenses=["fedavg"], seeds=[0], workers=1, device="cuda")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((None,), "a scenario is a name, a path or a dict, got None"),
        ((5,), "a scenario is a name, a path or a dict, got 5"),
        (("quick", [None]), "overrides must be a list of 'section.key=value' strings or a dict keyed by"),
        (("quick", 5), "got 5"),
        (("quick", {"federation.clients": 3, 5: 1}), "got {'federation.clients': 3, 5: 1}"),
        (("quick", "federation.clients=3"), "got 'federation.clients=3'"),  # one string: not 22 overrides
    ],
)
def test_load_scenario_refuses_what_is_not_a_scenario(args: tuple[Any, ...], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        robustfl.load_scenario(*args)
    assert needle in str(info.value)


def test_load_scenario_takes_a_path_object_and_both_override_forms() -> None:
    by_path = robustfl.load_scenario(Path(robustfl.load_scenario("quick").path or ""))
    assert by_path.data == robustfl.load_scenario("quick").data
    as_list = robustfl.load_scenario("quick", ("federation.clients=7",))
    as_dict = robustfl.load_scenario("quick", {"federation.clients": 7})
    assert as_list.data == as_dict.data and as_list.data["federation"]["clients"] == 7


@pytest.mark.parametrize("what", ["object", "number", "table without a name"])
def test_run_refuses_a_component_that_is_not_a_name_or_table(what: str) -> None:
    from robustfl.defenses import create

    given = {"object": create("median"), "number": 5, "table without a name": {"label": "x"}}[what]
    with pytest.raises(ConfigError, match=r"defense must be a name or a table like .*register it"):
        robustfl.run("quick", "none", given)


@pytest.mark.parametrize("given", [None, 5])
def test_run_and_run_matrix_refuse_what_is_not_a_scenario(given: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a scenario is a name, a path or a dict"):
        robustfl.run(given)
    with pytest.raises(ConfigError, match="a scenario is a name, a path or a dict"):
        robustfl.run_matrix(given, store=str(tmp_path / "m.db"))


def test_run_takes_a_scenario_as_a_dict() -> None:
    data = robustfl.load_scenario("quick", SMALL).data
    by_dict = robustfl.run(data, "sign_flip", "median")
    by_object = robustfl.run(robustfl.load_scenario("quick", SMALL), "sign_flip", "median")
    assert by_dict.final == by_object.final and by_dict.status == "ok"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"attacks": "none"}, "attacks must be a list of names or tables, got 'none'"),  # not 'n', 'o', ...
        ({"defenses": "median"}, "defenses must be a list of names or tables, got 'median'"),
        ({"attacks": [None]}, "attack must be a name or a table like"),
        ({"attacks": [{"z": 1.0}]}, "got {'z': 1.0}"),
        ({"defenses": [{"name": "krum", "pre": [5]}]}, "defense.pre must be a list of names or tables"),
        ({"allow_outside_guarantee": "no"}, "allow_outside_guarantee must be True or False, got 'no'"),
        ({"address": "1.2.3.4:1"}, "it needs executor='ray'"),
    ],
)
def test_run_matrix_refuses_malformed_entries(tmp_path: Path, kwargs: dict[str, Any], needle: str) -> None:
    sc = robustfl.load_scenario("quick", SMALL)
    args: dict[str, Any] = {"attacks": ["none"], "defenses": ["median"], "seeds": [0], "workers": 1, **kwargs}
    with pytest.raises(ConfigError) as info:
        robustfl.run_matrix(sc, store=str(tmp_path / "m.db"), **args)
    assert needle in str(info.value)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"defense": {"name": "krum", "pre": [{}]}}, "defense.pre must be a list of names or tables"),
        ({"allow_outside_guarantee": "no"}, "allow_outside_guarantee must be True or False"),  # was truthy
    ],
)
def test_run_refuses_a_malformed_pre_list_or_flag(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        robustfl.run(robustfl.load_scenario("quick", SMALL), "none", **kwargs)


def test_numpy_integers_count_as_the_integers_they_are(tmp_path: Path) -> None:
    """A seed, a worker count or a component's parameter given as a numpy scalar is taken (it was
    refused as "not an integer"), with the same result as the Python number."""
    import numpy as np

    sc = robustfl.load_scenario("quick", SMALL)
    cell = robustfl.run(sc, "alie", "median", seed=np.int64(1))
    assert cell.seed == 1 and type(cell.seed) is int
    assert cell.final == robustfl.run(sc, "alie", "median", seed=1).final
    result = robustfl.run_matrix(sc, attacks=["none"], defenses=["median"], seeds=[np.int64(0)],
                                 workers=np.int64(1), store=str(tmp_path / "m.db"))
    assert [c.seed for c in result.cells] == [0]
    assert robustfl.attacks.create("alie", z=np.float32(1.5)).z == 1.5  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="got np.True_"):
        robustfl.run(sc, seed=np.bool_(True))


def test_params_refuse_a_huge_int_and_a_tensor_choice_in_one_line() -> None:
    import torch

    from robustfl import params
    from robustfl.errors import ParameterError

    with pytest.raises(ParameterError, match="parameter z must be a finite number"):  # was OverflowError
        robustfl.attacks.create("alie", z=10**400)
    with pytest.raises(ParameterError, match="must be one of 'a', 'b', got tensor"):  # was RuntimeError
        params.choice("thing", "mode", torch.tensor([1, 2]), ["a", "b"])
    assert params.choice("thing", "mode", "b", ["a", "b"]) == "b"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("20", [2]), "parameter n must be an integer >= 1, got '20'"),
        ((20, 2), "fs must be a list of counts, got 2"),
        ((20, [2.5]), "parameter f must be an integer, got 2.5"),  # accepted, then a TypeError later
        ((20, [2], [(2,)]), "a misspecified setting is a pair (f, f_hat), got (2,)"),
    ],
)
def test_kappa_settings_refuse_what_is_no_setting(args: tuple[Any, ...], needle: str) -> None:
    from robustfl.errors import RobustFLError
    from robustfl.theory.kappa import settings

    with pytest.raises(RobustFLError) as info:
        settings(*args)
    assert needle in str(info.value)
