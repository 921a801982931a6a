"""Tasks: exact optima, the clean objective, vmappable losses, splits and determinism.

Every check compares against an independent transcription of the task's formula written here
(per-client loops, numpy solves), never against the task's own loss.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.func import grad, vmap

import robustfl.tasks as tasks
from robustfl.errors import ConfigError, ParameterError
from robustfl.tasks.base import Partition, Problem, Task
from robustfl.tasks.digits import Digits
from robustfl.tasks.logreg import LogReg
from robustfl.tasks.quadratic import Quadratic
from robustfl.tasks.ridge import Ridge

from ..factories import build_problem, gen

F64 = torch.float64


build = partial(build_problem, clients=8, root_size=30)


# -- independent per-sample losses (float64), from the formulas in SPEC.md section 4 -------------

def ref_loss(task: Task, w: Tensor, batch: tuple[Tensor, ...]) -> Tensor:
    """Mean per-sample loss over ``batch`` (only real samples) + the regulariser, in float64."""
    w = w.to(F64)
    if isinstance(task, Quadratic):
        a, c = (t.to(F64) for t in batch)
        terms = []
        for i in range(c.shape[0]):
            r = w - c[i]
            terms.append(0.5 * (r * a[i] * r).sum() if task.diagonal else 0.5 * r @ a[i] @ r)
        return torch.stack(terms).mean()
    x, y = batch
    x = x.to(F64)
    if isinstance(task, Ridge):
        return (0.5 * (x @ w - y.to(F64)) ** 2).mean() + 0.5 * task.l2 * (w @ w)
    if isinstance(task, LogReg):
        k, d = task.classes, task.dim
        logits = x @ w[: k * d].reshape(k, d).T + w[k * d:]
        reg = task.l2
    else:
        assert isinstance(task, Digits)
        x = x.reshape(x.shape[0], -1)
        if task.model == "mlp":
            h = task.hidden
            w1, b1 = w[: 64 * h].reshape(h, 64), w[64 * h: 65 * h]
            w2, b2 = w[65 * h: 65 * h + 10 * h].reshape(10, h), w[65 * h + 10 * h:]
            logits = torch.relu(x @ w1.T + b1) @ w2.T + b2
        else:
            logits = x @ w[:640].reshape(10, 64).T + w[640:]
        reg = task.l2
    ce = torch.logsumexp(logits, dim=1) - logits[torch.arange(y.numel()), y]
    return ce.mean() + 0.5 * reg * (w @ w)


def opt(p: Problem) -> Tensor:
    assert p.optimum is not None
    return p.optimum


def client_batches(p: Problem) -> list[tuple[Tensor, ...]]:
    """Each client's real samples (padding dropped)."""
    out = []
    for k in range(p.client_mask.shape[0]):
        keep = p.client_mask[k]
        out.append(tuple(t[k][keep] for t in p.client_data))
    return out


def ref_objective(task: Task, p: Problem, w: Tensor) -> Tensor:
    """F(w) = sum_k n_k F_k(w) / sum_k n_k by a slow loop over clients."""
    total, count = torch.zeros((), dtype=F64), 0
    for batch in client_batches(p):
        n = batch[0].shape[0]
        total = total + n * ref_loss(task, w, batch)
        count += n
    return total / count


CONVEX: list[tuple[str, Callable[[], Task], Partition]] = [
    ("quadratic", lambda: Quadratic(dim=6, cond=10.0, spread=1.0), Partition()),
    ("quadratic-diag", lambda: Quadratic(dim=7, cond=50.0, diagonal=True), Partition()),
    ("ridge", lambda: Ridge(dim=5, samples_per_client=20, cond=4.0), Partition()),
    ("logreg", lambda: LogReg(dim=4, classes=3, samples_per_client=25, test_size=300),
     Partition("dirichlet", alpha=0.3)),
]
NEURAL: list[tuple[str, Callable[[], Task], Partition]] = [
    ("digits-mlp", lambda: Digits(hidden=8), Partition("dirichlet", alpha=0.5)),
    ("digits-logreg", lambda: Digits(model="logreg", l2=0.01), Partition("shards")),
]
ALL = CONVEX + NEURAL


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[Task, Problem]]:
    out = {}
    for name, make, partition in ALL:
        task = make()
        out[name] = (task, build(task, partition=partition))
    return out


# -- exact optima -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [c[0] for c in CONVEX])
def test_gradient_vanishes_at_the_optimum(built: dict[str, tuple[Task, Problem]], name: str) -> None:
    task, p = built[name]
    assert p.optimum is not None and p.optimum.dtype == F64 and p.optimum.shape == (p.dim,)
    w = p.optimum.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(ref_objective(task, p, w), w)
    assert float(g.norm()) <= 1e-8
    # and it is a minimum: F goes up in every direction (checked with both implementations)
    f0 = p.objective(p.optimum)
    assert f0 == pytest.approx(float(ref_objective(task, p, p.optimum)), rel=1e-12, abs=1e-12)
    for seed in range(5):
        delta = torch.randn(p.dim, generator=gen(seed), dtype=F64)
        delta *= 1e-3 / delta.norm()
        assert p.objective(p.optimum + delta) > f0
        assert float(ref_objective(task, p, p.optimum + delta)) > float(ref_objective(task, p, p.optimum))


def test_quadratic_optimum_against_numpy(built: dict[str, tuple[Task, Problem]]) -> None:
    for name in ("quadratic", "quadratic-diag"):
        task, p = built[name]
        a, c = p.client_data[0][:, 0].numpy(), p.client_data[1][:, 0].numpy()
        if a.ndim == 2:
            a = np.stack([np.diag(row) for row in a])
        expected = np.linalg.solve(a.sum(0), np.einsum("kij,kj->i", a, c))
        np.testing.assert_allclose(opt(p).numpy(), expected, rtol=1e-10, atol=1e-12)
        # every A_k symmetric with spectrum inside [1/cond, 1], and the A_k differ
        assert isinstance(task, Quadratic)
        eig = np.linalg.eigvalsh(a)
        assert eig.min() >= 1 / task.cond - 1e-12 and eig.max() <= 1 + 1e-12
        np.testing.assert_allclose(a, np.swapaxes(a, 1, 2), atol=1e-15)
        assert np.abs(a[0] - a[1]).max() > 1e-3
        assert p.num_samples.tolist() == [1] * 8 and bool(p.client_mask.all())


def test_quadratic_diagonal_layout(built: dict[str, tuple[Task, Problem]]) -> None:
    _, p = built["quadratic-diag"]
    assert p.client_data[0].shape == (8, 1, 7) and p.client_data[1].shape == (8, 1, 7)
    _, p = built["quadratic"]
    assert p.client_data[0].shape == (8, 1, 6, 6) and p.client_data[1].shape == (8, 1, 6)
    assert p.root_data is not None and p.root_data[0].shape == (30, 6, 6)


def test_ridge_optimum_against_numpy_normal_equations(built: dict[str, tuple[Task, Problem]]) -> None:
    task, p = built["ridge"]
    assert isinstance(task, Ridge)
    x = np.concatenate([b[0].numpy() for b in client_batches(p)])
    y = np.concatenate([b[1].numpy() for b in client_batches(p)])
    n = x.shape[0]
    assert n == 8 * 20
    expected = np.linalg.solve(x.T @ x + n * task.l2 * np.eye(task.dim), x.T @ y)
    np.testing.assert_allclose(opt(p).numpy(), expected, rtol=1e-10, atol=1e-12)


def test_ridge_extras_population_quantities(built: dict[str, tuple[Task, Problem]]) -> None:
    task, p = built["ridge"]
    assert isinstance(task, Ridge)
    sigma, w_true = p.extras["sigma"].numpy(), p.extras["w_true"].numpy()
    # eigenvalues geometric from 1 down to 1/cond, eigenvectors rotated (cond > 1)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(sigma))[::-1],
                               4.0 ** -(np.arange(5) / 4), rtol=1e-12)
    assert np.abs(sigma - np.diag(np.diag(sigma))).max() > 1e-3
    expected = np.linalg.solve(sigma + task.l2 * np.eye(5), sigma @ w_true)
    np.testing.assert_allclose(p.extras["population_optimum"].numpy(), expected, rtol=1e-12)
    assert p.extras["noise"] == 0.5 and p.extras["l2"] == 0.01
    # the data really follow N(0, Sigma) and y = <w_true, x> + N(0, noise^2) (statistical, seeded)
    xs, ys = p.extras["sample"](100_000, gen(9))
    np.testing.assert_allclose(np.cov(xs.numpy().T), sigma, atol=0.02)
    resid = ys.numpy() - xs.numpy() @ w_true
    assert np.var(resid) == pytest.approx(0.25, rel=0.03)
    assert p.root_data is not None and p.root_data[0].shape == (30, 5) and p.root_data[1].shape == (30,)
    assert p.test_data is None and p.accuracy(opt(p)) is None
    assert p.info.num_classes is None


def test_ridge_cond_one_is_identity() -> None:
    p = build(Ridge(dim=3), clients=2)
    assert torch.equal(p.extras["sigma"], torch.eye(3, dtype=F64))


@pytest.mark.parametrize("task", [Ridge(dim=3), Quadratic(dim=3)], ids=["ridge", "quadratic"])
@pytest.mark.parametrize("partition", [Partition("dirichlet"), Partition("bias"), Partition("shards")],
                         ids=lambda p: p.name)
def test_regression_refuses_label_partitions(task: Task, partition: Partition) -> None:
    with pytest.raises(ConfigError, match=rf"{partition.name}.*classification"):
        build(task, partition=partition)


def test_regression_refuses_root_bias() -> None:
    with pytest.raises(ConfigError, match="root_bias"):
        build(Ridge(dim=3), root_bias=0.5)


def test_logreg_data_and_accuracy(built: dict[str, tuple[Task, Problem]]) -> None:
    task, p = built["logreg"]
    assert p.dim == 3 * 5 and p.info.num_classes == 3
    assert p.test_data is not None and p.test_data[0].shape == (300, 4)
    assert torch.bincount(p.test_data[1]).tolist() == [100, 100, 100]
    assert int(p.num_samples.sum()) == 8 * 25
    acc = p.accuracy(opt(p))
    assert acc is not None
    # the reference: the same argmax rule written here
    x, y = p.test_data
    k, d = 3, 4
    w = opt(p)
    pred = (x @ w[: k * d].reshape(k, d).T + w[k * d:]).argmax(1)
    assert acc == pytest.approx(float((pred == y).double().mean()))
    assert acc > 0.6


def test_logreg_root_bias() -> None:
    p = build(LogReg(dim=3, classes=4, samples_per_client=10, test_size=0), root_size=41, root_bias=0.5)
    assert p.root_data is not None and p.root_mask is not None
    counts = torch.bincount(p.root_data[1], minlength=4).tolist()
    # 21 of class 0 (floor(20.5 + 0.5)), then 20 balanced: 5 per class
    assert counts == [26, 5, 5, 5]
    assert bool(p.root_mask.all()) and p.test_data is None


def test_logreg_unreached_optimum_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """build() checks ||grad F(w*)|| itself and refuses a w* that misses 1e-8."""
    task = LogReg(dim=2, classes=2, samples_per_client=5, test_size=0)
    exact = task.solve
    monkeypatch.setattr(task, "solve", lambda x, y: exact(x, y) + 1e-6)
    with pytest.raises(ConfigError, match=r"grad F\(w\*\)"):
        build(task, clients=2, root_size=0)


# -- the clean objective and the vmapped gradient -------------------------------------------------

@pytest.mark.parametrize("name", [c[0] for c in ALL])
def test_objective_is_the_sample_weighted_mean(built: dict[str, tuple[Task, Problem]], name: str) -> None:
    task, p = built[name]
    for seed in range(2):
        w = p.init(gen(seed), 0.3)
        expected = float(ref_objective(task, p, w))
        rel = 1e-12 if p.dtype == F64 else 1e-5
        assert p.objective(w) == pytest.approx(expected, rel=rel)


@pytest.mark.parametrize("name", [c[0] for c in ALL])
def test_vmap_grad_matches_per_client_autograd(built: dict[str, tuple[Task, Problem]], name: str) -> None:
    task, p = built[name]
    k = p.client_mask.shape[0]
    w = torch.randn(k, p.dim, generator=gen(1), dtype=F64).mul(0.3).to(p.dtype)
    # a random sub-mask, as a minibatch would give; client 0 gets none at all (regulariser only)
    sub = torch.rand(p.client_mask.shape, generator=gen(2)) < 0.6
    mask = p.client_mask & sub
    mask[1] = p.client_mask[1]
    mask[0] = False
    fast = vmap(grad(p.loss))(w, p.client_data, mask)
    assert fast.shape == (k, p.dim) and fast.dtype == p.dtype
    for i in range(k):
        wi = w[i].to(F64).clone().requires_grad_(True)
        batch = tuple(t[i][mask[i]] for t in p.client_data)
        if int(mask[i].sum()) == 0:  # the mean over no sample is 0: only the regulariser is left
            reg = getattr(task, "l2", 0.0)
            value = 0.5 * reg * (wi @ wi)
        else:
            value = ref_loss(task, wi, batch)
        (g,) = torch.autograd.grad(value, wi)
        tol = 1e-10 if p.dtype == F64 else 1e-4
        torch.testing.assert_close(fast[i].to(F64), g, rtol=tol, atol=tol * max(1.0, float(g.abs().max())))


# -- digits -------------------------------------------------------------------------------------

def test_digits_splits_are_disjoint_and_complete(built: dict[str, tuple[Task, Problem]]) -> None:
    from sklearn.datasets import load_digits

    _, p = built["digits-mlp"]
    assert p.info.input_shape == (1, 8, 8) and p.info.is_image and p.info.num_classes == 10
    assert p.dtype == torch.float32 and p.optimum is None and p.dim == 64 * 8 + 8 + 8 * 10 + 10
    assert p.client_data[0].shape[2:] == (1, 8, 8) and p.client_data[0].dtype == torch.float32
    assert p.test_data is not None and p.root_data is not None
    clients = client_batches(p)
    xs = [p.test_data[0], p.root_data[0]] + [b[0] for b in clients]
    ys = [p.test_data[1], p.root_data[1]] + [b[1] for b in clients]
    assert p.test_data[0].shape[0] == 359 and p.root_data[0].shape[0] == 30
    assert sum(b[0].shape[0] for b in clients) == 1797 - 359 - 30 == int(p.num_samples.sum())
    # the union of all splits is the data set exactly (as a multiset of (image, label) rows)
    raw = load_digits()
    mine = np.hstack([torch.cat(xs).reshape(-1, 64).double().numpy() * 16,
                      torch.cat(ys).double().numpy()[:, None]])
    ref = np.hstack([raw.data, raw.target[:, None]])
    np.testing.assert_allclose(mine[np.lexsort(mine.T[::-1])], ref[np.lexsort(ref.T[::-1])], atol=1e-5)
    # test split stratified: each class within one of its proportional share
    share = np.bincount(raw.target) * 359 / 1797
    assert np.abs(np.bincount(p.test_data[1].numpy(), minlength=10) - share).max() < 1.0
    assert float(p.client_data[0].max()) <= 1.0 and float(p.client_data[0].min()) >= 0.0


def test_digits_root_bias() -> None:
    p = build(Digits(hidden=4), clients=5, root_size=100, root_bias=0.4)
    assert p.root_data is not None
    counts = np.bincount(p.root_data[1].numpy(), minlength=10)
    assert counts.sum() == 100
    # 40 drawn from class 0, the other 60 stratified (~6 per class)
    assert 44 <= counts[0] <= 48 and counts[1:].min() >= 5 and counts[1:].max() <= 7


def test_digits_learns() -> None:
    """The MLP's loss goes down and accuracy rises well above chance with plain gradient descent."""
    p = build(Digits(hidden=16), clients=4, root_size=0)
    assert p.root_data is None
    w = p.init(gen(0), 0.1)
    f0 = p.objective(w)
    g = vmap(grad(p.loss), in_dims=(None, 0, 0))
    weights = p.num_samples.float() / p.num_samples.sum()
    for _ in range(150):
        w = w - 0.5 * (weights[:, None] * g(w, p.client_data, p.client_mask)).sum(0)
    assert p.objective(w) < 0.5 * f0
    acc = p.accuracy(w)
    assert acc is not None and acc > 0.7


# -- determinism, registry, parameters -------------------------------------------------------------

def tensors_of(p: Problem) -> list[Any]:
    out: list[Any] = [*p.client_data, p.client_mask, p.num_samples, p.optimum]
    out += list(p.root_data or ()) + [p.root_mask] + list(p.test_data or ())
    out += [v for _, v in sorted(p.extras.items()) if isinstance(v, Tensor | float | int)]
    return out


@pytest.mark.parametrize("name", [c[0] for c in ALL])
def test_same_generator_state_gives_identical_problems(name: str) -> None:
    make, partition = next((m, pa) for n, m, pa in ALL if n == name)
    a, b, c = (build(make(), partition=partition, root_bias=0.0, seed=s) for s in (5, 5, 6))
    ta, tb, tc = tensors_of(a), tensors_of(b), tensors_of(c)
    for x, y in zip(ta, tb, strict=True):
        if isinstance(x, Tensor):
            assert isinstance(y, Tensor) and x.dtype == y.dtype and torch.equal(x, y)
        else:
            assert x == y
    assert not torch.equal(ta[0], tc[0]) or not torch.equal(ta[2], tc[2])


def test_registry_builds_the_classes() -> None:
    assert isinstance(tasks.create("ridge", dim=5), Ridge)
    assert tasks.create("quadratic", diagonal=True).diagonal is True
    assert isinstance(tasks.create("digits", model="logreg"), Digits)
    assert {"quadratic", "ridge", "logreg", "digits", "mnist"} <= set(tasks.names())
    with pytest.raises(ParameterError, match="dimm"):
        tasks.create("ridge", dimm=5)


@pytest.mark.parametrize(
    ("name", "params", "key"),
    [
        ("quadratic", {"dim": 0}, "dim"),
        ("quadratic", {"cond": 0.5}, "cond"),
        ("quadratic", {"diagonal": 1}, "diagonal"),
        ("ridge", {"noise": -1.0}, "noise"),
        ("ridge", {"samples_per_client": 0}, "samples_per_client"),
        ("ridge", {"l2": float("nan")}, "l2"),
        ("logreg", {"classes": 1}, "classes"),
        ("logreg", {"dim": 2.5}, "dim"),
        ("digits", {"model": "resnet"}, "model"),
        ("digits", {"test_fraction": 1.0}, "test_fraction"),
        ("mnist", {"model": "vit"}, "model"),
        ("mnist", {"hidden": 0}, "hidden"),
    ],
)
def test_bad_parameters_name_the_parameter(name: str, params: dict[str, Any], key: str) -> None:
    with pytest.raises(ParameterError, match=rf"task {name}: parameter {key} must be"):
        tasks.create(name, **params)


def test_ridge_integer_floats_are_accepted() -> None:
    t = Ridge(noise=1, l2=0, cond=2)
    assert isinstance(t.noise, float) and t.noise == 1.0 and t.l2 == 0.0


def test_root_size_zero_gives_no_root() -> None:
    for task in (Quadratic(dim=2), Ridge(dim=2), LogReg(dim=2, classes=2, samples_per_client=5, test_size=0)):
        p = build(task, clients=3, root_size=0)
        assert p.root_data is None and p.root_mask is None


def test_flat_model_views_and_round_trip() -> None:
    from robustfl.tasks._flat import FlatModel, meta_module, mlp

    model = FlatModel(meta_module(lambda: mlp(4, 3, 2)))
    assert model.names == ["1.weight", "1.bias", "3.weight", "3.bias"]
    assert model.offsets == [0, 12, 15, 21] and model.numel == 23
    w = torch.arange(23, dtype=F64)
    params = model.unflatten(w)
    assert params["1.weight"].shape == (3, 4) and params["3.bias"].tolist() == [21.0, 22.0]
    assert params["1.weight"].data_ptr() == w.data_ptr()  # views, not copies
    assert torch.equal(model.flatten(params), w)
    x = torch.randn(5, 4, generator=gen(0), dtype=F64)
    expected = torch.relu(x @ w[:12].reshape(3, 4).T + w[12:15]) @ w[15:21].reshape(2, 3).T + w[21:]
    torch.testing.assert_close(model(w, x), expected)


def test_scalar_quadratic_optimum_and_objective_match_dense_transcription() -> None:
    """heterogeneity = "scalar": w* and F against the literal per-client formula in float64."""
    from robustfl.tasks.base import Partition
    from robustfl.tasks.quadratic import Quadratic

    task = Quadratic(dim=7, diagonal=True, heterogeneity="scalar", spread=0.7)
    p = task.build(clients=5, partition=Partition(), root_size=3, root_bias=0.0,
                   generator=torch.Generator().manual_seed(4))
    a, m, v = (p.extras[k].double() for k in ("diagonal", "centre", "direction"))
    s, z = (t[:, 0].double() for t in p.client_data)
    a_k = s[:, None] * a  # (K, d) diagonals
    c_k = m + z[:, None] * v
    w_star = (a_k * c_k).sum(0) / a_k.sum(0)
    assert p.optimum is not None
    torch.testing.assert_close(p.optimum.double(), w_star, rtol=1e-12, atol=1e-12)
    w = torch.randn(7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    f_ref = float((0.5 * (a_k * (w - c_k) ** 2).sum(1)).mean())
    assert abs(p.objective(w) - f_ref) <= 1e-12 * abs(f_ref)
    per_client = torch.func.vmap(p.loss, in_dims=(None, 0, 0))(w, p.client_data, p.client_mask)
    torch.testing.assert_close(per_client.mean(), torch.tensor(f_ref, dtype=torch.float64))


def test_fltrust_cnn_has_the_papers_parameter_count() -> None:
    """FLTrust's MNIST CNN: conv 30@3x3, conv 50@3x3, linear 1250 -> 100 -> 10, counted by hand."""
    from robustfl.tasks._flat import FlatModel, fltrust_cnn, meta_module

    by_hand = (30 * 1 * 3 * 3 + 30) + (50 * 30 * 3 * 3 + 50) + (50 * 5 * 5 * 100 + 100) + (100 * 10 + 10)
    assert by_hand == 139_960
    assert FlatModel(meta_module(lambda: fltrust_cnn(28, 10))).numel == by_hand
