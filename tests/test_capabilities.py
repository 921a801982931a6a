"""Declared capabilities (robustfl.capabilities): built-ins declare, plugins are adapted once.

The engine reads what a component can do from its declaration -- never from its name or by
probing attributes -- so (a) every built-in derives from its base and declares exactly what it
implements, and (b) a plugin that does not derive from a base runs through the adapter with the
same results as the built-in it imitates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import robustfl
from robustfl import attacks, defenses
from robustfl.attacks._common import Composite
from robustfl.capabilities import AttackBase, DefenseBase, PreAggregatorBase
from robustfl.defenses import pre_registry
from robustfl.defenses.compose import compose
from robustfl.errors import ConfigError, InputError
from robustfl.registry.adapters import PluginAttack, PluginDefense, PluginPre, as_attack, as_defense, as_pre
from robustfl.simulation.runner import simulate
from robustfl.types import Aggregate, AttackContext, DefenseContext, Knowledge, TaskInfo

from .factories import builtins, create_builtin

REGRESSION = TaskInfo(name="ridge", num_classes=None, input_shape=(5,), is_image=False)


def _overrides(cls: type, name: str) -> bool:
    return any(name in vars(c) for c in cls.__mro__ if c not in (AttackBase, object))


@pytest.mark.parametrize("name", attacks.registry.names())
def test_builtin_attacks_derive_from_the_base_and_declare_what_they_implement(name: str) -> None:
    if attacks.origin(name) != "built-in":
        pytest.skip("plugin")
    a = attacks.create(name)
    assert isinstance(a, AttackBase) and as_attack(a, name) is a  # never wrapped
    assert isinstance(a.knowledge, Knowledge)
    cls = type(a)
    if isinstance(a, Composite):  # answers for its base (default base, if any), plus its own
        base = a._base
        assert a.poisons_data == (base is not None and base.poisons_data), name
        assert a.backdoor == (base is not None and base.backdoor), name
        assert a.sybil == ("sybil_rows" in vars(cls) or (base is not None and base.sybil)), name
        return
    # a capability is declared exactly where the class implements it
    assert a.poisons_data == _overrides(cls, "poison"), name
    assert a.backdoor == _overrides(cls, "trigger"), name
    assert a.sybil == _overrides(cls, "sybil_rows"), name


@pytest.mark.parametrize("name", defenses.registry.names())
def test_builtin_defenses_derive_from_the_base(name: str) -> None:
    if defenses.origin(name) != "built-in":
        pytest.skip("plugin")
    d = defenses.create(name)
    assert isinstance(d, DefenseBase) and as_defense(d) is d
    assert d.name == name
    # the built-ins that read the server's root-data update: FLTrust, and MoNNA with its default pivot
    assert d.needs_reference is (name in ("fltrust", "monna"))


STATEFUL = {"centered_clipping", "foolsgold", "fldetector"}  # keep history across rounds


def _state(obj: Any) -> Any:
    """A comparable snapshot of everything ``obj`` holds (tensors as lists)."""
    if isinstance(obj, Tensor):
        return ("tensor", obj.dtype, tuple(obj.shape), obj.tolist())
    if isinstance(obj, dict):
        return {k: _state(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return type(obj).__name__, [_state(v) for v in obj]
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return type(obj).__name__, _state(vars(obj))
    return obj


@pytest.mark.parametrize("name", defenses.registry.names())
def test_a_rule_declares_state_exactly_when_it_keeps_some(name: str) -> None:
    """``stateful`` (read from a ``reset`` override) is True for the rules with history, and a rule
    declaring none holds the same after a call as before: the oracle calls it without a copy."""
    if defenses.origin(name) != "built-in":
        pytest.skip("plugin")
    d = defenses.create(name)
    assert d.stateful is (name in STATEFUL)
    g = torch.Generator().manual_seed(1)
    rows = torch.randn(11, 7, generator=g, dtype=torch.float64)
    ctx = DefenseContext(assumed_byzantine=2, reference=torch.randn(7, generator=g, dtype=torch.float64),
                         generator=torch.Generator().manual_seed(2), layers=(5, 7),
                         global_model=torch.zeros(7, dtype=torch.float64))
    before = _state(d)
    d(rows, ctx)
    assert (_state(d) == before) is (not d.stateful), name
    assert compose(pre_registry.create("nnm"), then=defenses.create("krum")).stateful  # forwards reset


@pytest.mark.parametrize("name", pre_registry.names())
def test_builtin_pre_aggregators_derive_from_the_base(name: str) -> None:
    p = create_builtin(pre_registry, name)
    assert isinstance(p, PreAggregatorBase) and as_pre(p) is p and p.name == name
    assert p.fresh_output == _overrides(type(p), "apply_")  # the four built-ins: in place iff fresh


def test_composites_answer_for_their_base() -> None:
    boosted = attacks.create("scaling", base={"name": "backdoor", "target_label": 3})
    flags = (boosted.poisons_data, boosted.backdoor, boosted.sybil, boosted.target_label)
    assert flags == (True, True, False, 3)
    sybil = attacks.create("sybil", base="label_flip")
    assert (sybil.poisons_data, sybil.backdoor, sybil.sybil) == (True, False, True)
    plain = attacks.create("scaling")
    assert (plain.poisons_data, plain.backdoor, plain.sybil) == (False, False, False)
    with pytest.raises(NotImplementedError):
        plain.poison(torch.zeros(2, 3), torch.zeros(2), None)
    composed = compose(pre_registry.create("nnm"), then=defenses.create("fltrust"))
    assert composed.needs_reference is True and composed.name == "nnm+fltrust"


# -- plugins that do not derive from a base -------------------------------------------------------
class PlainBackdoor:
    """A backdoor plugin written against the contract only: attributes, no base class."""

    knowledge = Knowledge.OWN
    poisons_data = True

    def __init__(self) -> None:
        self._inner = attacks.create("backdoor", target_label=2)
        self.target_label = 2
        self.last_stats = {"calls": 0.0}

    def setup(self, info: TaskInfo) -> None:
        self._inner.setup(info)

    def poison(self, x: Tensor, y: Tensor, g: Any) -> tuple[Tensor, Tensor]:
        return self._inner.poison(x, y, g)

    def trigger(self, x: Tensor) -> Tensor:
        return self._inner.trigger(x)

    def __call__(self, ctx: AttackContext) -> Tensor:
        self.last_stats = {"calls": self.last_stats["calls"] + 1}
        return ctx.own.clone()


class PlainKrum:
    """A defense plugin with min_clients and reset but no base class (delegates to Krum)."""

    def __init__(self) -> None:
        self._inner = defenses.create("krum")
        self.resets = 0

    def min_clients(self, f_hat: int) -> int:
        return self._inner.min_clients(f_hat)

    def reset(self) -> None:
        self.resets += 1

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        return self._inner(updates, ctx)


class LabelsOnly:
    knowledge = Knowledge.OWN
    poisons_data = True

    def poison(self, x: Tensor, y: Tensor, g: Any) -> tuple[Tensor, Tensor]:
        return x, y

    def __call__(self, ctx: AttackContext) -> Tensor:
        return ctx.own


@pytest.fixture
def registered() -> Iterator[None]:
    attacks.register("plain_backdoor_t", PlainBackdoor, "test")
    defenses.register("plain_krum_t", PlainKrum, "test")
    try:
        yield
    finally:
        del attacks.registry._entries["plain_backdoor_t"]
        del defenses.registry._entries["plain_krum_t"]


def test_adapter_declares_what_a_plain_plugin_shows() -> None:
    a = as_attack(PlainBackdoor(), "mine")
    assert isinstance(a, PluginAttack)
    assert (a.poisons_data, a.backdoor, a.sybil, a.target_label) == (True, True, False, 2)
    d = as_defense(PlainKrum())
    assert isinstance(d, PluginDefense) and d.name == "plainkrum"
    assert d.min_clients(3) == 2 * 3 + 3 and d.admits(9, 3) and not d.admits(8, 3)
    d.reset()
    assert d.obj.resets == 1  # type: ignore[attr-defined]
    bare = as_defense(lambda u, c: Aggregate(u.mean(0)))
    assert bare.admits(1, 0) and bare.min_clients(5) == 1 and bare.properties == frozenset()
    with pytest.raises(ConfigError, match="'labels' poisons labels and does not apply to task 'ridge'"):
        as_attack(LabelsOnly(), "labels").setup(REGRESSION)


def test_adapted_pre_aggregator_keeps_the_callers_rows() -> None:
    class Halve:
        fresh_output = True

        def __call__(self, u: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, None]:
            return u / 2, ctx, None

        def transform_counts(self, k: int, f: int) -> tuple[int, int]:
            return k, f

    p = as_pre(Halve())
    assert isinstance(p, PluginPre) and p.fresh_output and p.name == "halve" and p.preserves == frozenset()
    rows = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    before = rows.clone()
    agg = compose(Halve(), Halve(), then=defenses.create("fedavg"))(rows, DefenseContext())
    torch.testing.assert_close(agg.vector, before.mean(0) / 4, rtol=0, atol=1e-15)
    assert torch.equal(rows, before)


def test_plain_plugins_run_in_the_engine_exactly_as_the_builtins(registered: None) -> None:
    sc = robustfl.load_scenario(
        "quick",
        ["task.name=digits", "federation.clients=12", "federation.rounds=4", "server.root_size=0",
         "threat.byzantine=0.25"],
    )
    plain = simulate(sc, "plain_backdoor_t", "plain_krum_t", seed=0).cell
    builtin = simulate(sc, {"name": "backdoor", "target_label": 2}, "krum", seed=0).cell
    assert plain.status == builtin.status == "ok"
    asr = [r["attack_success_rate"] for r in plain.rounds]
    assert asr == [r["attack_success_rate"] for r in builtin.rounds]  # trigger declared -> measured
    assert plain.final["relative_drift"] == builtin.final["relative_drift"]
    assert plain.rounds[-1]["attack"] == {"calls": 4.0}  # last_stats read through the adapter


def test_the_reference_is_required_by_declaration_not_by_name() -> None:
    class NeedsRoot(DefenseBase):
        needs_reference = True

        def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
            assert ctx.reference is not None
            return Aggregate(ctx.reference.clone())

    defenses.register("needs_root_t", NeedsRoot, "test")
    try:
        sc = robustfl.load_scenario("quick", ["server.root_size=0", "federation.rounds=2"])
        with pytest.raises(ConfigError, match="^defense 'needs_root_t' needs the server's root data"):
            simulate(sc, "none", "needs_root_t", seed=0)
        with pytest.raises(ConfigError, match="^attack 'fltrust_adaptive' needs the server's root data"):
            simulate(sc, "fltrust_adaptive", "median", seed=0)  # only the one that needs it is named
        with pytest.raises(ConfigError, match="^defense 'needs_root_t' and attack 'fltrust_adaptive' need "):
            simulate(sc, "fltrust_adaptive", "needs_root_t", seed=0)
        with_root = robustfl.load_scenario("quick", ["federation.rounds=2"])
        cell = simulate(with_root, "none", "needs_root_t", 0).cell
        assert cell.status == "ok"
    finally:
        del defenses.registry._entries["needs_root_t"]


def test_baseline_and_guarantee_are_declared_not_named() -> None:
    # the no-attack baseline and the rule without any guarantee say so themselves
    # (built-ins only: a test before this one may have left a --plugin attack in the registry)
    assert [n for n in builtins(attacks.registry) if attacks.create(n).honest] == ["none"]
    builtin = builtins(defenses.registry)
    assert [n for n in builtin if not defenses.create(n).tolerates_byzantine] == ["fedavg"]

    class Quiet(AttackBase):  # an honest baseline under another name: no client counts as Byzantine
        honest = True

        def __call__(self, ctx: AttackContext) -> Tensor:
            return ctx.own.clone()

    attacks.register("quiet_t", Quiet, "test")
    try:
        sc = robustfl.load_scenario("quick", ["federation.rounds=2", "federation.clients=10"])
        quiet = simulate(sc, "quiet_t", "fedavg", seed=0).cell
        none = simulate(sc, "none", "fedavg", seed=0).cell
        assert quiet.rounds == none.rounds  # same rows, and no row counted as Byzantine
        assert quiet.final.get("byzantine_weight") == 0.0
    finally:
        del attacks.registry._entries["quiet_t"]


def test_a_cost_refusal_is_declared_and_checked_before_a_matrix_runs(tmp_path: Path) -> None:
    """MDA and SMEA refuse subset counts past max_subsets: ``refusal(k, f_hat)`` says so exactly when
    the call would raise (the same words), a composition asks its inner rule at the transformed
    counts, and a cell that would meet it is refused when it is set up (run, matrix, validate: exit
    2 before anything runs; --allow-outside-guarantee does not lift it)."""
    from robustfl.cli import main

    mda, smea = defenses.create("mda", max_subsets=494), defenses.create("smea", max_subsets=219)
    assert mda.refusal(12, 4) == "C(K, f_hat) = C(12, 4) = 495 subsets exceed max_subsets = 494"
    assert defenses.create("mda", max_subsets=495).refusal(12, 4) is None
    assert smea.refusal(12, 3) is not None and defenses.create("smea", max_subsets=220).refusal(12, 3) is None
    rows = torch.zeros(12, 2, dtype=torch.float64)
    for rule in (mda, smea):
        f = 4 if rule is mda else 3
        with pytest.raises(InputError) as err:
            rule(rows, DefenseContext(assumed_byzantine=f))
        assert str(err.value) == f"{rule.name}: {rule.refusal(12, f)}"
    assert defenses.create("krum").refusal(10**6, 10**5) is None  # the default: no cost limit
    bucketed = compose(pre_registry.create("bucketing", size=2), then=mda)
    k, f = bucketed.transform_counts(24, 4)
    assert bucketed.refusal(24, 4) == mda.refusal(k, f)
    store = str(tmp_path / "m.db")
    base = ["--set", 'matrix.defenses=["fedavg", "mda"]', "--set", "matrix.seeds=[0]", "--quiet"]
    for argv in (["validate", "quick", *base], ["matrix", "quick", *base, "--store", store],
                 ["matrix", "quick", *base, "--store", store, "--allow-outside-guarantee"],
                 ["run", "quick", "--defense", "mda", "--quiet"]):
        assert main(argv) == 2
    assert not Path(store).exists()  # refused before the store was made
    assert main(["validate", "quick", *base, "--set", "federation.clients=20"]) == 0  # C(20, 4): fine


@pytest.mark.parametrize(
    ("returned", "needle"),
    [
        (lambda u: None, "returned NoneType; expected an Aggregate whose vector has shape (5,)"),
        (lambda u: Aggregate(u.mean(0)[:3]), "returned a vector of shape (3,)"),
        (lambda u: u.mean(0), "returned Tensor"),
    ],
)
def test_a_defense_breaking_its_contract_fails_its_cell_with_one_line(returned: Any, needle: str) -> None:
    class Broken(DefenseBase):
        def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
            return returned(updates)  # type: ignore[no-any-return]

    defenses.register("broken_contract_t", Broken, "test")
    try:
        sc = robustfl.load_scenario("quick", ["task.name=ridge", "task.dim=5", "federation.rounds=2",
                                              "federation.clients=10"])
        with pytest.raises(robustfl.RobustFLError) as err:
            simulate(sc, "none", "broken_contract_t", seed=0)
        assert str(err.value).startswith("defense 'broken_contract_t' returned") and needle in str(err.value)
        assert len(str(err.value).splitlines()) == 1
    finally:
        del defenses.registry._entries["broken_contract_t"]


def test_compose_takes_components_or_their_names_and_refuses_the_rest() -> None:
    rows = torch.randn(12, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ctx = DefenseContext(assumed_byzantine=2)
    by_name = compose("nnm", {"name": "bucketing", "size": 2}, then="krum")
    by_object = compose(pre_registry.create("nnm"), pre_registry.create("bucketing", size=2),
                        then=defenses.create("krum"))
    assert by_name.label == by_object.label == "nnm+bucketing+krum"
    assert torch.equal(by_name(rows, ctx).vector, by_object(rows, ctx).vector)
    for pre, then, needle in (
        (("nnmm",), "krum", "unknown pre-aggregator 'nnmm'"),
        ((3,), "krum", "each pre stage must be a pre-aggregator (or its name), got 3"),
        ((defenses.create("krum"),), "krum", "each pre stage must be a pre-aggregator"),
        (("nnm",), None, "then= must be a defense (or its name), got None"),
        (("nnm",), pre_registry.create("nnm"), "then= must be a defense"),
    ):
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            compose(*pre, then=then)


@pytest.mark.parametrize("f", [-1, 2.5, True, "2"])
def test_a_context_refuses_an_f_hat_that_is_not_a_count(f: Any) -> None:
    with pytest.raises(InputError, match=r"^DefenseContext.assumed_byzantine must be an integer >= 0"):
        DefenseContext(assumed_byzantine=f)
    import numpy as np

    assert DefenseContext(assumed_byzantine=np.int64(3)).assumed_byzantine == 3  # numpy counts are counts
