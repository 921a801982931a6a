"""How a labelled pool is split among clients, and how the split becomes padded tensors.

:func:`partition_indices` returns one sorted index tensor per client; every index appears in
exactly one client and no client is empty. The partitions (``[partition] name``):

* ``iid`` -- a uniform shuffle cut into ``clients`` parts whose sizes differ by at most one.
* ``dirichlet`` (``alpha`` > 0) -- for each class, proportions over the clients ~ Dir(alpha)
  (Hsu, Qi & Brown, 2019); the class's shuffled samples are cut at the cumulative proportions.
  Small alpha: each class sits on few clients; large alpha: close to iid.
* ``bias`` (``q`` in [0, 1]) -- Fang et al. (USENIX Security 2020) / FLTrust (NDSS 2021): the
  clients are cut into C contiguous groups (C = number of classes, needs clients >= C); a sample of
  class l goes to group l with probability q and to each other group with probability
  (1 - q)/(C - 1), then to a client of its group chosen uniformly. q = 1/C is iid.
* ``shards`` (``shards_per_client`` >= 1) -- McMahan et al. (2017): sort by label (random order
  within a class), cut into clients * shards_per_client contiguous shards (sizes differ by at most
  one) and deal shards_per_client random shards to each client.

No empty client: ``dirichlet`` and ``bias`` can leave a client with nothing; each such client then
receives one random sample from the currently largest client (for ``bias``, the largest client of
its own group when that one has two or more samples, so the group structure is kept). ``iid`` and
``shards`` cannot produce empty clients once ``clients <= n`` (resp. ``clients * shards_per_client
<= n``).

Randomness comes only from the given torch generator; the Dirichlet draws use numpy's generator
seeded from it (``torch._standard_gamma`` takes no generator).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .base import Partition

PARTITIONS = ("iid", "dirichlet", "bias", "shards")


def validate_partition(partition: Partition) -> None:
    """ConfigError naming the key (``partition.alpha`` ...) for a bad partition."""
    if partition.name not in PARTITIONS:
        raise ConfigError(
            f"partition.name must be one of {', '.join(PARTITIONS)}, got {partition.name!r}"
        )
    if partition.name == "dirichlet" and not float(partition.alpha) > 0.0:
        raise ConfigError(f"partition.alpha must be > 0, got {partition.alpha!r}")
    if partition.name == "bias" and not 0.0 <= float(partition.q) <= 1.0:
        raise ConfigError(f"partition.q must be in [0, 1], got {partition.q!r}")
    if partition.name == "shards":
        spc = partition.shards_per_client
        if isinstance(spc, bool) or not isinstance(spc, int) or spc < 1:
            raise ConfigError(f"partition.shards_per_client must be an integer >= 1, got {spc!r}")


def partition_indices(
    labels: Tensor,
    clients: int,
    partition: Partition,
    generator: torch.Generator,
    num_classes: int | None = None,
) -> list[Tensor]:
    """Split ``range(len(labels))`` among ``clients``: one sorted int64 index tensor per client."""
    validate_partition(partition)
    labels = labels.reshape(-1).long()
    n = labels.numel()
    if clients < 1:
        raise ConfigError(f"federation.clients must be >= 1, got {clients}")
    if clients > n:
        raise ConfigError(f"federation.clients = {clients} exceeds the number of samples ({n})")
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if n else 1
    if partition.name == "iid":
        owner = _iid(n, clients, generator)
    elif partition.name == "dirichlet":
        owner = _dirichlet(labels, clients, float(partition.alpha), generator, num_classes)
        _fill_empty(owner, clients, generator, torch.zeros(clients, dtype=torch.long))
    elif partition.name == "bias":
        if clients < num_classes:
            raise ConfigError(
                f"partition 'bias' splits the clients into one group per class: "
                f"federation.clients = {clients} must be >= {num_classes}"
            )
        owner, group_of = _bias(labels, clients, float(partition.q), generator, num_classes)
        _fill_empty(owner, clients, generator, group_of)
    else:
        owner = _shards(labels, clients, int(partition.shards_per_client), generator)
    order = torch.argsort(owner, stable=True)  # indices grouped by client, ascending within
    sizes = torch.bincount(owner, minlength=clients)
    return list(torch.split(order, sizes.tolist()))


def _iid(n: int, clients: int, generator: torch.Generator) -> Tensor:
    perm = torch.randperm(n, generator=generator)
    owner = torch.empty(n, dtype=torch.long)
    owner[perm] = torch.repeat_interleave(torch.arange(clients), _even_sizes(n, clients))
    return owner


def _even_sizes(n: int, parts: int) -> Tensor:
    """Sizes of ``parts`` consecutive pieces of n items, differing by at most one (larger first)."""
    return torch.full((parts,), n // parts, dtype=torch.long) + (torch.arange(parts) < n % parts).long()


def _dirichlet(
    labels: Tensor, clients: int, alpha: float, generator: torch.Generator, num_classes: int
) -> Tensor:
    rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator).item()))
    owner = torch.empty(labels.numel(), dtype=torch.long)
    for c in range(num_classes):
        idx = torch.nonzero(labels == c).flatten()
        if idx.numel() == 0:
            continue
        idx = idx[torch.randperm(idx.numel(), generator=generator)]
        props = rng.dirichlet(np.full(clients, alpha))
        cuts = np.floor(np.cumsum(props)[:-1] * idx.numel() + 0.5).astype(np.int64)
        cuts = np.clip(cuts, 0, idx.numel())
        sizes = np.diff(np.concatenate([[0], cuts, [idx.numel()]]))
        owner[idx] = torch.repeat_interleave(torch.arange(clients), torch.as_tensor(sizes))
    return owner


def _bias(
    labels: Tensor, clients: int, q: float, generator: torch.Generator, num_classes: int
) -> tuple[Tensor, Tensor]:
    n = labels.numel()
    groups = torch.tensor_split(torch.arange(clients), num_classes)
    group_of = torch.empty(clients, dtype=torch.long)
    for g, members in enumerate(groups):
        group_of[members] = g
    group_start = torch.tensor([int(m[0]) for m in groups])
    group_size = torch.tensor([m.numel() for m in groups])
    stay = torch.rand(n, generator=generator, dtype=torch.float64) < q
    if num_classes > 1:
        other = torch.randint(num_classes - 1, (n,), generator=generator)
        group = torch.where(stay, labels, (labels + 1 + other) % num_classes)
    else:
        group = labels.clone()
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    within = torch.minimum((u * group_size[group]).long(), group_size[group] - 1)
    return group_start[group] + within, group_of


def _shards(labels: Tensor, clients: int, per_client: int, generator: torch.Generator) -> Tensor:
    n = labels.numel()
    count = clients * per_client
    if count > n:
        raise ConfigError(
            f"partition.shards_per_client = {per_client}: {clients} clients need {count} shards "
            f"but there are only {n} samples"
        )
    shuffled = torch.randperm(n, generator=generator)
    order = shuffled[torch.argsort(labels[shuffled], stable=True)]  # by label, random within
    deal = torch.randperm(count, generator=generator)  # shard deal[j] goes to client j // per_client
    client_of_shard = torch.empty(count, dtype=torch.long)
    client_of_shard[deal] = torch.arange(count) // per_client
    shard_of_position = torch.repeat_interleave(torch.arange(count), _even_sizes(n, count))
    owner = torch.empty(n, dtype=torch.long)
    owner[order] = client_of_shard[shard_of_position]
    return owner


def _fill_empty(owner: Tensor, clients: int, generator: torch.Generator, group_of: Tensor) -> None:
    """Give every empty client one random sample of the largest client (same group if possible)."""
    sizes = torch.bincount(owner, minlength=clients)
    for k in torch.nonzero(sizes == 0).flatten().tolist():
        same = group_of == group_of[k]
        donor_sizes = torch.where(same, sizes, torch.zeros_like(sizes))
        if int(donor_sizes.max()) < 2:
            donor_sizes = sizes
        donor = int(torch.argmax(donor_sizes))  # ties: lowest client id
        members = torch.nonzero(owner == donor).flatten()
        pick = members[int(torch.randint(members.numel(), (1,), generator=generator))]
        owner[pick] = k
        sizes[donor] -= 1
        sizes[k] += 1


def pad_clients(
    arrays: Sequence[Tensor], parts: Sequence[Tensor]
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    """Pad per-client subsets of ``arrays`` (each (n, ...)) to (K, n_max, ...).

    Returns the padded tensors (padding filled with zeros), the mask (K, n_max) (True = real
    sample) and the counts (K,) int64.
    """
    counts = torch.tensor([p.numel() for p in parts], dtype=torch.long)
    n_max = int(counts.max()) if len(parts) else 0
    mask = torch.arange(n_max)[None, :] < counts[:, None]
    index = torch.zeros(len(parts), n_max, dtype=torch.long)
    for k, p in enumerate(parts):
        index[k, : p.numel()] = p
    padded = []
    for a in arrays:
        g = a[index]
        keep = mask.reshape(mask.shape + (1,) * (a.dim() - 1))
        padded.append(torch.where(keep, g, torch.zeros((), dtype=a.dtype)))
    return tuple(padded), mask, counts
