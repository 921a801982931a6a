"""CIFAR-10: the restricted batch unpickler, validation, splits, the LeNet-5 model, a tiny end-to-end run.

Every test writes its own tiny batches in the format of the CIFAR-10 python version: pickled dicts
with ``b"data"`` (uint8 (n, 3072), R, G, B planes, each row-major), ``b"labels"`` (a list of ints),
``b"batch_label"`` and ``b"filenames"``. They are written with ``pickle.dump`` at protocol 2 (as
Python 3 writes it: bytes via ``_codecs.encode``), 4 and 5 (numpy's out-of-band ``_frombuffer``
form), and opcode by opcode the way Python 2's cPickle wrote the original files (bytes as
``SHORT_BINSTRING``/``BINSTRING``, numpy 1.x's ``numpy.core.multiarray`` path).
"""

from __future__ import annotations

import os
import pickle
import struct
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as tf
from torch import Tensor
from torch.func import grad, vmap

import robustfl
from robustfl.cli.main import main as cli_main
from robustfl.errors import ConfigError, DataError, ParameterError
from robustfl.scenario import load_scenario
from robustfl.sweep.plan import sweep_points
from robustfl.tasks.base import Partition
from robustfl.tasks.cifar10 import CIFAR10, load_cifar10, read_batch, unpickle

from ..factories import build_problem, gen
from ..factories import image_keys as keys

TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
TRIPPED: list[str] = []


# -- writing batches ---------------------------------------------------------------------------------

def fake_batch(n_per_class: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(10), n_per_class)).tolist()
    return rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8), labels


def batch_dict(data: Any, labels: Any, index: int = 1) -> dict[bytes, Any]:
    n = len(labels)
    return {
        b"batch_label": f"training batch {index} of 5".encode(),
        b"labels": labels,
        b"data": data,
        b"filenames": [f"img_{index}_{i}.png".encode() for i in range(n)],
    }


def _str(b: bytes) -> bytes:
    """A Python 2 str: SHORT_BINSTRING below 256 bytes, else BINSTRING."""
    if len(b) < 256:
        return pickle.SHORT_BINSTRING + bytes([len(b)]) + b
    return pickle.BINSTRING + struct.pack("<i", len(b)) + b


def _int(v: int) -> bytes:
    if 0 <= v < 256:
        return pickle.BININT1 + bytes([v])
    if 0 <= v < 65536:
        return pickle.BININT2 + struct.pack("<H", v)
    return pickle.BININT + struct.pack("<i", v)


def py2_pickle(data: np.ndarray, labels: list[int]) -> bytes:
    """The original files' layout, opcode by opcode: a protocol-2 cPickle of numpy 1.x's reduce of a
    uint8 array (``_reconstruct(ndarray, (0,), 'b')`` + BUILD with (1, shape, dtype, False, raw))."""
    dtype = (
        b"cnumpy\ndtype\n" + _str(b"u1") + _int(0) + _int(1) + pickle.TUPLE3 + pickle.REDUCE
        + pickle.MARK + _int(3) + _str(b"|") + pickle.NONE * 3 + _int(-1) + _int(-1) + _int(0)
        + pickle.TUPLE + pickle.BUILD
    )
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + _int(0) + pickle.TUPLE1
        + _str(b"b") + pickle.TUPLE3 + pickle.REDUCE
        + pickle.MARK + _int(1) + _int(data.shape[0]) + _int(data.shape[1]) + pickle.TUPLE2 + dtype
        + pickle.NEWFALSE + _str(data.tobytes()) + pickle.TUPLE + pickle.BUILD
    )
    label_list = pickle.EMPTY_LIST + pickle.MARK + b"".join(_int(v) for v in labels) + pickle.APPENDS
    names = pickle.EMPTY_LIST + pickle.MARK + b"".join(_str(b"x.png") for _ in labels) + pickle.APPENDS
    return (
        pickle.PROTO + bytes([2]) + pickle.EMPTY_DICT + pickle.MARK
        + _str(b"batch_label") + _str(b"training batch 1 of 5")
        + _str(b"labels") + label_list + _str(b"data") + array + _str(b"filenames") + names
        + pickle.SETITEMS + pickle.STOP
    )


def write_batch(path: Path, data: np.ndarray, labels: list[int], protocol: int | str) -> None:
    if protocol == "py2":
        path.write_bytes(py2_pickle(data, labels))
    else:
        assert isinstance(protocol, int)
        with path.open("wb") as handle:
            pickle.dump(batch_dict(data, labels), handle, protocol=protocol)


def write_cifar(
    root: Path, protocol: int | str = 2, subfolder: bool = True, meta: bool = True
) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Five training batches of 20 images (2 per class) and a test batch of 30 (3 per class)."""
    folder = root / "cifar-10-batches-py" if subfolder else root
    folder.mkdir(parents=True, exist_ok=True)
    out = {name: fake_batch(2, seed) for seed, name in enumerate(TRAIN)}
    out["test_batch"] = fake_batch(3, 9)
    for name, (data, labels) in out.items():
        write_batch(folder / name, data, labels, protocol)
    if meta:
        with (folder / "batches.meta").open("wb") as handle:
            meta_dict = {b"num_cases_per_batch": 20, b"label_names": NAMES, b"num_vis": 3072}
            pickle.dump(meta_dict, handle, protocol=2)
    return out


build = partial(build_problem, clients=4, root_size=10)


def reference_images(data: np.ndarray) -> np.ndarray:
    """(n, 3, 32, 32) float64 from the format description: channel c, row r, column j is byte
    c*1024 + r*32 + j of the row, divided by 255."""
    planes = [data[:, c * 1024:(c + 1) * 1024].reshape(-1, 32, 32) for c in range(3)]
    return np.stack(planes, axis=1).astype(np.float64) / 255.0


# -- loading ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 4, 5, "py2"])
def test_batches_load_in_every_pickle_form(tmp_path: Path, protocol: int | str) -> None:
    written = write_cifar(tmp_path, protocol)
    (tx, ty), (sx, sy) = CIFAR10(data_dir=str(tmp_path)).splits()
    assert tx.shape == (100, 3, 32, 32) and sx.shape == (30, 3, 32, 32)
    assert tx.dtype == torch.float32 and ty.dtype == torch.int64
    train_data = np.concatenate([written[n][0] for n in TRAIN])
    train_labels = sum((written[n][1] for n in TRAIN), [])
    test_data = written["test_batch"][0]
    np.testing.assert_allclose(tx.double().numpy(), reference_images(train_data), rtol=0, atol=1e-7)
    np.testing.assert_allclose(sx.double().numpy(), reference_images(test_data), rtol=0, atol=1e-7)
    assert ty.tolist() == train_labels and sy.tolist() == written["test_batch"][1]
    assert np.bincount(ty.numpy()).tolist() == [10] * 10 and np.bincount(sy.numpy()).tolist() == [3] * 10


def test_one_hand_set_pixel_lands_in_its_channel(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = np.zeros((10, 3072), dtype=np.uint8)
    data[3, 1024 + 5 * 32 + 7] = 200  # image 3, green, row 5, column 7
    data[3, 2048 + 31 * 32 + 0] = 51  # image 3, blue, row 31, column 0
    for name in [*TRAIN, "test_batch"]:
        write_batch(folder / name, data, list(range(10)), 2)
    (tx, _), _ = CIFAR10(data_dir=str(tmp_path)).splits()
    assert float(tx[3, 1, 5, 7]) == pytest.approx(200 / 255, abs=1e-7)
    assert float(tx[3, 2, 31, 0]) == pytest.approx(0.2, abs=1e-7)
    nonzero = torch.nonzero(tx[:10]).tolist()
    assert nonzero == [[3, 1, 5, 7], [3, 2, 31, 0]]


def test_the_data_dir_itself_and_class_names(tmp_path: Path) -> None:
    written = write_cifar(tmp_path, subfolder=False)
    p = build(CIFAR10(data_dir=str(tmp_path)))
    assert p.extras["class_names"][:3] == ["airplane", "automobile", "bird"]
    assert p.test_data is not None and p.test_data[1].tolist() == written["test_batch"][1]
    write_cifar(tmp_path / "nometa", meta=False)
    assert "class_names" not in build(CIFAR10(data_dir=str(tmp_path / "nometa"))).extras


def test_relative_data_dir_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_cifar(tmp_path / "scen" / "files")
    p = build(CIFAR10(data_dir="files"), base_dir=tmp_path / "scen")
    assert p.test_data is not None and p.test_data[0].shape == (30, 3, 32, 32)
    write_cifar(tmp_path / "env" / "cifar10", protocol=4)
    monkeypatch.setenv("ROBUSTFL_DATA_DIR", str(tmp_path / "env"))
    q = build(CIFAR10(), base_dir=tmp_path / "scen")
    assert q.test_data is not None and q.test_data[0].shape == (30, 3, 32, 32)


# -- the restricted unpickler ----------------------------------------------------------------------------

def _trip(tag: str) -> str:
    TRIPPED.append(tag)
    return tag


class CallsTripwire:
    def __reduce__(self) -> tuple[Any, ...]:
        return (_trip, ("tests.tasks.test_cifar10._trip ran",))


class CallsSystem:
    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.sentinel}",))


class CallsEval:
    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, (f"open({str(self.sentinel)!r}, 'w').close()",))


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("payload", ["tripwire", "os.system", "builtins.eval", "object-array"])
def test_foreign_globals_are_refused_and_nothing_runs(tmp_path: Path, payload: str, protocol: int) -> None:
    sentinel = tmp_path / "sentinel"
    data, labels = fake_batch(1, 0)
    evil: Any = {
        "tripwire": CallsTripwire(),
        "os.system": CallsSystem(sentinel),
        "builtins.eval": CallsEval(sentinel),
        "object-array": np.array([CallsTripwire()], dtype=object),
    }[payload]
    blob = pickle.dumps(batch_dict(data, [*labels[:-1], evil]), protocol=protocol)
    if payload in ("tripwire", "object-array"):  # the pickle is live: an ordinary load runs it
        TRIPPED.clear()
        pickle.loads(blob)
        assert TRIPPED == ["tests.tasks.test_cifar10._trip ran"]
    TRIPPED.clear()
    path = tmp_path / "data_batch_1"
    path.write_bytes(blob)
    with pytest.raises(DataError, match=r"refuses to load \S+\.(_trip|system|eval)\b") as info:
        read_batch(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert TRIPPED == [] and not sentinel.exists()


def test_protocol2_bytes_helpers_are_guarded(tmp_path: Path) -> None:
    """Python 3 writes bytes at protocol 2 as _codecs.encode(text, "latin1") and b"" as bytes():
    both are admitted in exactly that form and nothing else."""
    path = tmp_path / "b"
    path.write_bytes(pickle.dumps([b"\x00\xff", b""], protocol=2))
    assert unpickle(path) == [b"\x00\xff", b""]
    path.write_bytes(pickle.PROTO + b"\x02" + b"c_codecs\nencode\n" + _str(b"abc") + _str(b"rot13")
                     + pickle.TUPLE2 + pickle.REDUCE + pickle.STOP)
    with pytest.raises(DataError, match="only latin-1"):
        unpickle(path)
    path.write_bytes(pickle.PROTO + b"\x02" + b"c__builtin__\nbytes\n" + _int(200) + pickle.TUPLE1
                     + pickle.REDUCE + pickle.STOP)
    with pytest.raises(DataError, match="no arguments"):
        unpickle(path)


def test_persistent_ids_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "b"
    path.write_bytes(pickle.PROTO + b"\x02" + _str(b"x") + pickle.BINPERSID + pickle.STOP)
    with pytest.raises(DataError, match="persistent id"):
        unpickle(path)


# -- malformed files --------------------------------------------------------------------------------------

def _good() -> tuple[np.ndarray, list[int]]:
    return fake_batch(1, 0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (lambda: batch_dict(_good()[0][:, :3071], _good()[1]), r"\(n, 3072\), found uint8 \(10, 3071\)"),
        (lambda: batch_dict(_good()[0].astype(np.int16), _good()[1]), "found int16"),
        (lambda: batch_dict(_good()[0].reshape(10, 3, 1024), _good()[1]), r"found uint8 \(10, 3, 1024\)"),
        (lambda: batch_dict(_good()[0].tolist(), _good()[1]), "found list"),
        (lambda: batch_dict(_good()[0][:0], []), "no images"),
        (lambda: batch_dict(_good()[0], _good()[1][:-1]), "10 images but 9 labels"),
        (lambda: batch_dict(_good()[0], [*_good()[1][:-1], 10]), "label 10 is outside"),
        (lambda: batch_dict(_good()[0], [*_good()[1][:-1], -1]), "label -1 is outside"),
        (lambda: batch_dict(_good()[0], [float(v) for v in _good()[1]]), "flat list of integers"),
        (lambda: batch_dict(_good()[0], "0123456789"), "labels must be a list"),
        (lambda: {b"data": _good()[0]}, "no labels entry"),
        (lambda: [1, 2, 3], "expected a pickled dict, found list"),
    ],
    ids=["width", "dtype", "3d", "list-data", "empty", "count", "label-10", "label-neg", "float-labels",
         "str-labels", "no-labels", "not-a-dict"],
)
def test_malformed_batches_are_one_line_data_errors(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(content(), protocol=2))
    with pytest.raises(DataError, match=message) as info:
        read_batch(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "mangle", [lambda b: b[: len(b) // 2], lambda b: b"", lambda b: b"not a pickle at all\n" * 3],
    ids=["truncated", "empty", "garbage"],
)
def test_unreadable_pickles_are_one_line_data_errors(tmp_path: Path, mangle: Any) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(mangle(pickle.dumps(batch_dict(*_good()), protocol=4)))
    with pytest.raises(DataError, match="not a readable CIFAR-10 python batch") as info:
        read_batch(path)
    assert "\n" not in str(info.value)


def test_missing_directory_and_files_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as info:
        build(CIFAR10(data_dir=str(missing)))
    msg = str(info.value)
    assert str(missing) in msg and "cifar-10-python.tar.gz" in msg and "\n" not in msg
    write_cifar(tmp_path / "d")
    (tmp_path / "d" / "cifar-10-batches-py" / "data_batch_4").unlink()
    (tmp_path / "d" / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DataError, match=r"data_batch_4, test_batch not found in .*cifar-10-batches-py"):
        load_cifar10(tmp_path / "d")


def test_a_bad_batch_or_meta_in_the_set_is_an_error(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": NAMES[:9]}, protocol=2))
    with pytest.raises(DataError, match="label_names"):
        load_cifar10(tmp_path)
    (folder / "batches.meta").unlink()
    data, labels = _good()
    write_batch(folder / "data_batch_3", data[:, :100], labels, 2)
    with pytest.raises(DataError, match="data_batch_3"):
        load_cifar10(tmp_path)


# -- parameters and splits ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("params", "key"),
    [({"model": "resnet"}, "model"), ({"train_size": -1}, "train_size"), ({"test_size": 1.5}, "test_size"),
     ({"l2": -0.1}, "l2"), ({"data_dir": 3}, "data_dir"), ({"train_size": True}, "train_size")],
)
def test_bad_parameters_name_the_parameter(params: dict[str, Any], key: str) -> None:
    with pytest.raises(ParameterError, match=f"task cifar10: parameter {key} must"):
        CIFAR10(**params)


def test_registered_and_unknown_parameters_are_refused() -> None:
    assert isinstance(robustfl.tasks.create("cifar10", train_size=5), CIFAR10)
    with pytest.raises(ConfigError, match="trainsize"):
        robustfl.tasks.create("cifar10", trainsize=5)


def test_subsets_are_stratified_fixed_and_checked(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    task = CIFAR10(data_dir=str(tmp_path), train_size=50, test_size=20)
    (tx, ty), (sx, sy) = task.splits()
    assert np.bincount(ty.numpy()).tolist() == [5] * 10 and np.bincount(sy.numpy()).tolist() == [2] * 10
    (tx2, _), (sx2, _) = task.splits()
    assert torch.equal(tx, tx2) and torch.equal(sx, sx2)
    full = CIFAR10(data_dir=str(tmp_path)).splits()
    assert set(keys(tx)) <= set(keys(full[0][0])) and set(keys(sx)) <= set(keys(full[1][0]))
    with pytest.raises(ConfigError, match="train_size = 101 exceeds the 100"):
        CIFAR10(data_dir=str(tmp_path), train_size=101).splits()
    with pytest.raises(ConfigError, match="test_size = 31 exceeds the 30"):
        CIFAR10(data_dir=str(tmp_path), test_size=31).splits()


def test_root_clients_and_test_are_disjoint(tmp_path: Path) -> None:
    written = write_cifar(tmp_path)
    task = CIFAR10(data_dir=str(tmp_path))
    p = build(task, seed=0, root_size=20, root_bias=0.5, partition=Partition("dirichlet", alpha=0.5))
    q = build(task, seed=1, root_size=20, root_bias=0.5, partition=Partition("dirichlet", alpha=0.5))
    assert p.root_data is not None and p.test_data is not None and q.root_data is not None
    assert p.info.name == "cifar10" and p.info.num_classes == 10 and p.info.input_shape == (3, 32, 32)
    assert p.info.is_image and p.optimum is None and p.dtype == torch.float32
    m = p.client_mask
    cx, cy = p.client_data[0][m], p.client_data[1][m]
    assert int(p.num_samples.sum()) == 80 and p.root_data[0].shape == (20, 3, 32, 32)
    assert int((p.root_data[1] == 0).sum()) >= 10
    raw = {img.tobytes(): lab for n in TRAIN for img, lab in zip(*written[n], strict=True)}
    root_k, client_k = keys(p.root_data[0]), keys(cx)
    assert sorted(root_k + client_k) == sorted(raw)
    assert [raw[k] for k in root_k + client_k] == torch.cat([p.root_data[1], cy]).tolist()
    assert not set(keys(p.test_data[0])) & set(raw)
    assert not torch.equal(p.root_data[0], q.root_data[0])  # the root set follows the cell seed


# -- the model --------------------------------------------------------------------------------------------

def lenet_logits(w: Tensor, x: Tensor) -> Tensor:
    """LeNet-5 written out with the documented parameter order."""
    sizes = [(6, 3, 5, 5), (6,), (16, 6, 5, 5), (16,), (120, 400), (120,), (84, 120), (84,), (10, 84), (10,)]
    parts, off = [], 0
    for s in sizes:
        n = int(np.prod(s))
        parts.append(w[off: off + n].reshape(s))
        off += n
    assert off == w.numel()
    z = tf.max_pool2d(torch.relu(tf.conv2d(x, parts[0], parts[1])), 2)
    z = tf.max_pool2d(torch.relu(tf.conv2d(z, parts[2], parts[3])), 2).reshape(x.shape[0], -1)
    z = torch.relu(z @ parts[4].T + parts[5])
    z = torch.relu(z @ parts[6].T + parts[7])
    return z @ parts[8].T + parts[9]


def test_vmap_grad_matches_per_client_autograd(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    task = CIFAR10(data_dir=str(tmp_path), l2=0.01)
    p = build(task, root_size=0, partition=Partition("dirichlet", alpha=0.5))
    assert p.dim == 62_006
    k = p.client_mask.shape[0]
    w = (0.1 * torch.randn(k, p.dim, generator=gen(4))).float()
    mask = p.client_mask & (torch.rand(p.client_mask.shape, generator=gen(5)) < 0.7)
    mask[0] = p.client_mask[0]
    fast = vmap(grad(p.loss))(w, p.client_data, mask)
    for i in range(k):
        wi = w[i].double().clone().requires_grad_(True)
        x, y = p.client_data[0][i][mask[i]].double(), p.client_data[1][i][mask[i]]
        z = lenet_logits(wi, x)
        ce = (torch.logsumexp(z, 1) - z[torch.arange(y.numel()), y]).mean() if y.numel() else wi.sum() * 0
        (g,) = torch.autograd.grad(ce + 0.005 * (wi @ wi), wi)
        torch.testing.assert_close(fast[i].double(), g, rtol=1e-4, atol=1e-5 * max(1.0, float(g.abs().max())))
    assert p.test_data is not None
    pred = lenet_logits(w[0].double(), p.test_data[0].double()).argmax(1)
    assert p.accuracy(w[0]) == pytest.approx(float((pred == p.test_data[1]).double().mean()))


# -- end to end and the shipped scenario ------------------------------------------------------------------

def test_tiny_run_end_to_end(tmp_path: Path) -> None:
    write_cifar(tmp_path / "data")
    sc = robustfl.load_scenario({
        "task": {"name": "cifar10", "data_dir": str(tmp_path / "data")},
        "partition": {"name": "dirichlet", "alpha": 0.5},
        "federation": {"clients": 4, "rounds": 2, "local_steps": 2, "batch_size": 8, "local_lr": 0.05},
        "threat": {"byzantine": 1},
        "server": {"root_size": 10},
    })
    cell = robustfl.run(sc, attack="sign_flip", defense="fltrust", seed=0)
    assert cell.status == "ok" and cell.error is None and cell.reference == "clean_run"
    assert [r["round"] for r in cell.rounds] == [1, 2]
    assert cell.final["accuracy"] is not None and 0.0 <= cell.final["accuracy"] <= 1.0


def test_shipped_scenario_is_the_reports_setting(tmp_path: Path) -> None:
    sc = load_scenario("cifar10")
    assert sc.section("task")["name"] == "cifar10"
    assert sc.section("federation")["clients"] == 20
    assert sc.section("partition")["name"] == "dirichlet" and sc.section("partition")["alpha"] == 0.1
    assert sc.section("matrix")["defenses"] == ["fedavg", "fedsim"]
    points = sweep_points(sc)
    assert points == [{"algorithm.name": a} for a in ("fedavg", "fedprox", "feddyn")]
    assert [sc.with_values(pt).section("algorithm") for pt in points] == [
        {"name": "fedavg"}, {"name": "fedprox", "mu": 0.01}, {"name": "feddyn", "alpha": 0.1},
    ]


def test_validate_needs_the_data_and_passes_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ROBUSTFL_DATA_DIR", str(tmp_path / "none"))
    assert cli_main(["validate", "cifar10", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "none" / "cifar10") in err and "cifar-10-python.tar.gz" in err
    write_cifar(tmp_path / "data" / "cifar10")
    monkeypatch.setenv("ROBUSTFL_DATA_DIR", str(tmp_path / "data"))
    feddyn = ["--set", "matrix.sweep={}", "--set", "algorithm.name=feddyn", "--set", "algorithm.alpha=0.01"]
    assert cli_main(["validate", "cifar10", "--quiet", "--set", "federation.clients=4", *feddyn]) == 0
