"""The example's task: a small MLP on scikit-learn's digits (MNIST when ROBUSTFL_DATA_DIR holds it
and the run config says task = "mnist"), split IID across the partitions with a fixed seed; the
server keeps a root set and a test set. Plain torch: nothing here is robustfl's."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from flwr.app import ArrayRecord
from torch import nn


def model(inputs: int = 64, hidden: int = 32, classes: int = 10) -> nn.Module:
    torch.manual_seed(0)  # every party builds the same initial model
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, classes))


@cache
def dataset(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    return torch.tensor(x[order] / 16.0, dtype=torch.float32), torch.tensor(y[order], dtype=torch.int64)


def split(root_size: int, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """test: the first 20 %; root: the next root_size images; clients: the rest."""
    x, y = dataset(seed)
    n_test = len(y) // 5
    return {
        "test": (x[:n_test], y[:n_test]),
        "root": (x[n_test : n_test + root_size], y[n_test : n_test + root_size]),
        "clients": (x[n_test + root_size :], y[n_test + root_size :]),
    }


def partition(i: int, n: int, root_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = split(root_size, seed)["clients"]
    return x[i::n], y[i::n]


def train(net: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float) -> float:
    """Full-batch gradient steps; returns the last loss."""
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    return float(loss.detach())


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def load(net: nn.Module, arrays: ArrayRecord) -> nn.Module:
    net.load_state_dict(arrays.to_torch_state_dict())
    return net
