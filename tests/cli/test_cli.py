"""The command line in-process: exit codes, one-line errors, outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustfl.cli import main

from ..conftest import PLUGINS

SMALL = [
    "--set",
    "task.name=ridge",
    "--set",
    "task.dim=5",
    "--set",
    "task.samples_per_client=20",
    "--set",
    "federation.clients=10",
    "--set",
    "federation.rounds=20",
    "--set",
    "server.root_size=30",
    "--set",
    "federation.local_lr=0.1",
]


SEED_RANGE = "a seed must be an integer in [0, 2**63 - 1]"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "quick", "--attack", "sign_flp"], "did you mean 'sign_flip'"),
        (["run", "quick", "--defense", "fltrus"], "did you mean 'fltrust'"),
        (["run", "quick", "--set", "task.name=ridgee"], "did you mean 'ridge'"),
        (["matrix", "quick", "--attacks", "none,alei"], "did you mean 'alie'"),
        (["matrix", "defenses", "--attacks", "ipm-10"], "did you mean 'ipm-100', 'ipm'?"),  # labels too
        (["run", "quick", "--attack", "SIGN_FLIP"], "did you mean 'sign_flip'?"),
        (["validate", "quick", "--set", "federation.clientz=3"], "federation.clientz"),
        (["validate", "quick", "--set", 'federation.clients="ten"'], "federation.clients must be an integer"),
        (["validate", "quick", "--set", "federation.local_lr=-0.1"], "federation.local_lr must be >0"),
        (["validate", "quick", "--set", "matrix.seeds=[]"], "matrix.seeds must be a non-empty list"),
        (["validate", "quick", "--set", "threat.byzantine=80"], "more than federation.clients"),
        (["validate", "quick", "--set", "attack.z=1"], None),  # alie, in the matrix, takes it
        (["validate", "quick", "--set", "defense.pre=[\"nnmm\"]"], "unknown pre-aggregator 'nnmm'"),
        (["validate", "quick", "--set", "attack.name=alie"], "does not apply to a matrix"),  # as matrix
        (["validate", "quick", "--set", "defense.label=x"], "does not apply to a matrix"),
        (["run", "quick", "--set", "attack.name=alie", "--set", "attack.zz=1"], "has no parameter 'zz'"),
        (["validate", "nope.toml"], "does not exist"),
        (["validate", str(Path(__file__).parent)], "is a folder: expected a TOML file"),
        (["matrix", "quick", "--seeds", "a,b"], "--seeds must be comma-separated integers"),
        (["matrix", "quick", "--seeds", "0,1,0"], "--seeds lists '0' twice"),
        (["matrix", "quick", "--attacks", "none,alie,none"], "--attacks lists 'none' twice"),
        (["run", "quick", "--attack", ""], "--attack must name a component, got ''"),
        (["matrix", "quick", "--address", "foo:1"], "it needs --executor ray"),
        (["validate", "quick", "--set", "partition.shards_per_client=3"], "to partition 'shards' only"),
        (["matrix", "quick", "--seeds", "0,-1"], f"--seeds: {SEED_RANGE}, got -1"),
        (["run", "quick", "--seed", str(2**64)], f"--seed: {SEED_RANGE}, got {2**64}"),
        (["validate", "quick", "--set", "matrix.seeds=[-3]"], "matrix.seeds: a seed must be an integer"),
        (["kappa", "--seed", "-1"], "--seed: a seed must be an integer"),
        (["run", "quick", "--plugin", "no_such_module_xyz"], "cannot import module"),
        (["frobnicate"], "invalid choice"),
        (
            ["run", "quick", "--attack", "fltrust_adaptive", "--set", 'threat.knowledge="honest"'],
            "attack 'fltrust_adaptive' needs reference knowledge",
        ),
        (
            ["matrix", "quick", "--attacks", "optimal", "--set", 'threat.knowledge="honest"'],
            "attack 'optimal' needs oracle knowledge",
        ),
        (["run", "quick", "--attack", "label_flip", "--set", 'task.name="ridge"'], "label_flip"),
        (  # found by the fuzz test: torch cannot count past 2**63 - 1
            ["matrix", "quick", "--set", 'task.name="ridge"', "--set", "task.dim=9223372036854775807"],
            "too large for this machine",
        ),
        (
            ["run", "quick", "--set", 'task.name="ridge"', "--set", "server.root_size=9223372036854775807"],
            "too large for this machine",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], needle: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    if needle is None:
        assert code == 0
        return
    assert code == 2
    assert needle in _one_line_error(capsys)


def test_run_writes_cell_json(tmp_path: Path) -> None:
    out = tmp_path / "cell.json"
    code = main(
        [
            "run",
            "quick",
            *SMALL,
            "--attack",
            "sign_flip",
            "--defense",
            "fltrust",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    cell = json.loads(out.read_text())
    assert (cell["attack"], cell["defense"], cell["seed"], cell["status"]) == (
        "sign_flip",
        "fltrust",
        0,
        "ok",
    )
    assert cell["reference"] == "exact"
    assert len(cell["rounds"]) == 20 and cell["final"] == cell["rounds"][-1]
    assert 0 < cell["final"]["relative_drift"] < 1


def test_list_json_has_origins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "defenses", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {r["name"]: r["origin"] for r in rows}
    assert by["fltrust"] == "built-in" and by["fedsim"] == "built-in"


def test_nan_rows_fedavg_diverges_others_finish(tmp_path: Path) -> None:
    """A test-only attack sending NaN: FedAvg's run is recorded as diverged, FLTrust/FedSim go on."""
    js = tmp_path / "m.json"
    code = main(
        [
            "matrix",
            "quick",
            *SMALL,
            "--plugin",
            str(PLUGINS / "nan_attack.py"),
            "--attacks",
            "nan_rows",
            "--defenses",
            "fedavg,fltrust,fedsim",
            "--seeds",
            "0",
            "--workers",
            "1",
            "--store",
            str(tmp_path / "s.db"),
            "--json",
            str(js),
            "--quiet",
        ]
    )
    assert code == 0
    cells = {c["defense"]: c for c in json.loads(js.read_text())["cells"]}
    assert cells["fedavg"]["status"] == "diverged"
    assert len(cells["fedavg"]["rounds"]) == 1
    for d in ("fltrust", "fedsim"):
        assert cells[d]["status"] == "ok" and len(cells[d]["rounds"]) == 20
    assert cells["fltrust"]["final"]["relative_drift"] < 0.5
    assert cells["fltrust"]["final"]["defense"]["num_invalid"] == 2
    assert cells["fedsim"]["final"]["defense"]["excluded"] == 2


def test_ctrl_c_after_the_last_cell_says_the_store_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the table is printed (every cell committed): exit 130 with the resume line,
    not a bare 'interrupted'; the rerun prints the table from the store alone."""
    from robustfl.cli import render

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    store = tmp_path / "s.db"
    argv = ["matrix", "quick", *SMALL, "--attacks", "none,sign_flip", "--defenses", "fedavg"]
    argv += ["--seeds", "0", "--workers", "1", "--store", str(store), "--quiet"]
    monkeypatch.setattr(render, "print_matrix", interrupted)
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"robustfl: interrupted: 2 of 2 cells are finished in the store {store}; "
        "rerun the same command to resume"
    ]
    monkeypatch.undo()
    assert main(argv) == 0


def test_device_cuda_without_a_gpu_is_refused_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    store = tmp_path / "m.db"
    cuda = ["--device", "cuda"]
    matrix = ["matrix", "quick", *cuda, "--store", str(store)]
    for argv in (["run", "quick", *cuda], matrix, ["bound", *cuda]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("robustfl: error: --device cuda:"), err
        assert "use --device cpu" in err
    assert not store.exists()


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ('[attack]\nname = "alie2"\n', "unknown attack 'alie2'"),
        ('[attack]\nname = "alie"\nzz = 1\n', "attack 'alie' has no parameter 'zz'"),
        ('[defense]\nname = "krum"\nfoo = 1\n', "defense 'krum' has no parameter 'foo'"),
        ('[defense]\nname = "krum"\npre = ["nnmm"]\n', "unknown pre-aggregator 'nnmm'"),
    ],
)
def test_validate_builds_the_attack_and_defense_sections_as_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, needle: str
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(section)
    assert main(["validate", str(path)]) == 2
    assert needle in _one_line_error(capsys)
    assert main(["run", str(path), "--set", "federation.rounds=2", "--quiet"]) == 2  # run agrees
    assert needle in _one_line_error(capsys)


def test_an_option_missing_its_value_says_how_to_give_one_that_starts_with_a_dash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["kappa", "--misspecified", "-1:2"]) == 2  # argparse reads -1:2 as an option
    err = _one_line_error(capsys)
    assert err.endswith("--misspecified: expected one argument (for a value that starts with '-', "
                        "write --misspecified=VALUE)")
    assert main(["kappa", "--misspecified=-1:2", "--rules", "median"]) == 2  # now ours: f = -1 refused
    assert "f=-1 f_hat=2: expected 0 <= f, f_hat < n" in _one_line_error(capsys)
