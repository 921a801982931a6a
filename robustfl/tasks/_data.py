"""Shared plumbing for the tasks: the build-argument check, data-dir resolution, the IDX reader, splits.

* :func:`resolve_data_dir` -- where an image task reads its files: ``task.data_dir`` (relative to
  the scenario file's folder), else ``$ROBUSTFL_DATA_DIR/<task>``, else ``~/.cache/robustfl/<task>``.
* :func:`read_idx` -- the IDX format of LeCun's MNIST files (gzip or raw), validated: magic
  number, element type, number of dimensions and payload size; anything else is a
  :class:`~robustfl.errors.DataError`.
* :func:`stratified_take` -- a class-stratified random subset (largest-remainder quotas).
* :func:`root_split` -- the server's root set: ``round(root_bias * root_size)`` samples of class 0,
  the rest class-stratified, disjoint from everything else.
* :func:`classification_problem` -- partition, pad and wrap a labelled pool into a Problem;
  :func:`image_problem` does the same for a neural image classifier after taking the root set.
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from ..errors import ConfigError, DataError
from ..types import TaskInfo, layer_ends
from ._flat import FlatModel, classifier_loss, classifier_predict
from .base import LossFn, Partition, Problem, SharedGrad
from .partition import pad_clients, partition_indices

# -- build arguments --------------------------------------------------------------------------


def check_common(clients: int, root_size: int, root_bias: float) -> None:
    """The build arguments every task shares: scenario keys (validated by the scenario too), named
    as such for a direct caller of ``Task.build``. A task's own parameters are its dataclass
    fields, checked in its ``__post_init__`` with :mod:`robustfl.params`."""
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ConfigError(f"federation.clients must be an integer >= 1, got {clients!r}")
    if isinstance(root_size, bool) or not isinstance(root_size, int) or root_size < 0:
        raise ConfigError(f"server.root_size must be an integer >= 0, got {root_size!r}")
    if not 0.0 <= float(root_bias) <= 1.0:
        raise ConfigError(f"server.root_bias must be in [0, 1], got {root_bias!r}")


def require_regression_defaults(task: str, partition: Partition, root_bias: float) -> None:
    """Regression tasks have no labels: only the iid partition and an unbiased root set apply."""
    if partition.name != "iid":
        raise ConfigError(
            f"partition.name = {partition.name!r} needs a classification task (labels); "
            f"task {task!r} is a regression task: use partition 'iid'"
        )
    if float(root_bias) != 0.0:
        raise ConfigError(
            f"server.root_bias = {root_bias} needs a classification task (it draws from one class); "
            f"task {task!r} is a regression task: use 0"
        )


# -- data directories and IDX files ------------------------------------------------------------

ENV_VAR = "ROBUSTFL_DATA_DIR"


def resolve_data_dir(task: str, data_dir: str | None, base_dir: str | None) -> Path:
    """The directory an image task reads: ``data_dir`` (relative to ``base_dir``), else
    ``$ROBUSTFL_DATA_DIR/<task>``, else ``~/.cache/robustfl/<task>``. Not checked for existence."""
    if data_dir:
        path = Path(data_dir).expanduser()
        if not path.is_absolute() and base_dir:
            path = Path(base_dir) / path
        return path
    env = os.environ.get(ENV_VAR, "")
    if env:
        return Path(env).expanduser() / task
    return Path.home() / ".cache" / "robustfl" / task


def find_file(directory: Path, stem: str) -> Path | None:
    """``directory/stem`` or ``directory/stem.gz``, whichever exists (the raw file first)."""
    for name in (stem, stem + ".gz"):
        path = directory / name
        if path.is_file():
            return path
    return None


_IDX_TYPES = {0x08: np.dtype(np.uint8)}  # MNIST uses unsigned bytes only


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """Read an IDX file (gzip-compressed or raw) holding ``ndim``-dimensional unsigned bytes."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path} is not an IDX file (bad magic number {raw[:4].hex() or 'empty'})")
    code, dims = raw[2], raw[3]
    if code not in _IDX_TYPES:
        raise DataError(f"{path}: IDX element type 0x{code:02x} is not supported (expected 0x08, bytes)")
    if dims != ndim:
        raise DataError(f"{path}: IDX file has {dims} dimensions, expected {ndim}")
    header = 4 + 4 * dims
    if len(raw) < header:
        raise DataError(f"{path}: IDX header is truncated")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    expected = header + math.prod(shape) * _IDX_TYPES[code].itemsize
    if len(raw) != expected:
        raise DataError(f"{path}: IDX payload has {len(raw)} bytes, the header {shape} needs {expected}")
    return np.frombuffer(raw, dtype=_IDX_TYPES[code], offset=header).reshape(shape).copy()


# -- splits ------------------------------------------------------------------------------------


def stratified_take(
    labels: Tensor, count: int, generator: torch.Generator, num_classes: int
) -> tuple[Tensor, Tensor]:
    """A class-stratified random subset of ``count`` indices, and the rest (both sorted).

    Class c gets ``floor(count * n_c / n)`` samples plus one for the classes with the largest
    remainders (ties: lower class first); within a class the samples are a uniform draw.
    """
    n = labels.numel()
    if not 0 <= count <= n:
        raise ConfigError(f"cannot take {count} samples out of {n}")
    per_class = torch.bincount(labels, minlength=num_classes)
    exact = per_class.double() * count / max(n, 1)
    quota = exact.floor().long()
    short = count - int(quota.sum())
    if short > 0:
        order = sorted(range(num_classes), key=lambda c: (-(float(exact[c]) - int(quota[c])), c))
        for c in order[:short]:
            quota[c] += 1
    taken = []
    for c in range(num_classes):
        idx = torch.nonzero(labels == c).flatten()
        perm = torch.randperm(idx.numel(), generator=generator)
        taken.append(idx[perm[: int(quota[c])]])
    take = torch.cat(taken).sort().values
    keep = torch.ones(n, dtype=torch.bool)
    keep[take] = False
    return take, torch.nonzero(keep).flatten()


def root_split(
    labels: Tensor, root_size: int, root_bias: float, generator: torch.Generator, num_classes: int
) -> tuple[Tensor, Tensor]:
    """Root-set indices and the rest: ``floor(root_bias * root_size + 0.5)`` samples of class 0
    drawn first, the remainder class-stratified over what is left (class 0 included)."""
    n = labels.numel()
    if root_size > n:
        raise ConfigError(f"server.root_size = {root_size} exceeds the {n} samples available for it")
    n_bias = math.floor(root_bias * root_size + 0.5)
    zeros = torch.nonzero(labels == 0).flatten()
    if n_bias > zeros.numel():
        raise ConfigError(
            f"server.root_bias = {root_bias} needs {n_bias} samples of class 0, "
            f"only {zeros.numel()} available"
        )
    biased = zeros[torch.randperm(zeros.numel(), generator=generator)[:n_bias]]
    rest = torch.ones(n, dtype=torch.bool)
    rest[biased] = False
    rest_idx = torch.nonzero(rest).flatten()
    take, keep = stratified_take(labels[rest_idx], root_size - n_bias, generator, num_classes)
    root = torch.cat([biased, rest_idx[take]]).sort().values
    return root, rest_idx[keep]


# -- problems ----------------------------------------------------------------------------------


def weighted_objective(
    loss: LossFn,
    data: tuple[Tensor, ...],
    mask: Tensor,
    counts: Tensor,
    batched_loss: LossFn | None = None,
) -> Callable[[Tensor], float]:
    """F(w) = sum_k n_k F_k(w) / sum_k n_k, every client's loss at once: ``batched_loss`` (w,
    (S, n, ...) batch, (S, n) mask) -> (S,) where the task writes one (bit for bit the vmap of
    ``loss``, without its per-operation cost), else ``vmap(loss)``."""
    per_client = batched_loss if batched_loss is not None else vmap(loss, in_dims=(None, 0, 0))
    weights = counts.to(torch.float64) / counts.sum()

    def objective(w: Tensor) -> float:
        with torch.no_grad():
            losses = per_client(w, data, mask).to(torch.float64)
            return float((weights * losses).sum())

    return objective


def classification_problem(
    *,
    info: TaskInfo,
    dim: int,
    dtype: torch.dtype,
    loss: LossFn,
    predict: Callable[[Tensor, Tensor], Tensor],
    x: Tensor,
    y: Tensor,
    clients: int,
    partition: Partition,
    generator: torch.Generator,
    root: tuple[Tensor, Tensor] | None,
    test: tuple[Tensor, Tensor] | None,
    optimum: Tensor | None = None,
    extras: dict[str, object] | None = None,
    layers: tuple[int, ...] | None = None,
    shared_grad: SharedGrad | None = None,
    batched_loss: LossFn | None = None,
) -> Problem:
    """Partition the labelled pool (x, y) among ``clients`` and assemble the Problem
    (``batched_loss``: see :func:`weighted_objective`)."""
    num_classes = info.num_classes
    parts = partition_indices(y, clients, partition, generator, num_classes=num_classes)
    data, mask, counts = pad_clients((x, y), parts)
    root_data = root_mask = None
    if root is not None and root[1].numel() > 0:
        root_data = root
        root_mask = torch.ones(root[1].numel(), dtype=torch.bool)
    return Problem(
        info=info,
        dim=dim,
        dtype=dtype,
        loss=loss,
        client_data=data,
        client_mask=mask,
        num_samples=counts,
        objective=weighted_objective(loss, data, mask, counts, batched_loss),
        optimum=optimum,
        root_data=root_data,
        root_mask=root_mask,
        test_data=test,
        predict=predict,
        extras=dict(extras or {}),
        layers=layers,
        shared_grad=shared_grad,
    )


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """sum(mask * values) / max(sum(mask), 1): the per-client mean over real samples (vmappable)."""
    m = mask.to(values.dtype)
    return (m * values).sum() / m.sum().clamp(min=1.0)


def image_problem(
    *,
    info: TaskInfo,
    module: torch.nn.Module,
    l2: float,
    pool: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor] | None,
    clients: int,
    partition: Partition,
    root_size: int,
    root_bias: float,
    generator: torch.Generator,
) -> Problem:
    """A neural image classifier (float32, no exact optimum): the root set is taken from ``pool``
    first (:func:`root_split`), the rest is partitioned among the clients."""
    x, y = pool
    assert info.num_classes is not None
    root_idx, client_idx = root_split(y, root_size, root_bias, generator, info.num_classes)
    model = FlatModel(module)
    return classification_problem(
        info=info,
        dim=model.numel,
        layers=layer_ends(model.sizes),
        dtype=torch.float32,
        loss=classifier_loss(model, l2),
        predict=classifier_predict(model),
        x=x[client_idx],
        y=y[client_idx],
        clients=clients,
        partition=partition,
        generator=generator,
        root=(x[root_idx], y[root_idx]) if root_size > 0 else None,
        test=test,
    )
