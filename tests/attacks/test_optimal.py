"""optimal: the line search returns the parameter maximising the oracle deviation (grid check)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.errors import ParameterError
from robustfl.types import Aggregate, Knowledge

from ..factories import attack_ctx as ctx
from ..factories import np_

TAU = 6.0


def norm_filter_oracle(honest: torch.Tensor):  # type: ignore[no-untyped-def]
    """Mean of the rows with norm <= TAU: the deviation grows with z until the rows are dropped."""

    def oracle(rows: torch.Tensor) -> Aggregate:
        u = torch.cat([rows, honest])
        keep = torch.linalg.vector_norm(u, dim=1) <= TAU
        return Aggregate(vector=u[keep].mean(0))

    return oracle


def deviation(c, z: float) -> float:  # type: ignore[no-untyped-def]
    h = np_(c.honest)
    m = h.mean(0) + z * h.std(0)
    u = np.vstack([np.tile(m, (c.own.shape[0], 1)), h])
    keep = np.linalg.norm(u, axis=1) <= TAU
    return float(np.linalg.norm(u[keep].mean(0) - h.mean(0)))


def test_optimal_beats_a_fine_grid() -> None:
    c0 = ctx(f=3, n=7, p=20, seed=0)
    assert c0.honest is not None
    assert float(torch.linalg.vector_norm(c0.honest, dim=1).max()) < TAU
    c = dataclasses.replace(c0, oracle=norm_filter_oracle(c0.honest))
    attack = attacks.create("optimal")  # base alie, parameter z, [0, 10]
    out = np_(attack(c))
    z = attack.last_stats["parameter"]
    grid = np.linspace(0, 10, 1001)
    best_grid = max(deviation(c, x) for x in grid)
    assert 0 < z < 10
    assert deviation(c, z) >= best_grid - 1e-12
    assert attack.last_stats["deviation"] == pytest.approx(deviation(c, z), rel=1e-12)
    h = np_(c.honest)
    np.testing.assert_allclose(out, np.tile(h.mean(0) + z * h.std(0), (3, 1)), rtol=1e-12)


def test_optimal_ipm_monotone_objective_hits_the_end() -> None:
    c0 = ctx(f=3, n=7, p=10, seed=1)
    honest = c0.honest
    assert honest is not None

    def mean_oracle(rows: torch.Tensor) -> Aggregate:
        return Aggregate(vector=torch.cat([rows, honest]).mean(0))

    c = dataclasses.replace(c0, oracle=mean_oracle)
    attack = attacks.create("optimal", base="ipm", low=0.5, high=4)  # parameter epsilon by default
    out = np_(attack(c))
    assert attack.last_stats["parameter"] == 4.0  # under the mean the deviation grows with epsilon
    np.testing.assert_allclose(out, np.tile(-4 * np_(c.honest).mean(0), (3, 1)), rtol=1e-12)


def test_optimal_knowledge_and_parameters() -> None:
    assert Knowledge.ORACLE in attacks.create("optimal").knowledge
    with_ref = attacks.create("optimal", base={"name": "scaling", "base": "fltrust_adaptive"})
    assert with_ref.knowledge == Knowledge.OWN | Knowledge.HONEST | Knowledge.REFERENCE | Knowledge.ORACLE
    assert attacks.create("optimal", base="ipm").last_stats == {}  # epsilon = 0 (low) is accepted
    with pytest.raises(ParameterError, match="parameter parameter"):
        attacks.create("optimal", base="mimic")
    with pytest.raises(ParameterError, match="high"):
        attacks.create("optimal", low=2, high=1)
    with pytest.raises(ParameterError, match="epsilon"):
        attacks.create("optimal", base="ipm", low=-1, high=1)  # ipm refuses epsilon = -1


@pytest.mark.parametrize(("name", "parameter"), [("alie", "z"), ("ipm", "epsilon")])
def test_along_is_the_attack_at_each_value(name: str, parameter: str) -> None:
    """``along``'s rows equal the attack built with the parameter at that value, bit for bit, and
    the search through the line picks the same rows as the search building the attack each time."""
    c = ctx(f=3, n=7, p=20, seed=2, honest=True)
    line = attacks.create(name).along(c, parameter)
    assert line is not None
    for x in (0.0, 0.37, 1.5, 10.0):
        assert torch.equal(line(x), attacks.create(name, **{parameter: x})(c))
    assert attacks.create(name).along(c, "other") is None
    assert attacks.create("sign_flip").along(c, "scale") is None  # not offered: built per value


def test_optimal_same_rows_with_and_without_the_line() -> None:
    c0 = ctx(f=3, n=7, p=20, seed=0)
    assert c0.honest is not None
    c = dataclasses.replace(c0, oracle=norm_filter_oracle(c0.honest))
    fast = attacks.create("optimal")
    slow = attacks.create("optimal")
    slow._line = lambda ctx, device, state: (lambda x: slow._rows(ctx, device, state, x))  # type: ignore[method-assign]
    assert torch.equal(fast(c), slow(c))
    assert fast.last_stats == slow.last_stats


def test_fewer_steps_evaluate_a_prefix_of_the_same_search() -> None:
    """``steps = N`` evaluates the first 21 + (N + 1) points of the 30-step search (the grid, the
    first two golden points, then one a step) and returns the best of them: never stronger than
    more steps, and exactly the prefix's best."""
    c0 = ctx(f=3, n=7, p=20, seed=0)
    assert c0.honest is not None
    base = norm_filter_oracle(c0.honest)
    target = c0.honest.mean(0)
    seen: list[float] = []

    def recording(rows: torch.Tensor) -> Aggregate:
        agg = base(rows)
        seen.append(float(torch.linalg.vector_norm(agg.vector - target)))
        return agg

    c = dataclasses.replace(c0, oracle=recording)
    full = attacks.create("optimal")
    full(c)
    sequence = list(seen)
    assert len(sequence) == 52 == full.last_stats["evaluations"]
    found = []
    for n in (0, 1, 2, 7, 19, 30):
        seen.clear()
        attack = attacks.create("optimal", steps=n)
        attack(c)
        count = 21 + (n + 1 if n else 0)
        assert seen == sequence[:count]  # the same points, in the same order
        assert attack.last_stats["evaluations"] == count
        assert attack.last_stats["deviation"] == max(sequence[:count])
        found.append(attack.last_stats["deviation"])
    assert found == sorted(found) and found[-1] == full.last_stats["deviation"]
    assert found[0] < found[-1]  # the steps matter here (the filter's kink lies between grid points)
    with pytest.raises(ParameterError, match="steps"):
        attacks.create("optimal", steps=-1)
