"""MNIST handwritten digits from the standard IDX files.

Paper: LeCun, Cortes, Burges, "The MNIST database of handwritten digits", 1998

Files (each raw or gzip-compressed, ``.gz``): ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``
and optionally ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, read from ``data_dir``
(relative to the scenario file's folder), else ``$ROBUSTFL_DATA_DIR/mnist``, else
``~/.cache/robustfl/mnist``. With all four files the real splits are used (60,000 training
images, 10,000 test images). With only the t10k pair, the 10,000 images are split once,
class-stratified, with a fixed seed (:data:`SPLIT_SEED`, the same for every cell seed) into
``train_size`` training and ``test_size`` test images. Pixels are scaled to [0, 1] and stored as
``(n, 1, 28, 28)`` float32.

The server's root set (``root_size``; ``root_bias`` of it from class 0, the rest stratified) is
drawn from the training images with the build generator, and the remaining training images are
partitioned among the clients; root, client and test data are disjoint.

Models: ``mlp`` (784 -> ``hidden`` -> 10, ReLU; default), ``cnn`` (conv 8@5x5 -> ReLU -> max-pool 2
-> conv 16@5x5 -> ReLU -> max-pool 2 -> linear 256 -> 10; 5,994 parameters) or ``fltrust_cnn``
(FLTrust's MNIST CNN: conv 30@3x3 -> ReLU -> max-pool 2 -> conv 50@3x3 -> ReLU -> max-pool 2 ->
linear 1250 -> 100 -> ReLU -> 10; 139,960 parameters, about 5x the small CNN's cost per round).
Loss: cross-entropy + (l2/2)||w||^2 (``l2`` = 0 by default). A neural task: no exact optimum, the
reference is the clean run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .. import params
from ..errors import ConfigError, DataError
from ..types import TaskInfo
from ._data import (
    check_common,
    find_file,
    image_problem,
    read_idx,
    resolve_data_dir,
    stratified_take,
)
from ._flat import fltrust_cnn, meta_module, mlp, small_cnn
from .base import Partition, Problem, Task

CLASSES = 10
SIDE = 28
SPLIT_SEED = 20_170_000  # the fixed train/test split of the t10k files, independent of the cell seed
FILES = {
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
}
_HINT = (
    "put t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz there (train-images-idx3-ubyte.gz "
    "and train-labels-idx1-ubyte.gz too for the full training split), or set task.data_dir or "
    "$ROBUSTFL_DATA_DIR"
)

_cache: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}


def load_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 28, 28) uint8 and labels (n,) uint8 from one IDX pair, validated (cached)."""
    key = tuple(
        f"{p.resolve()}:{p.stat().st_mtime_ns}:{p.stat().st_size}" for p in (images_path, labels_path)
    )
    if key in _cache:
        return _cache[key]
    images = read_idx(images_path, 3)
    labels = read_idx(labels_path, 1)
    if images.shape[1:] != (SIDE, SIDE):
        raise DataError(f"{images_path}: images are {images.shape[1:]}, expected ({SIDE}, {SIDE})")
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} {labels.shape[0]} labels"
        )
    if labels.size and int(labels.max()) >= CLASSES:
        raise DataError(f"{labels_path}: label {int(labels.max())} is outside 0..{CLASSES - 1}")
    _cache[key] = (images, labels)
    return images, labels


def load_mnist(directory: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"test": (images, labels)}`` plus ``"train"`` when the training pair is present."""
    if not directory.is_dir():
        what = "is a file, not a folder" if directory.is_file() else "does not exist"
        raise DataError(f"mnist: data directory {directory} {what}; {_HINT}")
    found = {key: find_file(directory, stem) for key, stem in FILES.items()}
    if found["test_images"] is None or found["test_labels"] is None:
        missing = [FILES[k] for k in ("test_images", "test_labels") if found[k] is None]
        raise DataError(f"mnist: {' and '.join(missing)} (or .gz) not found in {directory}; {_HINT}")
    if (found["train_images"] is None) != (found["train_labels"] is None):
        have, lack = ("train_images", "train_labels") if found["train_labels"] is None else (
            "train_labels",
            "train_images",
        )
        raise DataError(f"mnist: {directory} has {FILES[have]} but not {FILES[lack]}: add it or remove both")
    out = {"test": load_pair(found["test_images"], found["test_labels"])}  # type: ignore[arg-type]
    if found["train_images"] is not None:
        out["train"] = load_pair(found["train_images"], found["train_labels"])  # type: ignore[arg-type]
    return out


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[Tensor, Tensor]:
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


@dataclass
class MNIST(Task):
    """``data_dir`` = None, ``model`` = "mlp" ("mlp" | "cnn" | "fltrust_cnn"),
    ``hidden`` = 100, ``train_size`` = 8000,
    ``test_size`` = 2000 (both only for the t10k-only split), ``l2`` = 0."""

    data_dir: str | None = None
    model: str = "mlp"
    hidden: int = 100
    train_size: int = 8000
    test_size: int = 2000
    l2: float = 0.0

    name = "mnist"

    def __post_init__(self) -> None:
        c = "task mnist"
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            raise params.error(c, "data_dir", "a path string", self.data_dir)
        self.model = params.choice(c, "model", self.model, ("mlp", "cnn", "fltrust_cnn"))
        self.hidden = params.number(c, "hidden", self.hidden, low=1, integer=True)
        self.train_size = params.number(c, "train_size", self.train_size, low=1, integer=True)
        self.test_size = params.number(c, "test_size", self.test_size, low=0, integer=True)
        self.l2 = params.number(c, "l2", self.l2, low=0.0)

    def splits(self, base_dir: str | None = None) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """(train, test) as tensors: the real splits, or the fixed split of the t10k files."""
        files = load_mnist(resolve_data_dir(self.name, self.data_dir, base_dir))
        x, y = _tensors(*files["test"])
        if "train" in files:
            return _tensors(*files["train"]), (x, y)
        n = y.numel()
        if self.train_size + self.test_size > n:
            raise ConfigError(
                f"task.train_size + task.test_size = {self.train_size + self.test_size} exceeds the "
                f"{n} images of the t10k files"
            )
        g = torch.Generator().manual_seed(SPLIT_SEED)
        test_idx, rest = stratified_take(y, self.test_size, g, CLASSES)
        take, _ = stratified_take(y[rest], self.train_size, g, CLASSES)
        train_idx = rest[take]
        return (x[train_idx], y[train_idx]), (x[test_idx], y[test_idx])

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
        train, test = self.splits(base_dir)
        hidden = self.hidden
        if self.model == "mlp":
            module = meta_module(lambda: mlp(SIDE * SIDE, hidden, CLASSES))
        elif self.model == "cnn":
            module = meta_module(lambda: small_cnn(SIDE, CLASSES))
        else:
            module = meta_module(lambda: fltrust_cnn(SIDE, CLASSES))
        return image_problem(
            info=TaskInfo(name=self.name, num_classes=CLASSES, input_shape=(1, SIDE, SIDE), is_image=True),
            module=module,
            l2=self.l2,
            pool=train,
            test=test if test[1].numel() > 0 else None,
            clients=clients,
            partition=partition,
            root_size=root_size,
            root_bias=root_bias,
            generator=generator,
        )
