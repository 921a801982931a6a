"""Partitions: a true partition of the indices, no empty client, and each scheme's defining property."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustfl.errors import ConfigError
from robustfl.tasks.base import Partition
from robustfl.tasks.partition import pad_clients, partition_indices

from ..factories import gen


def balanced_labels(classes: int, per_class: int, seed: int = 0) -> torch.Tensor:
    y = torch.arange(classes).repeat_interleave(per_class)
    return y[torch.randperm(y.numel(), generator=gen(seed + 100))]


def assert_partition(parts: list[torch.Tensor], n: int, clients: int) -> None:
    assert len(parts) == clients
    everything = torch.cat(parts).sort().values
    assert torch.equal(everything, torch.arange(n)), "every index exactly once"
    assert min(p.numel() for p in parts) >= 1, "no empty client"


CASES = [
    Partition("iid"),
    Partition("dirichlet", alpha=0.5),
    Partition("dirichlet", alpha=0.01),
    Partition("bias", q=0.5),
    Partition("bias", q=1.0),
    Partition("bias", q=0.0),
    Partition("shards", shards_per_client=2),
    Partition("shards", shards_per_client=3),
]


@pytest.mark.parametrize("partition", CASES, ids=lambda p: f"{p.name}-{p.alpha}-{p.q}-{p.shards_per_client}")
@pytest.mark.parametrize("clients", [10, 37])
def test_every_index_once_and_no_empty_client(partition: Partition, clients: int) -> None:
    y = balanced_labels(10, 53)
    parts = partition_indices(y, clients, partition, gen(3))
    assert_partition(parts, y.numel(), clients)
    for p in parts:  # sorted, int64
        assert p.dtype == torch.int64
        assert torch.equal(p, p.sort().values)


def test_iid_sizes_differ_by_at_most_one() -> None:
    y = balanced_labels(10, 101)  # 1010 samples over 17 clients: 59 or 60
    parts = partition_indices(y, 17, Partition("iid"), gen())
    sizes = sorted(p.numel() for p in parts)
    assert sizes[-1] - sizes[0] <= 1
    assert sizes == [59] * (17 - 1010 % 17) + [60] * (1010 % 17)


def test_iid_is_a_shuffle_not_a_contiguous_cut() -> None:
    y = balanced_labels(10, 100)
    parts = partition_indices(y, 10, Partition("iid"), gen())
    assert not torch.equal(parts[0], torch.arange(100))
    # class mix of each client is close to uniform (10 classes, 100 samples each client)
    for p in parts:
        counts = torch.bincount(y[p], minlength=10)
        assert int(counts.max()) <= 25


def group_of_clients(clients: int, classes: int) -> np.ndarray:
    """Independent transcription: clients cut into `classes` contiguous groups, sizes +-1, larger first."""
    base, extra = divmod(clients, classes)
    sizes = [base + (1 if g < extra else 0) for g in range(classes)]
    return np.repeat(np.arange(classes), sizes)


@pytest.mark.parametrize("clients", [10, 20, 25])
def test_bias_q1_puts_every_sample_of_class_l_in_group_l(clients: int) -> None:
    y = balanced_labels(10, 60)
    parts = partition_indices(y, clients, Partition("bias", q=1.0), gen(1))
    assert_partition(parts, y.numel(), clients)
    group = group_of_clients(clients, 10)
    for k, p in enumerate(parts):
        assert set(y[p].tolist()) == {int(group[k])}


def test_bias_q0_never_uses_the_own_group() -> None:
    y = balanced_labels(5, 200)
    parts = partition_indices(y, 10, Partition("bias", q=0.0), gen(2))
    group = group_of_clients(10, 5)
    for k, p in enumerate(parts):
        assert int(group[k]) not in set(y[p].tolist())


def test_bias_group_probabilities_match_q() -> None:
    """Statistical (seeded): a sample lands in its own group w.p. q, in each other w.p. (1-q)/(C-1)."""
    classes, q = 4, 0.7
    y = balanced_labels(classes, 5000)
    parts = partition_indices(y, 8, Partition("bias", q=q), gen(5))
    group = group_of_clients(8, classes)
    table = np.zeros((classes, classes))  # class x group
    for k, p in enumerate(parts):
        table[:, group[k]] += np.bincount(y[p].numpy(), minlength=classes)
    freq = table / table.sum(1, keepdims=True)
    expected = np.full((classes, classes), (1 - q) / (classes - 1))
    np.fill_diagonal(expected, q)
    # 5000 draws per class: standard error <= sqrt(0.25/5000) = 0.007
    assert np.abs(freq - expected).max() < 0.03
    # and uniformly within a group: the two clients of each group get similar counts
    sizes = np.array([p.numel() for p in parts])
    assert np.abs(sizes[0::2] - sizes[1::2]).max() < 0.1 * sizes.mean()


def test_bias_needs_one_client_per_class() -> None:
    with pytest.raises(ConfigError, match="bias"):
        partition_indices(balanced_labels(10, 10), 5, Partition("bias", q=0.5), gen())


@pytest.mark.parametrize("spc", [1, 2, 5])
def test_shards_limit_distinct_labels(spc: int) -> None:
    # 10 classes x 40 samples, 20 clients: 20*spc shards of 400/(20*spc) samples never straddle a class
    y = balanced_labels(10, 40)
    parts = partition_indices(y, 20, Partition("shards", shards_per_client=spc), gen(7))
    assert_partition(parts, 400, 20)
    for p in parts:
        assert p.numel() == 20
        assert len(set(y[p].tolist())) <= spc
    if spc == 1:  # each client holds one class only, and every class goes to exactly 2 clients
        owners = [int(y[p][0]) for p in parts]
        assert sorted(owners) == sorted(list(range(10)) * 2)


def test_shards_too_many() -> None:
    with pytest.raises(ConfigError, match="shards_per_client"):
        partition_indices(balanced_labels(2, 5), 4, Partition("shards", shards_per_client=3), gen())


def class_fractions(parts: list[torch.Tensor], y: torch.Tensor, classes: int) -> np.ndarray:
    return np.stack([np.bincount(y[p].numpy(), minlength=classes) / p.numel() for p in parts])


def test_dirichlet_tiny_alpha_is_skewed() -> None:
    y = balanced_labels(10, 200)
    parts = partition_indices(y, 10, Partition("dirichlet", alpha=0.01), gen(11))
    frac = class_fractions(parts, y, 10)
    # with alpha = 0.01 each class essentially lives on one client: the dominant class of a
    # client holds almost all of it
    assert frac.max(1).mean() > 0.8


def test_dirichlet_huge_alpha_is_near_uniform() -> None:
    y = balanced_labels(10, 1000)
    parts = partition_indices(y, 10, Partition("dirichlet", alpha=1e4), gen(12))
    frac = class_fractions(parts, y, 10)
    assert np.abs(frac - 0.1).max() < 0.02
    sizes = np.array([p.numel() for p in parts])
    assert np.abs(sizes - 1000).max() < 50


def test_dirichlet_many_clients_no_empty() -> None:
    y = balanced_labels(2, 30)
    parts = partition_indices(y, 50, Partition("dirichlet", alpha=0.01), gen(13))
    assert_partition(parts, 60, 50)


@pytest.mark.parametrize(
    ("partition", "key"),
    [
        (Partition("dirichlet", alpha=0.0), "partition.alpha"),
        (Partition("dirichlet", alpha=-1.0), "partition.alpha"),
        (Partition("bias", q=1.5), "partition.q"),
        (Partition("bias", q=-0.1), "partition.q"),
        (Partition("shards", shards_per_client=0), "partition.shards_per_client"),
        (Partition("pathological"), "partition.name"),
    ],
)
def test_validation_names_the_key(partition: Partition, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        partition_indices(balanced_labels(10, 10), 10, partition, gen())


def test_more_clients_than_samples() -> None:
    with pytest.raises(ConfigError, match="clients"):
        partition_indices(balanced_labels(2, 3), 7, Partition("iid"), gen())


@pytest.mark.parametrize("partition", CASES, ids=lambda p: p.name)
def test_deterministic_for_a_generator_state(partition: Partition) -> None:
    y = balanced_labels(10, 30)
    a = partition_indices(y, 10, partition, gen(42))
    b = partition_indices(y, 10, partition, gen(42))
    c = partition_indices(y, 10, partition, gen(43))
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    # bias with q = 1 and 10 clients for 10 classes has only one outcome
    if not (partition.name == "bias" and partition.q == 1.0):
        assert not all(torch.equal(p, q) for p, q in zip(a, c, strict=True))


def test_pad_clients() -> None:
    x = torch.arange(20, dtype=torch.float64).reshape(10, 2) + 1.0
    y = torch.arange(10) + 1
    parts = [torch.tensor([0, 3, 5]), torch.tensor([9]), torch.tensor([1, 2, 4, 6, 7, 8])]
    (px, py), mask, counts = pad_clients((x, y), parts)
    assert px.shape == (3, 6, 2) and py.shape == (3, 6) and mask.shape == (3, 6)
    assert counts.tolist() == [3, 1, 6]
    for k, p in enumerate(parts):
        n = p.numel()
        assert mask[k].tolist() == [True] * n + [False] * (6 - n)
        assert torch.equal(px[k, :n], x[p]) and torch.equal(py[k, :n], y[p])
        assert float(px[k, n:].abs().sum()) == 0.0 and int(py[k, n:].abs().sum()) == 0
