"""MNIST: the IDX reader, data-dir resolution, the fixed split, the models' vmapped gradients.

Most tests write tiny IDX files themselves; one reads the real t10k files when they are present
(``$ROBUSTFL_DATA_DIR/mnist``, else ``../shared/data/mnist`` beside the checkout) and skips
otherwise.
"""

from __future__ import annotations

import gzip
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as tf
from torch import Tensor
from torch.func import grad, vmap

from robustfl.errors import ConfigError, DataError
from robustfl.tasks._data import read_idx, resolve_data_dir
from robustfl.tasks.base import Partition, Problem
from robustfl.tasks.mnist import MNIST, load_mnist

from ..conftest import mnist_dir
from ..factories import build_problem, gen
from ..factories import image_keys as keys

F64 = torch.float64
STEMS = {
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
}


def idx_bytes(array: np.ndarray, code: int = 0x08) -> bytes:
    """The IDX encoding, written from the format description: 0, 0, type, ndim, big-endian dims."""
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write(path: Path, payload: bytes, gz: bool) -> Path:
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(payload))
    else:
        path.write_bytes(payload)
    return path


def fake_split(n_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(10), n_per_class)).astype(np.uint8)
    images = rng.integers(0, 256, size=(labels.size, 28, 28), dtype=np.uint8)
    return images, labels


def write_mnist(directory: Path, gz: bool, train: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    directory.mkdir(parents=True, exist_ok=True)
    splits = {"test": fake_split(30, 1)}  # 300 test images
    if train:
        splits["train"] = fake_split(12, 2)  # 120 training images
    for split, (images, labels) in splits.items():
        write(directory / STEMS[f"{split}_images"], idx_bytes(images), gz)
        write(directory / STEMS[f"{split}_labels"], idx_bytes(labels), gz)
    return splits


build = partial(build_problem, clients=5, root_size=20)


def unpadded(p: Problem) -> tuple[Tensor, Tensor]:
    m = p.client_mask
    return p.client_data[0][m], p.client_data[1][m]


# -- the reader -----------------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gzip"])
def test_read_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    images, labels = fake_split(3, 0)
    pi = write(tmp_path / "img", idx_bytes(images), gz)
    pl = write(tmp_path / "lab", idx_bytes(labels), gz)
    np.testing.assert_array_equal(read_idx(pi, 3), images)
    np.testing.assert_array_equal(read_idx(pl, 1), labels)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b"\x01" + b[1:], "magic"),
        (lambda b: b[:2] + b"\x0d" + b[3:], "element type"),
        (lambda b: b[:-1], "payload"),
        (lambda b: b + b"\x00", "payload"),
        (lambda b: b[:6], "truncated"),
        (lambda b: b"", "magic"),
    ],
    ids=["magic", "float-type", "short", "long", "header", "empty"],
)
def test_malformed_idx_is_a_data_error(tmp_path: Path, mangle: object, message: str) -> None:
    images, _ = fake_split(1, 0)
    path = tmp_path / "bad"
    path.write_bytes(mangle(idx_bytes(images)))  # type: ignore[operator]
    with pytest.raises(DataError, match=message):
        read_idx(path, 3)


def test_wrong_dimensions_and_bad_gzip(tmp_path: Path) -> None:
    _, labels = fake_split(1, 0)
    path = write(tmp_path / "lab", idx_bytes(labels), gz=False)
    with pytest.raises(DataError, match="dimensions"):
        read_idx(path, 3)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(idx_bytes(labels))[:-12])
    with pytest.raises(DataError, match="cannot read"):
        read_idx(broken, 1)


def test_inconsistent_files_are_data_errors(tmp_path: Path) -> None:
    images, labels = fake_split(2, 0)
    d = tmp_path / "d"
    d.mkdir()
    write(d / STEMS["test_images"], idx_bytes(images), gz=False)
    write(d / STEMS["test_labels"], idx_bytes(labels[:-1]), gz=False)
    with pytest.raises(DataError, match="19 labels"):
        load_mnist(d)
    bad_labels = labels.copy()
    bad_labels[0] = 10
    write(d / STEMS["test_labels"], idx_bytes(bad_labels), gz=False)
    with pytest.raises(DataError, match="label 10"):
        load_mnist(d)
    write(d / STEMS["test_images"], idx_bytes(images[:, :27, :27]), gz=False)
    write(d / STEMS["test_labels"], idx_bytes(labels), gz=False)
    with pytest.raises(DataError, match="27"):
        load_mnist(d)


# -- where the files are ---------------------------------------------------------------------------

def test_missing_directory_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as info:
        build(MNIST(data_dir=str(missing)))
    msg = str(info.value)
    assert str(missing) in msg and "t10k-images-idx3-ubyte" in msg and "\n" not in msg
    assert "does not exist" in msg
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    with pytest.raises(DataError, match="is a file, not a folder"):  # it said "does not exist"
        build(MNIST(data_dir=str(a_file)))


def test_empty_directory_names_the_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte .*not found in"):
        build(MNIST(data_dir=str(tmp_path)))


def test_half_a_training_pair_is_an_error(tmp_path: Path) -> None:
    splits = write_mnist(tmp_path, gz=True)
    write(tmp_path / STEMS["train_images"], idx_bytes(splits["test"][0]), gz=True)
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        load_mnist(tmp_path)


def test_data_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBUSTFL_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir("mnist", "data/m", str(tmp_path / "scen")) == tmp_path / "scen" / "data" / "m"
    assert resolve_data_dir("mnist", str(tmp_path / "abs"), "/elsewhere") == tmp_path / "abs"
    assert resolve_data_dir("mnist", None, str(tmp_path / "scen")) == tmp_path / "env" / "mnist"
    monkeypatch.delenv("ROBUSTFL_DATA_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_dir("mnist", None, None) == tmp_path / "home" / ".cache" / "robustfl" / "mnist"


def test_relative_data_dir_is_read_from_the_scenario_folder(tmp_path: Path) -> None:
    splits = write_mnist(tmp_path / "scen" / "files", gz=True)
    p = build(MNIST(data_dir="files", train_size=200, test_size=50), base_dir=tmp_path / "scen")
    assert p.test_data is not None
    raw = {img.tobytes(): int(lab) for img, lab in zip(*splits["test"], strict=True)}
    assert [raw[k] for k in keys(p.test_data[0])] == p.test_data[1].tolist()


# -- the splits ------------------------------------------------------------------------------------

def test_t10k_only_split_is_fixed_stratified_and_disjoint(tmp_path: Path) -> None:
    splits = write_mnist(tmp_path, gz=True)
    task = MNIST(data_dir=str(tmp_path), train_size=200, test_size=50)
    a, b = build(task, seed=0, root_bias=0.5), build(task, seed=1, root_bias=0.5)
    assert a.test_data is not None and b.test_data is not None
    assert a.root_data is not None and b.root_data is not None
    # the test split does not depend on the cell seed; the root set and partition do
    assert torch.equal(a.test_data[0], b.test_data[0]) and torch.equal(a.test_data[1], b.test_data[1])
    assert not torch.equal(a.client_data[1], b.client_data[1])
    # class balance: 30 per class -> 5 per class in test, 20 per class in train (root + clients)
    assert torch.bincount(a.test_data[1], minlength=10).tolist() == [5] * 10
    cx, cy = unpadded(a)
    train_y = torch.cat([a.root_data[1], cy])
    assert torch.bincount(train_y, minlength=10).tolist() == [20] * 10
    assert a.root_data[0].shape == (20, 1, 28, 28) and int(a.num_samples.sum()) == 180
    assert int((a.root_data[1] == 0).sum()) >= 10  # root_bias 0.5 of 20 from class 0
    # disjoint, and every image carries its own label, scaled by 1/255
    raw = {img.tobytes(): int(lab) for img, lab in zip(*splits["test"], strict=True)}
    test_k, root_k, client_k = keys(a.test_data[0]), keys(a.root_data[0]), keys(cx)
    assert len(set(test_k) | set(root_k) | set(client_k)) == 50 + 20 + 180
    for ks, ys in ((test_k, a.test_data[1]), (root_k, a.root_data[1]), (client_k, cy)):
        assert [raw[k] for k in ks] == ys.tolist()
    assert a.client_data[0].dtype == torch.float32 and float(a.client_data[0].max()) <= 1.0


def test_real_train_split_is_used_when_present(tmp_path: Path) -> None:
    splits = write_mnist(tmp_path, gz=False, train=True)
    p = build(MNIST(data_dir=str(tmp_path)), root_size=10)
    assert p.test_data is not None and p.root_data is not None
    test_images, test_labels = splits["test"]
    torch.testing.assert_close(p.test_data[0][:, 0].double(), torch.from_numpy(test_images / 255.0))
    assert p.test_data[1].tolist() == test_labels.tolist()
    train = {img.tobytes(): int(lab) for img, lab in zip(*splits["train"], strict=True)}
    cx, cy = unpadded(p)
    ks = keys(torch.cat([p.root_data[0], cx]))
    assert sorted(ks) == sorted(train) and [train[k] for k in ks] == torch.cat([p.root_data[1], cy]).tolist()


def test_gzip_and_raw_give_the_same_problem(tmp_path: Path) -> None:
    write_mnist(tmp_path / "raw", gz=False)
    write_mnist(tmp_path / "gz", gz=True)
    task_raw = MNIST(data_dir=str(tmp_path / "raw"), train_size=100, test_size=100)
    task_gz = MNIST(data_dir=str(tmp_path / "gz"), train_size=100, test_size=100)
    a, b = build(task_raw, seed=3), build(task_gz, seed=3)
    assert torch.equal(a.client_data[0], b.client_data[0]) and torch.equal(a.client_data[1], b.client_data[1])
    assert a.root_data is not None and b.root_data is not None
    assert torch.equal(a.root_data[0], b.root_data[0])


def test_split_sizes_must_fit(tmp_path: Path) -> None:
    write_mnist(tmp_path, gz=True)
    with pytest.raises(ConfigError, match="train_size"):
        build(MNIST(data_dir=str(tmp_path), train_size=280, test_size=50))


# -- the models ------------------------------------------------------------------------------------

def ref_logits(model: str, hidden: int, w: Tensor, x: Tensor) -> Tensor:
    """The two architectures written out with the documented parameter order."""
    if model == "mlp":
        h = hidden
        w1, b1 = w[: 784 * h].reshape(h, 784), w[784 * h: 785 * h]
        w2, b2 = w[785 * h: 795 * h].reshape(10, h), w[795 * h:]
        return torch.relu(x.reshape(x.shape[0], -1) @ w1.T + b1) @ w2.T + b2
    sizes = [(8, 1, 5, 5), (8,), (16, 8, 5, 5), (16,), (10, 256), (10,)]
    parts, off = [], 0
    for s in sizes:
        n = int(np.prod(s))
        parts.append(w[off: off + n].reshape(s))
        off += n
    assert off == w.numel()
    z = tf.max_pool2d(torch.relu(tf.conv2d(x, parts[0], parts[1])), 2)
    z = tf.max_pool2d(torch.relu(tf.conv2d(z, parts[2], parts[3])), 2)
    return z.reshape(z.shape[0], -1) @ parts[4].T + parts[5]


@pytest.mark.parametrize(("model", "dim"), [("mlp", 784 * 6 + 6 + 6 * 10 + 10), ("cnn", 5994)])
def test_vmap_grad_matches_per_client_autograd(tmp_path: Path, model: str, dim: int) -> None:
    write_mnist(tmp_path, gz=True)
    task = MNIST(data_dir=str(tmp_path), model=model, hidden=6, train_size=200, test_size=50, l2=0.01)
    p = build(task, partition=Partition("dirichlet", alpha=0.5), root_size=0)
    assert p.dim == dim and p.info.input_shape == (1, 28, 28) and p.info.is_image and p.optimum is None
    k = p.client_mask.shape[0]
    w = (0.1 * torch.randn(k, p.dim, generator=gen(4))).float()
    mask = p.client_mask & (torch.rand(p.client_mask.shape, generator=gen(5)) < 0.7)
    mask[0] = p.client_mask[0]
    fast = vmap(grad(p.loss))(w, p.client_data, mask)
    for i in range(k):
        wi = w[i].double().clone().requires_grad_(True)
        x, y = p.client_data[0][i][mask[i]].double(), p.client_data[1][i][mask[i]]
        z = ref_logits(model, 6, wi, x)
        value = (torch.logsumexp(z, 1) - z[torch.arange(y.numel()), y]).mean() + 0.005 * (wi @ wi)
        (g,) = torch.autograd.grad(value, wi)
        torch.testing.assert_close(fast[i].double(), g, rtol=1e-4, atol=1e-5 * max(1.0, float(g.abs().max())))
    # accuracy uses the same model
    assert p.test_data is not None
    pred = ref_logits(model, 6, w[0].double(), p.test_data[0].double()).argmax(1)
    assert p.accuracy(w[0]) == pytest.approx(float((pred == p.test_data[1]).double().mean()))


# -- the real files ----------------------------------------------------------------------------------


def test_real_t10k_files() -> None:
    where = mnist_dir()
    if not (where / "t10k-images-idx3-ubyte.gz").exists() and not (where / "t10k-images-idx3-ubyte").exists():
        pytest.skip(f"real MNIST files not found in {where} (set ROBUSTFL_DATA_DIR)")
    images, labels = load_mnist(where)["test"]
    assert images.shape == (10_000, 28, 28) and labels.shape == (10_000,)
    assert np.bincount(labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    task = MNIST(data_dir=str(where))
    (tx, ty), (sx, sy) = task.splits()
    assert tx.shape == (8000, 1, 28, 28) and sx.shape == (2000, 1, 28, 28)
    share = np.bincount(labels) / 10_000
    assert np.abs(np.bincount(sy.numpy()) - 2000 * share).max() < 1.0
    assert np.abs(np.bincount(ty.numpy()) - 8000 * share).max() < 1.0
    assert float(tx.min()) == 0.0 and float(tx.max()) == 1.0
