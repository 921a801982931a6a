"""PSFed: partial model sharing (after Lari et al.) -- each round only a mask M of k coordinates travels.

Parameters: ``fraction`` p in [0, 1] (k = floor(p P + 0.5) coordinates; k = 0 is an empty mask,
never "all"), ``mask`` in {random, magnitude, gradient}, ``explore`` (default 0.5),
``full_sync_every`` N (0 = never; else rounds N, 2N, ... -- 1-based -- share every coordinate).

Mask (one per round, the same for every client):
* random: k coordinates without replacement, drawn from a generator seeded by (seed, round) only,
  so every process draws the same masks for a seed.
* magnitude / gradient: floor((1 - explore) k + 0.5) coordinates by score -- |w_i|, or (gradient)
  the magnitude of coordinate i's last observed aggregated change |w_new,i - w_old,i| (kept while
  i is unmasked; +inf for a coordinate never yet synced, so every coordinate is reached) -- ties to
  the lower index; the rest of the k drawn at random (same (seed, round) generator) from the other
  coordinates. Round 0 of gradient is random. Without the exploration and the +inf score the
  score masks freeze: unmasked coordinates never change, so the same top-k wins round after round
  (magnitude with explore = 0 does exactly that).

Protocol: client k keeps a persistent local model x_k (a full copy of w at its first
participation). Each round ``x_k[M] <- w[M]``; it trains all coordinates from x_k; x_k becomes the
trained model; it sends ``x_k[M] - w[M]``. The server aggregates only the masked coordinates (the
defense sees the (S, k) sub-matrix, the masked global model and reference); unmasked coordinates
keep their value. With p = 1 (or on a full-sync round) this is FedAvg exactly.

Error floor: a client's unmasked coordinates keep its own trained values, so it takes its
gradient at a point that has drifted from w by O(local_lr x its gradient at w*). Near w* the
clients' rows therefore do not average to zero -- they carry a bias of order
local_lr x (client heterogeneity) x (Hessian variation across clients) -- and w stalls at a
distance from w* that grows with the local learning rate (and the number of local steps) and
vanishes as it goes to 0. FedAvg on the same problem has no such floor with one local step.
``tests/federation/test_psfed.py`` measures it (ridge, p = 0.5: the floor at local_lr 0.1 is larger than at
0.03, which stays under 1e-3 relative drift).

Communication (bytes, 4 per float32 value, whatever the simulation dtype), per round with S the
participants, ``new`` those taking part for the first time, R the rows received::

    down = (|S| - new) k 4 + new P 4 + mask cost      (a first-time client downloads all of w once)
    up   = |R| k 4                                     (every row received, valid or not)
    mask cost = 8 |S| for a seeded random mask (mask = random, and round 0 of gradient),
                else |S| min(ceil(P/8), ceil(k ceil(log2 P) / 8))   (bitmap or index list)
    full-sync round: what FedAvg costs.      FedAvg: |S| P 4 down + |R| P 4 up.

Stats: ``bytes_down``, ``bytes_up``, ``bytes_down_cumulative``, ``bytes_up_cumulative``,
``compression`` (cumulative FedAvg bytes / cumulative PSFed bytes), ``coverage`` (fraction of
coordinates synced at least once; random: expectation 1 - (1 - p)^t), ``max_staleness`` (at the
end of the round, the largest number of consecutive rounds any coordinate has gone unsynced --
counting from the start for a coordinate never synced), ``mask_size`` (k this round).

State: the persistent local models are K_total x P, allocated at :meth:`setup`, which refuses
(ConfigError naming the memory needed) beyond half of the machine's memory.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from .. import params
from .base import Sharing
from .feddyn import check_state_memory

BYTES_PER_VALUE = 4


def round_generator(seed: int, t: int) -> torch.Generator:
    """The mask generator of round t: a function of (seed, t) only (identical in every process)."""
    digest = hashlib.sha256(f"robustfl:psfed:{seed}:{t}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def mask_cost(num_dim: int, k: int, seeded: bool) -> int:
    """Bytes per client to tell it the mask: a seed, or the cheaper of a bitmap and an index list."""
    if seeded:
        return 8
    return min(math.ceil(num_dim / 8), math.ceil(k * math.ceil(math.log2(num_dim)) / 8)) if num_dim > 1 else 0


@dataclass
class PSFed(Sharing):
    """Partial sharing with persistent local models ``x`` (K_total, P)."""

    fraction: float = 0.5
    mask: str = "random"
    explore: float = 0.5
    full_sync_every: int = 0
    seed: int = 0
    name = "psfed"
    common_start: ClassVar[bool] = False  # participants start from their own partly synced models
    takes_seed: ClassVar[bool] = True  # its masks are drawn from the cell's seed
    masks: ClassVar[tuple[str, ...]] = ("random", "magnitude", "gradient")
    x: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        c = f"sharing {self.name}"
        self.fraction = params.number(c, "fraction", self.fraction, low=0, high=1)
        params.choice(c, "mask", self.mask, self.masks)
        self.explore = params.number(c, "explore", self.explore, low=0, high=1)
        params.number(c, "full_sync_every", self.full_sync_every, low=0, integer=True)
        params.number(c, "seed", self.seed, integer=True)

    def state_bytes(self, num_clients: int, dim: int, itemsize: int) -> int:
        return num_clients * dim * itemsize

    # -- round protocol ----------------------------------------------------------------------
    def setup(self, *, num_clients: int, w0: Tensor, generator: torch.Generator) -> None:
        p_dim, dev = w0.numel(), w0.device
        size = w0.element_size()
        what = f"persistent local models ({num_clients} clients x {p_dim} parameters x {size} bytes)"
        check_state_memory("sharing psfed", what, self.state_bytes(num_clients, p_dim, size), dev)
        self.dim, self.num_clients = p_dim, num_clients
        self.k = int(math.floor(self.fraction * p_dim + 0.5))
        self.x = torch.zeros(num_clients, p_dim, dtype=w0.dtype, device=dev)
        self.seen = torch.zeros(num_clients, dtype=torch.bool, device=dev)
        self.last_sync = torch.full((p_dim,), -1, dtype=torch.long, device=dev)
        self.change = torch.full((p_dim,), math.inf, dtype=torch.float64, device=dev)
        self.coords: Tensor | None = None
        self.round, self.participants, self.new = -1, 0, torch.zeros(0, dtype=torch.bool, device=dev)
        self.cum_down = self.cum_up = self.cum_fedavg = 0
        self._stats: dict[str, float] = {}
        self._down = self._down_fedavg = 0

    def full_sync(self, t: int) -> bool:
        return self.full_sync_every > 0 and (t + 1) % self.full_sync_every == 0

    def seeded(self, t: int) -> bool:
        """Whether round t's mask is a seeded random one (mask random, or round 0 of gradient)."""
        return self.mask == "random" or (self.mask == "gradient" and t == 0)

    def select(self, t: int, w: Tensor) -> Tensor:
        """Round t's mask: k sorted coordinate indices, on w's device."""
        p_dim, k = self.dim, self.k
        g = round_generator(self.seed, t)
        if self.seeded(t):
            return torch.randperm(p_dim, generator=g)[:k].sort().values.to(w.device)
        by_score = int(math.floor((1 - self.explore) * k + 0.5))
        score = w.detach().abs().double() if self.mask == "magnitude" else self.change  # never synced: +inf
        order = torch.sort(score, descending=True, stable=True).indices  # ties: lower index first
        top, rest = order[:by_score], order[by_score:]
        pick = torch.randperm(rest.numel(), generator=g)[: k - by_score].to(rest.device)
        return torch.cat([top, rest[pick]]).sort().values

    def begin_round(self, t: int, w: Tensor, ids: Tensor) -> Tensor | None:
        self.round, self.participants = t, ids.numel()
        self.new = ~self.seen[ids]
        s, new, p_dim, k = self.participants, int(self.new.sum()), self.dim, self.k
        self._down_fedavg = s * p_dim * BYTES_PER_VALUE
        if self.full_sync(t):
            self.coords, self._down = None, self._down_fedavg
            return None
        # k = P: the mask holds every coordinate, which is sharing all (None keeps it bit-identical)
        self.coords = None if k == p_dim else self.select(t, w)
        mask_bytes = s * mask_cost(p_dim, k, self.seeded(t))
        self._down = ((s - new) * k + new * p_dim) * BYTES_PER_VALUE + mask_bytes
        return self.coords

    def start_points(self, w: Tensor, ids: Tensor) -> Tensor:
        self.seen[ids] = True
        if self.coords is None:  # every coordinate synced: x_k <- w
            return w.expand(ids.numel(), -1).clone()
        xs = self.x.index_select(0, ids)
        xs[self.new] = w  # first participation: a full copy of w
        xs[:, self.coords] = w[self.coords]
        return xs

    def rows(self, theta: Tensor, w: Tensor, ids: Tensor) -> Tensor:
        """``theta`` is the engine's fresh output: it becomes x_k, then (all shared) is consumed in place."""
        self.x.index_copy_(0, ids, theta.to(self.x.dtype))
        return theta.sub_(w) if self.coords is None else theta[:, self.coords] - w[self.coords]

    def restrict(self, v: Tensor) -> Tensor:
        return v if self.coords is None else v.index_select(0, self.coords)

    def expand(self, vec: Tensor) -> Tensor:
        if self.coords is None:
            return vec
        out = torch.zeros(self.dim, dtype=vec.dtype, device=vec.device)
        return out.index_copy_(0, self.coords, vec)

    def end_round(self, w_old: Tensor, w_new: Tensor, received: int) -> None:
        t, k = self.round, self.dim if self.coords is None else self.k
        synced = slice(None) if self.coords is None else self.coords
        self.change[synced] = (w_new[synced] - w_old[synced]).abs().double()
        self.last_sync[synced] = t
        up = received * k * BYTES_PER_VALUE
        self.cum_down += self._down
        self.cum_up += up
        self.cum_fedavg += self._down_fedavg + received * self.dim * BYTES_PER_VALUE
        total = self.cum_down + self.cum_up
        self._stats = {
            "bytes_down": float(self._down),
            "bytes_up": float(up),
            "bytes_down_cumulative": float(self.cum_down),
            "bytes_up_cumulative": float(self.cum_up),
            "compression": self.cum_fedavg / total if total else math.inf,
            "coverage": float((self.last_sync >= 0).double().mean()) if self.dim else 1.0,
            "max_staleness": float(t - int(self.last_sync.min())) if self.dim else 0.0,
            "mask_size": float(k),
        }

    def stats(self) -> dict[str, float]:
        return dict(self._stats)
