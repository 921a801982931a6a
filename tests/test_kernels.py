"""``robustfl.kernels``: the shared numeric kernels, Krum's score against a literal loop, and the
deprecated ``robustfl.defenses._util`` shim (warns, re-exports the same objects)."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from robustfl import kernels as K


def _literal_krum(rows: torch.Tensor, f: int) -> list[float]:
    k = rows.shape[0]
    n = max(0, k - f - 2)
    out = []
    for i in range(k):
        d = sorted(float(((rows[i] - rows[j]) ** 2).sum()) for j in range(k) if j != i)
        out.append(sum(d[:n]))
    return out


@pytest.mark.parametrize(("k", "f"), [(1, 0), (3, 0), (5, 1), (9, 2), (12, 5)])
def test_krum_scores_match_a_literal_loop(k: int, f: int) -> None:
    rows = torch.randn(k, 7, generator=torch.Generator().manual_seed(k + f), dtype=torch.float64)
    scores = K.krum_scores(K.sq_distances(rows), f)
    assert scores.tolist() == pytest.approx(_literal_krum(rows, f), rel=1e-9, abs=1e-12)
    want = min(range(k), key=lambda i: (_literal_krum(rows, f)[i], i))
    assert K.krum_select(rows, f) == want


def test_smallest_sums_ordered_and_unordered_pick_the_same_neighbours() -> None:
    rows = torch.randn(10, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sq = K.sq_distances(rows)
    a, ia = K.smallest_sums(sq, 4)
    b, ib = K.smallest_sums(sq, 4, ordered=False)
    assert torch.allclose(a, b, rtol=1e-12, atol=0)
    assert [sorted(r) for r in ia.tolist()] == [sorted(r) for r in ib.tolist()]
    assert not bool((ia == torch.arange(10)[:, None]).any())  # a row is never its own neighbour
    assert K.krum_neighbours(10, 3) == 5 and K.krum_neighbours(4, 3) == 0


def test_norms_validity_and_distances() -> None:
    rows = torch.tensor([[3.0, 4.0], [0.0, 0.0], [float("nan"), 1.0], [3e38, 3e38]])
    norms = K.row_norms(rows)
    assert norms.dtype == torch.float64
    assert norms[0] == 5.0 and norms[1] == 0.0 and torch.isnan(norms[2])
    assert norms[3] == pytest.approx(3e38 * 2**0.5, rel=1e-6)  # float32 overflow recomputed in float64
    assert K.valid_rows(norms).tolist() == [True, False, False, True]
    assert K.finite_rows(norms).tolist() == [True, True, False, True]
    sq = K.sq_distances(torch.tensor([[0.0, 0.0], [3.0, 4.0]]))
    assert sq.tolist() == [[0.0, 25.0], [25.0, 0.0]]
    assert K.entropy(torch.tensor([0.5, 0.5, 0.0])) == pytest.approx(0.6931471805599453)
    assert K.zero_weights(3, rows).tolist() == [0.0, 0.0, 0.0]


def test_check_updates_refuses_bad_input_in_one_line() -> None:
    from robustfl.errors import InputError

    with pytest.raises(InputError, match=r"^krum: updates must be a floating \(K, P\) tensor, got \(3,\)$"):
        K.check_updates(torch.zeros(3), "krum")
    with pytest.raises(InputError, match="needs at least one row"):
        K.check_updates(torch.zeros(0, 3), "krum")
    K.check_updates(torch.zeros(1, 3), "krum")


def test_the_old_private_module_warns_and_re_exports() -> None:
    sys.modules.pop("robustfl.defenses._util", None)
    with pytest.warns(DeprecationWarning, match=r"robustfl\.kernels"):
        util = importlib.import_module("robustfl.defenses._util")
    for name in ("EPS", "check_updates", "entropy", "finite_rows", "row_norms", "sq_distances", "valid_rows",
                 "zero_weights"):
        assert getattr(util, name) is getattr(K, name)


def test_kernels_are_what_the_rules_and_attacks_use() -> None:
    from robustfl.attacks import fang_krum, min_max
    from robustfl.defenses import _select, krum

    assert fang_krum.krum_scores is K.krum_scores and fang_krum.sq_distances is K.sq_distances
    assert min_max.sq_distances is K.sq_distances
    assert _select.smallest_sums is K.smallest_sums and krum.krum_neighbours is K.krum_neighbours
