"""Issue 16, item 1: LASA against a literal numpy transcription of its formulas on the seeded bank
(scales 1e-10 ... 1e12, 1e-6 relative), hand-computed cases, the no-row-passes fallback, unknown
layers, and the contract field it reads: ``DefenseContext.layers`` as the engine, PSFed and the
Flower strategy fill it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

import robustfl
import robustfl.defenses as D
from robustfl.capabilities import DefenseBase
from robustfl.errors import DataError, InputError, ParameterError
from robustfl.simulation.runner import simulate
from robustfl.testing.defenses import gaussian_rows
from robustfl.types import Aggregate, DefenseContext, layer_ends, restrict_layers

from ..factories import build_problem
from ..factories import defense_ctx as ctx
from .test_reference import SHAPES, assert_rel, bank, cases

# -- the transcription: loops over rows, layers and coordinates, float64 numpy ----------------------


def lasa_ref(
    u: np.ndarray, layers: list[int], sparsity: float = 0.3, lam_n: float = 1.0, lam_s: float = 1.0,
    clip: bool = True,
) -> tuple[np.ndarray, list[list[int]], int]:
    """Returns (the aggregate, the kept rows of each layer, the layers where none passed). All rows
    finite."""
    k, p = u.shape
    rows = [np.array(r, dtype=np.float64) for r in u]
    if clip:  # median-norm clipping, the lower middle value (torch.median in the authors' code)
        norms = [math.sqrt(sum(x * x for x in r)) for r in rows]
        bound = sorted(norms)[(k - 1) // 2]
        rows = [r * (bound / n) if n > bound else r for r, n in zip(rows, norms, strict=True)]
    keep = max(1, math.floor((1 - sparsity) * p))  # Top-k: the k largest magnitudes of each row
    sparse = []
    for r in rows:
        t = sorted((abs(x) for x in r), reverse=True)[keep - 1]
        sparse.append(np.array([x if abs(x) >= t else 0.0 for x in r]))

    def mz(x: list[float]) -> list[float]:
        med, sd = float(np.median(x)), float(np.std(x))
        return [abs(v - med) / sd if sd > 0 else 0.0 for v in x]

    out, kept, none_passed = np.zeros(p), [], 0
    for lo, hi in zip([0, *layers[:-1]], layers, strict=True):
        parts = [r[lo:hi] for r in sparse]
        norm = [math.sqrt(sum(x * x for x in part)) for part in parts]
        pdp = []
        for part in parts:
            sgn = [float(np.sign(x)) for x in part]
            total = sum(abs(s) for s in sgn)
            pdp.append(0.5 * (1 + sum(sgn) / total) if total else 0.5)
        s_l = [i for i, (a, b) in enumerate(zip(mz(norm), mz(pdp), strict=True)) if a < lam_n and b < lam_s]
        none_passed += not s_l
        s_l = s_l or list(range(k))
        out[lo:hi] = sum(parts[i] for i in s_l) / len(s_l)
        kept.append(s_l)
    return out, kept, none_passed


def split(p: int) -> tuple[int, ...]:
    """Up to three layers of unequal sizes."""
    return tuple(sorted({max(1, p // 4), max(1, (2 * p) // 3), p}))


def weights_of(kept: list[list[int]], layers: tuple[int, ...], k: int) -> np.ndarray:
    w = np.zeros(k)
    for (lo, hi), s_l in zip(zip((0, *layers[:-1]), layers, strict=True), kept, strict=True):
        for i in s_l:
            w[i] += (hi - lo) / layers[-1] / len(s_l)
    return w


# -- the bank ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "p", "f", "scale", "seed"), list(cases()))
def test_lasa_matches_transcription(k: int, p: int, f: int, scale: float, seed: int) -> None:
    u = bank(k, p, f, scale, seed)
    layers = split(p)
    for s, lam_n, lam_s, clip in ((0.3, 1.0, 1.0, True), (0.0, 1.0, 1.0, True), (0.9, 1.5, 2.0, True),
                                  (0.3, 1.0, 1.0, False)):
        expected, kept, none_passed = lasa_ref(u, list(layers), s, lam_n, lam_s, clip)
        rule = D.create("lasa", sparsity=s, lambda_n=lam_n, lambda_s=lam_s, clip=clip)
        out = rule(torch.from_numpy(u), ctx(f, layers=layers))
        assert_rel(out.vector, expected)
        assert out.weights is not None
        np.testing.assert_allclose(out.weights.numpy(), weights_of(kept, layers, k), rtol=1e-12, atol=1e-15)
        assert out.stats["layers"] == len(layers) and out.stats["layers_given"] == 1.0
        assert out.stats["min_kept"] == min(len(s) for s in kept)
        assert out.stats["fallback_layers"] == none_passed


def test_bank_shapes_cover_layers_and_filtering() -> None:
    """The bank exercises several layers, a one-coordinate model, and rows actually filtered."""
    assert {split(p) for _, p, _ in SHAPES} >= {(1,), (1, 3, 5), (5, 13, 20)}
    u = bank(23, 40, 5, 1.0, 3)
    _, kept, _ = lasa_ref(u, list(split(40)))
    assert all(0 < len(s) < 23 for s in kept)


# -- hand-computed ------------------------------------------------------------------------------------


def test_hand_computed_filter() -> None:
    """K = 5, P = 4, layers (2, 4), no sparsification.

    Layer A (coords 0-1): rows 1-3 [1, 1], row 4 [1, -1], row 5 [10, 10]. Unclipped, the norms are
    sqrt2 x4 and 10 sqrt2: four equal values and one other give MZ = 2.5 for the odd one (and 0 for
    the rest), so row 5 fails the norm check; PDP = (1, 1, 1, 1/2, 1): row 4 has MZ 2.5. S_A = {1, 2, 3}.
    Layer B (coords 2-3): rows [0, 2] except row 3 [-2, 0]: norms all 2 (MZ 0); PDP (1, 1, 0, 1, 1):
    row 3 has MZ 2.5. S_B = {1, 2, 4, 5} unclipped. out = ([1, 1], [0, 2]).
    Clipped (the default): every row has norm sqrt6 but row 5 (sqrt204), clipped to sqrt6: its layer
    norms become the odd one out in both layers (MZ 2.5), so S_B = {1, 2, 4}; out is unchanged."""
    u = torch.tensor(
        [[1, 1, 0, 2], [1, 1, 0, 2], [1, 1, -2, 0], [1, -1, 0, 2], [10, 10, 0, 2]], dtype=torch.float64
    )
    c = ctx(1, layers=(2, 4))
    plain = D.create("lasa", sparsity=0.0, clip=False)(u, c)
    torch.testing.assert_close(plain.vector, torch.tensor([1.0, 1.0, 0.0, 2.0], dtype=torch.float64))
    assert plain.weights is not None
    torch.testing.assert_close(plain.weights, torch.tensor([7, 7, 4, 3, 3], dtype=torch.float64) / 24)
    assert plain.stats["mean_kept"] == 3.5 and plain.stats["min_kept"] == 3.0
    clipped = D.create("lasa", sparsity=0.0)(u, c)
    torch.testing.assert_close(clipped.vector, torch.tensor([1.0, 1.0, 0.0, 2.0], dtype=torch.float64))
    assert clipped.weights is not None
    torch.testing.assert_close(clipped.weights, torch.tensor([2, 2, 1, 1, 0], dtype=torch.float64) / 6)
    assert clipped.stats["clip_norm"] == pytest.approx(math.sqrt(6), rel=1e-15)


def test_hand_computed_clip_and_sparsify() -> None:
    """Rows [3, 4], [0, 1], [6, 8], [0, 2] (norms 5, 1, 10, 2): the lower median norm is 2, so
    [3, 4] -> [1.2, 1.6] and [6, 8] -> [1.2, 1.6]. With radii too wide to filter, LASA is the mean
    of the clipped rows, [0.6, 1.55]; at sparsity 0.5 (q = 1) each row keeps its larger entry: the
    mean is [0, 1.55]. At the default 0.3 on one row of P = 5, q = floor(3.5) = 3."""
    u = torch.tensor([[3.0, 4.0], [0.0, 1.0], [6.0, 8.0], [0.0, 2.0]], dtype=torch.float64)
    wide = {"lambda_n": 1e9, "lambda_s": 1e9}
    out = D.create("lasa", sparsity=0.0, **wide)(u, ctx(0))
    torch.testing.assert_close(out.vector, torch.tensor([0.6, 1.55], dtype=torch.float64))
    assert out.stats["clip_norm"] == 2.0 and out.weights is not None
    torch.testing.assert_close(out.weights, torch.full((4,), 0.25, dtype=torch.float64))
    out = D.create("lasa", sparsity=0.5, **wide)(u, ctx(0))
    torch.testing.assert_close(out.vector, torch.tensor([0.0, 1.55], dtype=torch.float64))
    one = torch.tensor([[3.0, -1.0, 2.0, 0.5, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(D.create("lasa")(one, ctx(0)).vector, one[0] * torch.tensor([1, 1, 1, 0, 0]))


def test_no_row_passes_averages_every_row() -> None:
    """Rows [1, 2], [2, 1], [-1, -1], [-1, -1]: PDP (1, 1, 0, 0), an even split, MZ = 1 for every
    row, and the check is strict (< lambda_s = 1): no row passes, so all four are averaged (the
    authors' fallback), clipped to the lower median norm sqrt2: ((3 sqrt(2/5) - 2) / 4) twice."""
    u = torch.tensor([[1.0, 2.0], [2.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]], dtype=torch.float64)
    out = D.create("lasa", sparsity=0.0)(u, ctx(1))
    s = math.sqrt(2 / 5)
    torch.testing.assert_close(out.vector, torch.full((2,), (3 * s - 2) / 4, dtype=torch.float64))
    assert out.stats["fallback_layers"] == 1.0 and out.stats["min_kept"] == 4.0
    assert out.weights is not None
    torch.testing.assert_close(out.weights, torch.full((4,), 0.25, dtype=torch.float64))
    # per layer: a second layer where rows do pass is not affected by the first one's fallback
    v = torch.cat([u, torch.tensor([[1.0], [1.0], [1.0], [9.0]], dtype=torch.float64)], 1)
    out = D.create("lasa", sparsity=0.0, clip=False)(v, ctx(1, layers=(2, 3)))
    assert out.stats["fallback_layers"] == 1.0 and out.stats["min_kept"] == 3.0
    assert float(out.vector[2]) == 1.0


def test_a_score_on_its_radius_is_not_below_it_whatever_the_rounding() -> None:
    """Two rows: every MZ-score is exactly 1, the default radius, so no row passes and both are
    averaged -- at every scale (rounding once kept one of the two, a different row at 3.7x)."""
    u = gaussian_rows(2, 4, seed=4)
    base = D.create("lasa")(u, ctx(0))
    assert base.stats["fallback_layers"] == 1.0
    for c in (3.7, 0.37, 1e-10, 1e12):
        out = D.create("lasa")(u * c, ctx(0))
        assert out.weights is not None
        assert torch.equal(out.weights, torch.full((2,), 0.5, dtype=torch.float64))
        assert_rel(out.vector / c, base.vector.numpy(), rtol=1e-14)


def test_unknown_layers_are_one_layer() -> None:
    u = torch.from_numpy(bank(11, 20, 2, 1.0, 1))
    none = D.create("lasa")(u, ctx(2))
    whole = D.create("lasa")(u, ctx(2, layers=(20,)))
    assert torch.equal(none.vector, whole.vector)
    assert none.weights is not None and whole.weights is not None and torch.equal(none.weights, whole.weights)
    assert (none.stats["layers"], none.stats["layers_given"], whole.stats["layers_given"]) == (1.0, 0.0, 1.0)
    expected, _, _ = lasa_ref(u.numpy(), [20])
    assert_rel(none.vector, expected)


def test_refusals_and_parameters() -> None:
    u = torch.from_numpy(bank(7, 5, 1, 1.0, 0))
    for bad, what in (((2, 4), "must end at the rows' width 5, got \\(2, 4\\)"),
                      ((3, 3, 5), "must be strictly increasing end offsets > 0"),
                      ([5], "must be a tuple of integers, got \\[5\\]")):
        with pytest.raises(InputError, match=f"lasa: ctx.layers {what}"):
            D.create("lasa")(u, ctx(1, layers=bad))
    with pytest.raises(InputError, match="lasa: every row has a non-finite entry"):
        D.create("lasa")(torch.full((3, 2), math.nan, dtype=torch.float64), ctx(0))
    with pytest.raises(ParameterError, match="lasa: parameter sparsity must be a finite number >= 0 and < 1"):
        D.create("lasa", sparsity=1.0)
    with pytest.raises(ParameterError, match="defense lasa: parameter lambda_n must be a finite number > 0"):
        D.create("lasa", lambda_n=0)
    with pytest.raises(ParameterError, match="defense lasa: parameter clip must be a boolean"):
        D.create("lasa", clip=1)
    assert D.create("lasa").min_clients(3) == 7


def test_non_finite_rows_are_left_out_and_float32() -> None:
    u = torch.from_numpy(bank(11, 30, 2, 1.0, 2))
    bad = u.clone()
    bad[4, 2] = math.inf
    keep = [i for i in range(11) if i != 4]
    out = D.create("lasa")(bad, ctx(2, layers=(10, 30)))
    alone = D.create("lasa")(u[keep], ctx(2, layers=(10, 30)))
    assert torch.equal(out.vector, alone.vector)
    assert out.weights is not None and alone.weights is not None
    assert float(out.weights[4]) == 0.0 and torch.equal(out.weights[keep], alone.weights)
    f32 = D.create("lasa")(u.float(), ctx(2, layers=(10, 30))).vector
    assert f32.dtype == torch.float32
    want = D.create("lasa")(u, ctx(2, layers=(10, 30))).vector
    assert float((f32.double() - want).abs().max()) <= 1e-5 * float(want.abs().max())


def test_bit_identical_across_thread_counts() -> None:
    g = torch.Generator().manual_seed(3)
    u = torch.randn(21, 70_001, generator=g, dtype=torch.float64) + torch.randn(1, 70_001, generator=g)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = D.create("lasa")(u, ctx(3, layers=(1_000, 70_001))).vector
        torch.set_num_threads(2)
        two = D.create("lasa")(u, ctx(3, layers=(1_000, 70_001))).vector
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


# -- the contract: DefenseContext.layers --------------------------------------------------------------


def test_restrict_layers_to_shared_coordinates() -> None:
    layers = (6, 8, 12)  # three tensors of 6, 2 and 4 entries
    assert restrict_layers(layers, None) == layers and restrict_layers(None, torch.tensor([1])) is None
    assert restrict_layers(layers, torch.tensor([0, 5, 9, 11])) == (2, 4)  # nothing of the 2-entry tensor
    assert restrict_layers(layers, torch.tensor([6, 7])) == (2,)
    assert restrict_layers(layers, torch.tensor([1, 6, 8])) == (1, 2, 3)
    assert restrict_layers(layers, torch.tensor([], dtype=torch.long)) == ()
    assert restrict_layers(layers, torch.tensor([7, 1])) is None  # interleaved: no layer is one block
    assert restrict_layers(layers, torch.tensor([3, 12])) is None  # past the model
    assert layer_ends([6, 0, 2, 4]) == layers


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("ridge", {"dim": 7}, (7,)),
        ("quadratic", {"dim": 5}, (5,)),
        ("quadratic", {"dim": 5, "diagonal": True, "heterogeneity": "scalar"}, (5,)),
        ("logreg", {"dim": 4, "classes": 3}, (12, 15)),  # W (3, 4), b (3)
        ("digits", {"model": "logreg"}, (640, 650)),  # Linear(64, 10)
        ("digits", {"hidden": 8}, (512, 520, 600, 610)),  # Linear(64, 8), Linear(8, 10)
        # small CNN on 28x28: conv 8@5x5 (200 + 8), conv 16@8x5x5 (3200 + 16), linear 16*4*4 -> 10
        ("mnist", {"model": "cnn", "train_size": 100, "test_size": 10}, (200, 208, 3408, 3424, 5984, 5994)),
    ],
)
def test_every_builtin_task_states_its_layers(
    name: str, params: dict[str, Any], expected: tuple[int, ...]
) -> None:
    task = robustfl.tasks.create(name, **params)
    try:
        problem = build_problem(task, clients=3, root_size=0)
    except DataError as exc:
        pytest.skip(f"no data for {name}: {exc}")
    assert problem.layers == expected and problem.layers[-1] == problem.dim


class Recorder(DefenseBase):
    """The mean, remembering each round's (layers, coordinates)."""

    name = "recorder_t"
    seen: list[tuple[Any, Any]] = []

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        Recorder.seen.append((ctx.layers, None if ctx.coordinates is None else ctx.coordinates.clone()))
        k = updates.shape[0]
        return Aggregate(updates.mean(0), torch.full((k,), 1.0 / k, dtype=updates.dtype))


@pytest.fixture
def recorder() -> Any:
    D.register("recorder_t", Recorder, "test")
    Recorder.seen = []
    try:
        yield Recorder.seen
    finally:
        del D.registry._entries["recorder_t"]


def _run(name: str | dict[str, Any], overrides: list[str], **kw: Any) -> None:
    sc = robustfl.load_scenario(name, ["federation.rounds=2", "federation.clients=6", *overrides])
    simulate(sc, "none", "recorder_t", seed=0, **kw)


def test_the_engine_passes_the_models_layers(recorder: list[tuple[Any, Any]]) -> None:
    _run("quick", ["task.dim=4", "task.classes=3"])  # logreg: W (3, 4) then b (3)
    assert [lay for lay, _ in recorder] == [(12, 15), (12, 15)]
    recorder.clear()
    hidden = 32  # digits' MLP: 64 -> 32 -> 10, weight then bias per Linear
    _run({"task": {"name": "digits", "hidden": hidden}}, [],
         reference_model=torch.zeros(64 * hidden + hidden + hidden * 10 + 10))
    ends = tuple(np.cumsum([64 * hidden, hidden, hidden * 10, 10]).tolist())
    assert [lay for lay, _ in recorder] == [ends, ends]


def test_the_engine_translates_layers_under_psfed(recorder: list[tuple[Any, Any]]) -> None:
    _run("psfed", ["task.dim=4", "task.classes=3", "sharing.fraction=0.4"])
    assert len(recorder) == 2
    for layers, coords in recorder:
        assert coords is not None and len(coords) == 6  # floor(0.4 * 15 + 0.5)
        in_w = int((coords < 12).sum())
        assert layers == tuple(e for e in (in_w, 6) if e > 0)  # sorted coordinates: W's, then b's


def test_lasa_runs_in_a_cell_with_the_models_layers() -> None:
    sc = robustfl.load_scenario("quick", ["federation.rounds=3", "federation.clients=10"])
    cell = simulate(sc, "sign_flip", "lasa", seed=0).cell
    assert cell.status == "ok" and math.isfinite(cell.final["relative_drift"]), cell.final
    assert cell.rounds[-1]["defense"]["layers"] == 2.0  # logreg's W and b
