"""Plugins for real: entry-point validation and origins, ``robustfl plugin new``, ``--plugin`` files.

In-process tests build fake distributions (a ``.dist-info`` with ``entry_points.txt``) in a temporary
directory on ``sys.path``. The round trip installs two generated packages with real pip (offline:
``--no-index --no-deps --no-build-isolation``) and drives the CLI in subprocesses with plugin
autoloading on.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import robustfl
import robustfl.testing
from robustfl import attacks, defenses, tasks
from robustfl.cli import main
from robustfl.cli.plugin_new import write_plugin
from robustfl.errors import ConfigError, PluginError
from robustfl.registry import Registry

from ..conftest import ROOT

SMALL = [
    "--set", "task.name=ridge", "--set", "task.dim=5", "--set", "task.samples_per_client=20",
    "--set", "federation.clients=10", "--set", "federation.rounds=3", "--set", "server.root_size=30",
]


# -- helpers ------------------------------------------------------------------------------------
def fake_dist(site: Path, dist: str, entries: dict[str, dict[str, str]], modules: dict[str, str]) -> None:
    """A minimal installed distribution: METADATA, entry_points.txt ({group: {name: target}}), modules."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = []
    for group, eps in entries.items():
        lines.append(f"[{group}]")
        lines += [f"{n} = {t}" for n, t in eps.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for mod, src in modules.items():
        (site / f"{mod}.py").write_text(src)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for fake distributions, with plugin autoloading switched on."""
    d = tmp_path / "site"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.delenv("ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    before = set(sys.modules)
    yield d
    for name in set(sys.modules) - before:  # forget the plugin modules this test imported
        if name.startswith("rfl_"):
            del sys.modules[name]


@pytest.fixture
def fresh_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The global registries rediscover plugins during the test and are restored afterwards."""
    for reg in (attacks.registry, defenses.registry, tasks.registry, defenses.pre_registry):
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
        monkeypatch.setattr(reg, "_discovered", False)
        monkeypatch.setattr(reg, "broken", [])


def modname() -> str:
    return f"rfl_{uuid.uuid4().hex[:10]}"


GOOD_ATTACK = """
from dataclasses import dataclass, field
from robustfl.types import Knowledge

@dataclass
class Good:
    scale: float = 1.0
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False)

    def __call__(self, ctx):
        return -self.scale * ctx.own
"""

BAD_ATTACKS = """
from robustfl.types import Knowledge

class StrKnowledge:
    knowledge = "own"
    def __call__(self, ctx):
        return ctx.own

class NoCall:
    knowledge = Knowledge.OWN

NOT_CALLABLE = 42

class LateKnowledge:            # not visible on the class: checked on the created object
    def __init__(self, level="own"):
        self.knowledge = Knowledge.OWN if level == "own" else level
    def __call__(self, ctx):
        return ctx.own

def factory_without_knowledge():
    return lambda ctx: ctx.own
"""


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if "RuntimeWarning" not in ln]
    assert len(lines) == 1, err
    return lines[0]


# -- validation on load -------------------------------------------------------------------------
def test_valid_entry_point_loads_with_its_distribution_as_origin(site: Path) -> None:
    mod = modname()
    fake_dist(site, "robustfl-good", {"robustfl.attacks": {"good": f"{mod}:Good"}}, {mod: GOOD_ATTACK})
    reg = Registry("attack", "robustfl.attacks", {"none": "robustfl.attacks.none:NoAttack"})
    assert dict(reg.items()) == {"good": "robustfl-good 0.1.0", "none": "built-in"}
    attack = reg.create("good", scale=2.0)
    own = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    from robustfl.types import AttackContext

    assert attack(AttackContext(own=own)).tolist() == [[-2.0, 4.0]]


@pytest.mark.parametrize(
    ("target", "at", "needle"),
    [
        ("StrKnowledge", "load", "knowledge must be a robustfl.Knowledge (e.g. Knowledge.OWN), got 'own'"),
        ("NoCall", "load", "class NoCall defines no __call__(ctx)"),
        ("NOT_CALLABLE", "load", "int 42, which is not callable"),
        ("LateKnowledge", "create", "knowledge must be a robustfl.Knowledge (e.g. Knowledge.OWN), got 'all'"),
        ("factory_without_knowledge", "create", "has no attribute 'knowledge'"),
    ],
)
def test_invalid_attack_entry_is_a_plugin_error_naming_entry_point_and_distribution(
    site: Path, target: str, at: str, needle: str
) -> None:
    mod = modname()
    fake_dist(site, "robustfl-bad", {"robustfl.attacks": {"bad": f"{mod}:{target}"}}, {mod: BAD_ATTACKS})
    reg = Registry("attack", "robustfl.attacks", {})
    assert reg.origin("bad") == "robustfl-bad 0.1.0"  # listed before it is loaded
    params = {"level": "all"} if target == "LateKnowledge" else {}
    if at == "create":
        reg.get("bad")  # the class itself looks fine
    with pytest.raises(PluginError) as info:
        reg.create("bad", **params)
    msg = str(info.value)
    assert f"entry point bad = {mod}:{target}" in msg and "robustfl-bad 0.1.0" in msg
    assert needle in msg, msg
    assert "\n" not in msg


def test_defense_entry_must_make_callable_objects(site: Path) -> None:
    mod = modname()
    src = "class NoCall:\n    pass\n\ndef gives_dict():\n    return {}\n"
    eps = {"nocall": f"{mod}:NoCall", "gives_dict": f"{mod}:gives_dict"}
    fake_dist(site, "robustfl-baddef", {"robustfl.defenses": eps}, {mod: src})
    reg = Registry("defense", "robustfl.defenses", {})
    with pytest.raises(PluginError, match=r"class NoCall defines no __call__\(updates, ctx\)"):
        reg.get("nocall")
    reg.get("gives_dict")
    with pytest.raises(PluginError, match=r"baddef 0\.1\.0\): the object it created \(dict\) is not callab"):
        reg.create("gives_dict")


def test_import_error_is_a_plugin_error_and_recorded_as_broken(site: Path) -> None:
    mod = modname()
    fake_dist(site, "robustfl-broken", {"robustfl.attacks": {"broken": f"{mod}:Thing"}},
              {mod: "raise RuntimeError('boom at import')\n"})
    reg = Registry("attack", "robustfl.attacks", {})
    assert "broken" in reg.names()  # discovery does not import it
    with pytest.raises(PluginError) as info:
        reg.get("broken")
    assert str(info.value) == (f"cannot load attack plugin 'broken' (entry point broken = {mod}:Thing, "
                               "from robustfl-broken 0.1.0): RuntimeError: boom at import")
    assert reg.broken == [str(info.value)]


def test_clash_with_builtin_names_both_origins_and_persists(site: Path) -> None:
    mod = modname()
    fake_dist(site, "robustfl-clash", {"robustfl.defenses": {"fedavg": f"{mod}:X", "fine": f"{mod}:X"}},
              {mod: "class X:\n    def __call__(self, u, ctx):\n        return u.mean(0)\n"})
    reg = Registry("defense", "robustfl.defenses", {"fedavg": "robustfl.defenses.fedavg:FedAvg"})
    for _ in range(2):  # all or nothing: raised again, nothing half-registered
        with pytest.raises(PluginError) as info:
            reg.names()
        msg = str(info.value)
        assert "defense 'fedavg' from robustfl-clash 0.1.0 clashes with" in msg and "from built-in" in msg
    assert "fine" not in reg._entries


def test_clash_between_two_plugins_names_both_distributions(site: Path) -> None:
    mod = modname()
    src = GOOD_ATTACK
    fake_dist(site, "robustfl-twin-a", {"robustfl.attacks": {"twin": f"{mod}:Good"}}, {mod: src})
    fake_dist(site, "robustfl-twin-b", {"robustfl.attacks": {"twin": f"{mod}:Good"}}, {})
    with pytest.raises(PluginError) as info:
        Registry("attack", "robustfl.attacks", {}).names()
    assert "robustfl-twin-a 0.1.0" in str(info.value) and "robustfl-twin-b 0.1.0" in str(info.value)


def test_autoload_off_ignores_entry_points(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = modname()
    fake_dist(site, "robustfl-good", {"robustfl.attacks": {"good": f"{mod}:Good"}}, {mod: GOOD_ATTACK})
    monkeypatch.setenv("ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert Registry("attack", "robustfl.attacks", {}).names() == []


# -- the CLI with broken or clashing plugins (in-process) ----------------------------------------
def test_cli_list_warns_on_broken_plugin_and_run_exits_2(
    site: Path, fresh_registries: None, capsys: pytest.CaptureFixture[str]
) -> None:
    mod, good = modname(), modname()
    fake_dist(site, "robustfl-broken", {"robustfl.attacks": {"broken": f"{mod}:Thing"}},
              {mod: "raise ImportError('needs a package that is not installed')\n"})
    fake_dist(site, "robustfl-good", {"robustfl.attacks": {"good": f"{good}:Good"}}, {good: GOOD_ATTACK})
    assert main(["list", "attacks", "--json"]) == 0
    out, err = capsys.readouterr()
    rows = {r["name"]: r["origin"] for r in json.loads(out)}
    assert rows["good"] == "robustfl-good 0.1.0" and rows["sign_flip"] == "built-in"
    assert rows["broken"] == "robustfl-broken 0.1.0 (broken)"
    line = one_line(err)
    assert line.startswith("robustfl: warning: cannot load attack plugin 'broken'")
    assert "needs a package that is not installed" in line

    assert main(["run", "quick", *SMALL, "--attack", "broken", "--defense", "fedavg", "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "attack plugin 'broken'" in line and "robustfl-broken 0.1.0" in line


def test_cli_clash_with_builtin_exits_2_naming_both(
    site: Path, fresh_registries: None, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = modname()
    fake_dist(site, "robustfl-shadow", {"robustfl.defenses": {"fedavg": f"{mod}:X"}},
              {mod: "class X:\n    def __call__(self, u, ctx):\n        return u.mean(0)\n"})
    assert main(["list", "defenses"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "'fedavg' from robustfl-shadow 0.1.0 clashes" in line and "from built-in" in line


# -- --plugin FILE ------------------------------------------------------------------------------
PLUGIN_FILE = """
from dataclasses import dataclass, field
from robustfl.types import Knowledge

@dataclass
class Tripled:
    knowledge: Knowledge = field(default=Knowledge.OWN, init=False)

    def __call__(self, ctx):
        return -3.0 * ctx.own

@dataclass
class WrongKnowledge:
    knowledge: str = "own"

    def __call__(self, ctx):
        return ctx.own

ATTACKS = {"tripled": Tripled, "wrong_knowledge": WrongKnowledge}
"""


def test_plugin_file_for_run_and_matrix(tmp_path: Path, fresh_registries: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"{modname()}.py"
    path.write_text(PLUGIN_FILE)
    js = tmp_path / "cell.json"
    assert main(["run", "quick", *SMALL, "--plugin", str(path), "--attack", "tripled", "--defense", "median",
                 "--json", str(js), "--quiet"]) == 0
    cell = json.loads(js.read_text())
    assert (cell["attack"], cell["status"], len(cell["rounds"])) == ("tripled", "ok", 3)

    mj = tmp_path / "m.json"
    assert main(["matrix", "quick", *SMALL, "--plugin", str(path), "--attacks", "tripled,none",
                 "--defenses", "fedavg", "--seeds", "0", "--workers", "1", "--store", str(tmp_path / "s.db"),
                 "--json", str(mj), "--quiet"]) == 0
    m = json.loads(mj.read_text())
    assert sorted((c["attack"], c["status"]) for c in m["cells"]) == [("none", "ok"), ("tripled", "ok")]
    assert m["provenance"]["origins"]["tripled"] == f"plugin file {path}"
    drift = {c["attack"]: c["final"]["relative_drift"] for c in m["cells"]}
    assert drift["tripled"] != drift["none"]  # the plugin's rows reached the aggregate

    capsys.readouterr()
    argv = ["run", "quick", *SMALL, "--plugin", str(path), "--attack", "wrong_knowledge", "--quiet"]
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert "attack plugin 'wrong_knowledge' (object WrongKnowledge, from plugin file" in line
    assert "got 'own'" in line


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("ATTACKS = 5\n", "ATTACKS must be a dict of name -> class or factory, got int"),
        ('DEFENSES = {"mine": 5}\n', "DEFENSES['mine'] must be a class or factory"),
        ("TASKS = {3: dict}\n", "TASKS[3] must be a class or factory"),
    ],
)
def test_a_malformed_plugin_table_is_one_line_naming_it(
    tmp_path: Path, fresh_registries: None, capsys: pytest.CaptureFixture[str], body: str, needle: str
) -> None:
    path = tmp_path / f"{modname()}.py"
    path.write_text(body)
    assert main(["run", "quick", *SMALL, "--plugin", str(path), "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert needle in line and "Traceback" not in line


# -- robustfl plugin new -----------------------------------------------------------------------
def test_write_plugin_layout_and_entry_point(tmp_path: Path) -> None:
    root = write_plugin("my_attack", "attack", tmp_path)
    assert root == tmp_path / "robustfl-my-attack"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "robustfl_my_attack/__init__.py",
                     "tests/test_my_attack.py"]
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "robustfl-my-attack"
    assert meta["project"]["dependencies"] == ["robustfl"]
    assert meta["project"]["entry-points"] == {
        "robustfl.attacks": {"my_attack": "robustfl_my_attack:MyAttack"}}
    assert meta["build-system"]["build-backend"] == "setuptools.build_meta"

    root = write_plugin("mean2", "defense", tmp_path)
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"] == {"robustfl.defenses": {"mean2": "robustfl_mean2:Mean2"}}
    src = (root / "robustfl_mean2" / "__init__.py").read_text()
    assert "def min_clients" in src and "properties" in src
    # a stateless template: no reset override (that would declare it stateful), and it says when to add one
    assert "def reset" not in src and "overrides reset()" in src


@pytest.mark.parametrize(
    ("name", "kind", "needle"),
    [
        ("MyAttack", "attack", "lower_snake"),
        ("my-attack", "attack", "lower_snake"),
        ("1st", "attack", "lower_snake"),
        ("class", "defense", "lower_snake"),
        ("", "attack", "lower_snake"),
        ("sign_flip", "attack", "is a built-in attack"),
        ("krum", "defense", "is a built-in defense"),
        ("fine", "task", "--kind must be attack or defense"),
    ],
)
def test_write_plugin_refuses_bad_names(tmp_path: Path, name: str, kind: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        write_plugin(name, kind, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_plugin_new_cli_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugin", "new", "once", "--kind", "defense", "--dir", str(tmp_path)]) == 0
    assert f"wrote plugin package {tmp_path / 'robustfl-once'}" in capsys.readouterr().out
    marker = tmp_path / "robustfl-once" / "README.md"
    marker.write_text("mine")
    assert main(["plugin", "new", "once", "--kind", "attack", "--dir", str(tmp_path)]) == 2
    assert "already exists" in one_line(capsys.readouterr().err)
    assert marker.read_text() == "mine"


def test_generated_skeletons_pass_the_conformance_checks(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: the generated classes pass check_attack / check_defense and compute their formula."""
    from robustfl.testing import check_attack, check_defense, make_context
    from robustfl.types import DefenseContext, Knowledge

    name_a, name_d = f"gen{uuid.uuid4().hex[:8]}", f"gen{uuid.uuid4().hex[:8]}"
    write_plugin(name_a, "attack", tmp_path)
    write_plugin(name_d, "defense", tmp_path)
    for n in (name_a, name_d):
        monkeypatch.syspath_prepend(str(tmp_path / f"robustfl-{n}"))
    try:
        mod_a = __import__(f"robustfl_{name_a}")
        mod_d = __import__(f"robustfl_{name_d}")
        attack = getattr(mod_a, name_a.capitalize())
        check_attack(attack(scale=0.5))
        ctx = make_context(f=2, k=5, p=3, dtype=torch.float64, grant=Knowledge.OWN)
        assert attack(scale=0.5)(ctx).tolist() == [[-0.5 * x for x in r] for r in ctx.own.tolist()]
        rule = getattr(mod_d, name_d.capitalize())
        check_defense(rule())
        u = torch.tensor([[2.0], [4.0], [9.0]], dtype=torch.float64)
        out = rule()(u, DefenseContext(num_samples=torch.tensor([2, 1, 1])))
        assert out.vector.tolist() == [(2 * 2 + 4 + 9) / 4]
    finally:
        for n in (name_a, name_d):
            sys.modules.pop(f"robustfl_{n}", None)


def test_testing_imports_without_hypothesis(monkeypatch: pytest.MonkeyPatch) -> None:
    """hypothesis is an optional extra: check_attack works without it, the strategies say what to install."""
    for name in [m for m in sys.modules if m == "robustfl.testing" or m.startswith("robustfl.testing.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(robustfl, "testing", robustfl.testing)  # restored after the fresh import below
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # import hypothesis -> ModuleNotFoundError
    fresh = importlib.import_module("robustfl.testing")
    from robustfl.attacks.sign_flip import SignFlip

    fresh.check_attack(SignFlip())
    from robustfl.defenses.median import Median

    fresh.check_defense(Median())  # the property suite itself needs no Hypothesis
    with pytest.raises(ImportError, match=r"robustfl.testing.update_matrices needs Hypothesis: pip install "
                                          r"'robustfl\[testing\]'"):
        _ = fresh.update_matrices


# -- the round trip with real installs ----------------------------------------------------------
def _env(paths: list[Path]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ROBUSTFL_DISABLE_PLUGIN_AUTOLOAD", None)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), str(ROOT)])
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


# pip can build offline without build isolation when setuptools builds wheels itself (>= 70.1) or
# the wheel package is there
_CAN_BUILD = (
    "import importlib.metadata as md, importlib.util as u, sys\n"
    "if not (u.find_spec('pip') and u.find_spec('setuptools')): sys.exit(1)\n"
    "v = tuple(int(x) for x in md.version('setuptools').split('.')[:2] if x.isdigit())\n"
    "sys.exit(0 if v >= (70, 1) or u.find_spec('wheel') else 1)\n"
)


def _install(pkg: Path, target: Path) -> subprocess.Popen[str] | None:
    """Start an offline pip install of ``pkg`` into ``target``; None when this Python cannot build it."""
    if subprocess.run([sys.executable, "-c", _CAN_BUILD], capture_output=True).returncode != 0:
        return None
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-cache-dir",
           "--no-build-isolation", "--target", str(target), str(pkg)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env([]))


def _install_by_hand(pkg: Path, target: Path) -> None:
    """What pip would leave: the package and a .dist-info with METADATA and entry_points.txt."""
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    entries: dict[str, dict[str, str]] = meta["entry-points"]
    (target_ep,) = [t for eps in entries.values() for t in eps.values()]
    module = target_ep.split(":")[0]
    shutil.copytree(pkg / module, target / module)
    fake_dist(target, meta["name"], entries, {})


def _cli(args: list[str], paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "robustfl.cli.main", *args], capture_output=True, text=True,
                          env=_env(paths), timeout=300)


@pytest.mark.slow
def test_installed_plugins_round_trip(tmp_path: Path) -> None:
    """plugin new -> pip install -> list shows the origin -> a matrix runs them -> the generated tests
    pass -> uninstall -> list no longer shows it; a broken installed plugin only warns."""
    assert main(["plugin", "new", "myattack", "--kind", "attack", "--dir", str(tmp_path), "--quiet"]) == 0
    assert main(["plugin", "new", "mydefense", "--kind", "defense", "--dir", str(tmp_path), "--quiet"]) == 0
    pkg_a, pkg_d = tmp_path / "robustfl-myattack", tmp_path / "robustfl-mydefense"
    site_a, site_d = tmp_path / "site-a", tmp_path / "site-d"
    procs = [(_install(pkg, site), pkg, site) for pkg, site in ((pkg_a, site_a), (pkg_d, site_d))]
    for proc, pkg, site in procs:
        if proc is None:
            _install_by_hand(pkg, site)
            continue
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    sites = [site_a, site_d]
    # the generated packages' own tests, run while the CLI checks below run
    tests = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg_a / "tests"),
         str(pkg_d / "tests")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(sites),
    )

    listed = _cli(["list", "--json"], sites)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    pairs = {part: [(r["name"], r["origin"]) for r in rows[part]] for part in ("attacks", "defenses")}
    assert ("myattack", "robustfl-myattack 0.1.0") in pairs["attacks"]
    assert ("mydefense", "robustfl-mydefense 0.1.0") in pairs["defenses"]
    assert ("fedavg", "built-in") in pairs["defenses"]
    mine = next(r for r in rows["attacks"] if r["name"] == "myattack")
    assert mine["kind"] == "attack" and isinstance(mine["description"], str)

    mj = tmp_path / "m.json"
    matrix = _cli(["matrix", "quick", *SMALL, "--attacks", "myattack", "--defenses", "mydefense,fedavg",
                   "--seeds", "0", "--workers", "1", "--store", str(tmp_path / "s.db"), "--json", str(mj),
                   "--quiet"], sites)
    report, _ = tests.communicate(timeout=300)
    assert matrix.returncode == 0, matrix.stderr
    m = json.loads(mj.read_text())
    cells = {c["defense"]: c for c in m["cells"]}
    assert {d: (c["attack"], c["status"]) for d, c in cells.items()} == {
        "mydefense": ("myattack", "ok"), "fedavg": ("myattack", "ok")}
    # the skeleton defense is the sample-weighted mean, i.e. FedAvg: the same model, bit for bit
    assert cells["mydefense"]["final"]["drift"] == cells["fedavg"]["final"]["drift"]
    assert m["provenance"]["origins"] == {"myattack": "robustfl-myattack 0.1.0",
                                          "mydefense": "robustfl-mydefense 0.1.0", "fedavg": "built-in"}
    assert tests.returncode == 0, report
    assert "passed" in report and "skipped" not in report  # the 'registered when installed' tests ran

    # uninstall the attack; add an installed plugin that raises on import
    shutil.rmtree(site_a)
    fake_dist(site_d, "robustfl-broken", {"robustfl.attacks": {"broken": "rfl_broken_mod:Thing"}},
              {"rfl_broken_mod": "raise RuntimeError('broken on purpose')\n"})
    listed = _cli(["list", "attacks", "--json"], sites)
    assert listed.returncode == 0, listed.stderr
    names = {r["name"]: r["origin"] for r in json.loads(listed.stdout)}
    assert "myattack" not in names and names["broken"] == "robustfl-broken 0.1.0 (broken)"
    assert "warning: cannot load attack plugin 'broken'" in listed.stderr
    assert "RuntimeError: broken on purpose" in listed.stderr


def test_a_component_is_chosen_by_a_string() -> None:
    from robustfl import attacks, defenses
    from robustfl.errors import ConfigError

    for create, name, article in ((defenses.create, None, "a defense"), (attacks.create, 5, "an attack"),
                                  (defenses.create, {"name": "krum"}, "a defense")):
        with pytest.raises(ConfigError, match=f"^{article} is chosen by its name \\(a string\\), got "):
            create(name)


def test_register_refuses_a_bad_name_or_target_and_the_registry_stays_usable() -> None:
    def factory() -> None:
        return None

    for name in (None, 5, "", "  "):
        with pytest.raises(PluginError, match="registered under a non-empty name"):
            attacks.register(name, factory)  # type: ignore[arg-type]
    for target in (None, 5, "no_colon"):
        with pytest.raises(PluginError, match="register a class or factory"):
            defenses.register("t", target)  # type: ignore[arg-type]
    assert "alie" in attacks.names() and "t" not in defenses.names()  # names() broke after a None name


def test_load_plugin_takes_a_path_and_reports_an_exit_or_a_folder(tmp_path: Path) -> None:
    from robustfl.plugins import load_plugin

    good = tmp_path / "good_plugin.py"
    good.write_text("from robustfl.defenses.median import Median\nDEFENSES = {'median_copy_p': Median}\n")
    assert load_plugin(good) == ["median_copy_p"]  # a pathlib.Path: was an AttributeError
    script = tmp_path / "script_plugin.py"
    script.write_text("import sys\nsys.exit(3)\n")  # an argparse script ended the process silently
    with pytest.raises(PluginError, match="failed to import: SystemExit: 3"):
        load_plugin(str(script))
    with pytest.raises(PluginError, match="a folder, not a file"):
        load_plugin(str(tmp_path))
    with pytest.raises(PluginError, match="a plugin is a file path or a module name, got None"):
        load_plugin(None)  # type: ignore[arg-type]
    typo = tmp_path / "typo_plugin.py"
    typo.write_text("from robustfl.attacks.sign_flip import SignFlip\nATTACK = {'flip_copy_t': SignFlip}\n")
    with pytest.raises(PluginError, match="adds nothing: .*ATTACK is not read: did you mean ATTACKS"):
        load_plugin(typo)  # it returned [] without a word
    by_call = tmp_path / "by_call_plugin.py"
    by_call.write_text("import robustfl\nfrom robustfl.attacks.sign_flip import SignFlip\n"
                       "robustfl.attacks.register('flip_copy_c', SignFlip)\n")
    assert load_plugin(by_call) == [] and "flip_copy_c" in attacks.names()  # registering itself is fine
