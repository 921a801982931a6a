"""CIFAR-10 from the standard python batches (https://www.cs.toronto.edu/~kriz/cifar.html,
``cifar-10-python.tar.gz``).

Paper: Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009

Files: ``data_batch_1`` .. ``data_batch_5`` and ``test_batch`` (``batches.meta`` optional, for the
class names), read from the folder ``cifar-10-batches-py`` inside the data directory or from the
data directory itself. The data directory is ``data_dir`` (relative to the scenario file's
folder), else ``$ROBUSTFL_DATA_DIR/cifar10``, else ``~/.cache/robustfl/cifar10``.

Each batch is a pickle of a dict: ``b"data"`` a uint8 array ``(n, 3072)`` whose rows hold the
red, green and blue 32x32 planes one after the other, each row-major; ``b"labels"`` n integers
in 0..9; ``b"batch_label"`` and ``b"filenames"``, unused. Pickles can run arbitrary code, so the
batches are read with :class:`BatchUnpickler`, which resolves only the globals that format holds
(numpy's array and dtype reconstruction, numpy scalars, and the two calls Python 3 writes for
bytes in protocol-2 pickles: ``_codecs.encode`` restricted to latin-1 and ``bytes()`` with no
arguments) and refuses everything else with a :class:`~robustfl.errors.DataError` before anything
is imported or called. Shapes, dtypes and the label range are then checked; anything malformed
is a one-line DataError.

Splits: the five training batches (50,000 images) are the training pool and ``test_batch``
(10,000) the test set; ``train_size`` / ``test_size`` > 0 keep a class-stratified subset of each,
drawn once with a fixed seed (:data:`SUBSET_SEED`, the same for every cell seed). Pixels are scaled
to [0, 1] and stored as ``(n, 3, 32, 32)`` float32 (channels R, G, B). The server's root set
(``root_size``; ``root_bias`` of it from class 0, the rest stratified) is drawn from the training
pool with the build generator, and the rest of the pool is partitioned among the clients; root,
client and test data are disjoint.

Model ``cnn``: LeNet-5 for 3x32x32 inputs (LeCun et al., 1998): conv 6@5x5 -> ReLU -> max-pool 2
-> conv 16@5x5 -> ReLU -> max-pool 2 -> linear 400 -> 120 -> ReLU -> 120 -> 84 -> ReLU -> 84 -> 10;
62,006 parameters. Loss: cross-entropy + (l2/2)||w||^2 (``l2`` = 0 by default). A neural task: no
exact optimum, the reference is the clean run.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .. import params
from ..errors import ConfigError, DataError
from ..types import TaskInfo
from ._data import check_common, image_problem, resolve_data_dir, stratified_take
from ._flat import meta_module
from .base import Partition, Problem, Task

CLASSES = 10
CHANNELS = 3
SIDE = 32
ROW = CHANNELS * SIDE * SIDE  # 3072 bytes per image
INPUT_SHAPE = (CHANNELS, SIDE, SIDE)
SUBFOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
SUBSET_SEED = 20_090_408  # the fixed train_size / test_size subsets, independent of the cell seed
_HINT = (
    "download the CIFAR-10 python version (cifar-10-python.tar.gz from "
    "https://www.cs.toronto.edu/~kriz/cifar.html) and unpack it there, or set task.data_dir or "
    "$ROBUSTFL_DATA_DIR"
)

# -- the restricted unpickler -------------------------------------------------------------------


def _latin1_encode(text: object, encoding: object = "utf-8") -> bytes:
    """``_codecs.encode`` as Python 3 uses it for bytes in protocol-2 pickles: latin-1 only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise ValueError(f"refuses _codecs.encode({type(text).__name__}, {encoding!r}): only latin-1 text")
    return text.encode("latin1")


def _empty_bytes(*args: object) -> bytes:
    """``__builtin__.bytes()``, which Python 3 writes for ``b""`` in protocol-2 pickles: no arguments only."""
    if args:
        raise ValueError(f"refuses bytes{args!r}: only bytes() with no arguments")
    return b""


def _numpy_attr(name: str) -> Any:
    """``numpy._core.<name>`` (numpy >= 2) or ``numpy.core.<name>`` (numpy 1.x), e.g. multiarray.scalar."""
    module, attr = name.rsplit(".", 1)
    for package in ("numpy._core", "numpy.core"):
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"numpy has no {name}")  # pragma: no cover - every supported numpy has them


def _allowed() -> dict[tuple[str, str], Any]:
    table: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("__builtin__", "bytes"): _empty_bytes,
    }
    for name in ("multiarray._reconstruct", "multiarray.scalar", "numeric._frombuffer"):
        target = _numpy_attr(name)
        module, attr = name.rsplit(".", 1)
        for package in ("numpy._core", "numpy.core"):  # pickles name either, whichever numpy wrote them
            table[(f"{package}.{module}", attr)] = target
    return table


ALLOWED_GLOBALS = _allowed()


class BatchUnpickler(pickle.Unpickler):
    """Resolves only :data:`ALLOWED_GLOBALS` (numpy arrays, dtypes and scalars; latin-1 bytes);
    any other global is a DataError raised before it is imported, let alone called."""

    def __init__(self, file: Any, source: str) -> None:
        super().__init__(file, encoding="bytes")  # Python 2 str -> bytes: the original files
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        target = ALLOWED_GLOBALS.get((module, name))
        if target is None:
            raise DataError(
                f"{self.source}: refuses to load {module}.{name}: a CIFAR-10 batch holds only numpy "
                "uint8 arrays, lists, numbers and strings (is this file from somewhere else?)"
            )
        return target

    def persistent_load(self, pid: Any) -> Any:
        raise DataError(f"{self.source}: refuses a persistent id: not a CIFAR-10 batch")


def unpickle(path: Path) -> Any:
    """One pickle from ``path`` through :class:`BatchUnpickler`; any failure is a one-line DataError."""
    try:
        with path.open("rb") as handle:
            return BatchUnpickler(handle, str(path)).load()
    except DataError:
        raise
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a broken pickle raises almost anything
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise DataError(f"{path} is not a readable CIFAR-10 python batch ({detail})") from exc


def _field(batch: dict[Any, Any], key: str) -> Any:
    for k in (key.encode(), key):  # bytes keys in the original files; str if re-saved from Python 3
        if k in batch:
            return batch[k]
    return None


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 3072)`` uint8 and labels ``(n,)`` int64 from one batch file, validated."""
    batch = unpickle(path)
    if not isinstance(batch, dict):
        raise DataError(f"{path}: expected a pickled dict, found {type(batch).__name__}")
    data, labels = _field(batch, "data"), _field(batch, "labels")
    if data is None or labels is None:
        raise DataError(f"{path}: the batch has no {'data' if data is None else 'labels'} entry")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ROW:
        found = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{path}: data must be a uint8 array (n, {ROW}), found {found}")
    if data.shape[0] == 0:
        raise DataError(f"{path}: the batch holds no images")
    if not isinstance(labels, list | np.ndarray):
        raise DataError(f"{path}: labels must be a list of integers, found {type(labels).__name__}")
    y = np.asarray(labels)
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise DataError(f"{path}: labels must be a flat list of integers, found {y.dtype} {y.shape}")
    if y.shape[0] != data.shape[0]:
        raise DataError(f"{path} holds {data.shape[0]} images but {y.shape[0]} labels")
    if int(y.min()) < 0 or int(y.max()) >= CLASSES:
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise DataError(f"{path}: label {bad} is outside 0..{CLASSES - 1}")
    return np.ascontiguousarray(data), y.astype(np.int64)


def read_meta(path: Path) -> list[str]:
    """The class names from ``batches.meta`` (``label_names``, 10 of them)."""
    meta = unpickle(path)
    names: Any = _field(meta, "label_names") if isinstance(meta, dict) else None
    valid = isinstance(names, list) and len(names) == CLASSES
    if not valid or not all(isinstance(n, bytes | str) for n in names):
        raise DataError(f"{path}: expected label_names, a list of {CLASSES} strings")
    return [n.decode("latin1") if isinstance(n, bytes) else n for n in names]


def batches_folder(directory: Path) -> Path:
    """``directory/cifar-10-batches-py`` when it exists, else ``directory``; the batch files must be there."""
    if not directory.is_dir():
        what = "is a file, not a folder" if directory.is_file() else "does not exist"
        raise DataError(f"cifar10: data directory {directory} {what}; {_HINT}")
    folder = directory / SUBFOLDER if (directory / SUBFOLDER).is_dir() else directory
    missing = [name for name in (*TRAIN_BATCHES, TEST_BATCH) if not (folder / name).is_file()]
    if missing:
        raise DataError(f"cifar10: {', '.join(missing)} not found in {folder}; {_HINT}")
    return folder


Arrays = tuple[np.ndarray, np.ndarray]
_cache: dict[tuple[str, ...], tuple[Arrays, Arrays, list[str] | None]] = {}


def load_cifar10(directory: Path) -> tuple[Arrays, Arrays, list[str] | None]:
    """``((train images, labels), (test images, labels), class names or None)``, validated (cached)."""
    folder = batches_folder(directory)
    paths = [folder / name for name in (*TRAIN_BATCHES, TEST_BATCH, META) if (folder / name).is_file()]
    key = tuple(f"{p.resolve()}:{p.stat().st_mtime_ns}:{p.stat().st_size}" for p in paths)
    if key in _cache:
        return _cache[key]
    train = [read_batch(folder / name) for name in TRAIN_BATCHES]
    test = read_batch(folder / TEST_BATCH)
    names = read_meta(folder / META) if (folder / META).is_file() else None
    out = (np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])), test, names
    _cache.clear()  # one data set in memory at a time (150 MB of bytes for the full set)
    _cache[key] = out
    return out


# -- the task -----------------------------------------------------------------------------------


def lenet5(classes: int = CLASSES) -> nn.Module:
    """Conv(3->6, 5x5) -> ReLU -> MaxPool 2 -> Conv(6->16, 5x5) -> ReLU -> MaxPool 2 -> Linear 400 -> 120
    -> ReLU -> Linear 120 -> 84 -> ReLU -> Linear 84 -> ``classes``."""
    return nn.Sequential(
        nn.Conv2d(CHANNELS, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, classes),
    )


def _subset(arrays: Arrays, size: int, what: str, generator: torch.Generator) -> Arrays:
    images, labels = arrays
    if size == 0:
        return images, labels
    if size > labels.shape[0]:
        raise ConfigError(f"task.{what} = {size} exceeds the {labels.shape[0]} images available")
    take, _ = stratified_take(torch.from_numpy(labels), size, generator, CLASSES)
    idx = take.numpy()
    return images[idx], labels[idx]


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[Tensor, Tensor]:
    x = torch.from_numpy(images).reshape(-1, CHANNELS, SIDE, SIDE).to(torch.float32) / 255.0
    return x, torch.from_numpy(labels)


Pair = tuple[Tensor, Tensor]
MODELS: dict[str, Callable[[], nn.Module]] = {"cnn": lenet5}


@dataclass
class CIFAR10(Task):
    """``data_dir`` = None, ``model`` = "cnn", ``train_size`` = 0 (0 = all 50,000), ``test_size`` = 0
    (0 = all 10,000), ``l2`` = 0."""

    data_dir: str | None = None
    model: str = "cnn"
    train_size: int = 0
    test_size: int = 0
    l2: float = 0.0

    name = "cifar10"

    def __post_init__(self) -> None:
        c = "task cifar10"
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            raise params.error(c, "data_dir", "a path string", self.data_dir)
        self.model = params.choice(c, "model", self.model, tuple(MODELS))
        self.train_size = params.number(c, "train_size", self.train_size, low=0, integer=True)
        self.test_size = params.number(c, "test_size", self.test_size, low=0, integer=True)
        self.l2 = params.number(c, "l2", self.l2, low=0.0)

    def splits(self, base_dir: str | None = None) -> tuple[Pair, Pair]:
        """(train pool, test set) as tensors, subset to ``train_size`` / ``test_size`` when > 0."""
        train, test, _ = self._load(base_dir)
        return train, test

    def _load(self, base_dir: str | None) -> tuple[Pair, Pair, list[str] | None]:
        train, test, names = load_cifar10(resolve_data_dir(self.name, self.data_dir, base_dir))
        g = torch.Generator().manual_seed(SUBSET_SEED)
        train = _subset(train, self.train_size, "train_size", g)
        test = _subset(test, self.test_size, "test_size", g)
        return _tensors(*train), _tensors(*test), names

    def build(
        self,
        *,
        clients: int,
        partition: Partition,
        root_size: int,
        root_bias: float,
        generator: torch.Generator,
        base_dir: str | None = None,
    ) -> Problem:
        check_common(clients, root_size, root_bias)
        train, test, names = self._load(base_dir)
        problem = image_problem(
            info=TaskInfo(name=self.name, num_classes=CLASSES, input_shape=INPUT_SHAPE, is_image=True),
            module=meta_module(MODELS[self.model]),
            l2=self.l2,
            pool=train,
            test=test,
            clients=clients,
            partition=partition,
            root_size=root_size,
            root_bias=root_bias,
            generator=generator,
        )
        if names is not None:
            problem.extras["class_names"] = names
        return problem
