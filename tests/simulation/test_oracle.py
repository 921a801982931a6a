"""The attack's oracle (robustfl.simulation.round.dry_run / oracle_for): every trial answers what
the real aggregation would, and no trial changes the round (its generator, its rows, a stateful
rule's history)."""

from __future__ import annotations

import torch

from robustfl import defenses
from robustfl.simulation.round import Round, dry_run, oracle_for
from robustfl.types import DefenseContext


def _rows(seed: int) -> torch.Tensor:
    return torch.randn(13, 40, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_trials_answer_as_the_real_call_and_leave_the_stream_alone() -> None:
    dnc = defenses.create("dnc", subsample=8)  # draws coordinates from the round's generator
    for gen in (torch.Generator().manual_seed(5), None):
        ctx = DefenseContext(assumed_byzantine=2, generator=gen)
        state = gen.get_state() if gen is not None else None
        run = dry_run(dnc, ctx)
        first = [run(_rows(s)).vector for s in range(3)]
        again = [run(_rows(s)).vector for s in range(3)]  # the same stream each trial
        assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
        if gen is not None:
            assert torch.equal(gen.get_state(), state)  # the round's stream untouched
        real = dnc(_rows(2), ctx).vector  # what the round then computes
        assert torch.equal(real, first[2])


def test_a_stateful_rule_is_tried_on_a_copy() -> None:
    cc = defenses.create("centered_clipping")
    ctx = DefenseContext(assumed_byzantine=2, generator=torch.Generator().manual_seed(0))
    twin = defenses.create("centered_clipping")
    for s in range(2):  # some history first
        cc(_rows(s), ctx)
        twin(_rows(s), ctx)
    run = dry_run(cc, ctx)
    for s in range(5, 9):
        run(_rows(s))
    assert torch.equal(cc(_rows(3), ctx).vector, twin(_rows(3), ctx).vector)


def test_the_oracle_places_candidates_in_the_byzantine_rows_only() -> None:
    rows = _rows(0)
    byz = torch.zeros(13, dtype=torch.bool)
    byz[[1, 4, 9]] = True
    r = Round(t=0, w=torch.zeros(40, dtype=torch.float64), rows=rows.clone(), byz=byz)
    seen: list[torch.Tensor] = []
    fedavg = defenses.create("fedavg")
    oracle = oracle_for(r, lambda trial: seen.append(trial) or fedavg(trial, DefenseContext()))
    candidate = torch.full((3, 40), 7.0, dtype=torch.float32)
    out = oracle(candidate).vector
    (trial,) = seen
    expected = rows.clone()
    expected[byz] = 7.0
    assert torch.equal(trial, expected) and torch.equal(r.rows, rows)  # the round's rows untouched
    torch.testing.assert_close(out, expected.mean(0), rtol=1e-12, atol=0)
