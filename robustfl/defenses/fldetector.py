"""FLDetector: flag clients whose updates are inconsistent with an L-BFGS prediction across rounds,
then aggregate the unflagged rows with a robust rule.

Paper: Zhang, Fang, Cao, Gong, Wang (Zaixi Zhang, Xiaoyu Cao, Jinyuan Jia, Neil Gong), "FLDetector:
Defending Federated Learning Against Model Poisoning Attacks via Detecting Malicious Clients",
KDD 2022. Authors' code: github.com/zaixizhang/FLDetector (``train_mnist.py``: ``lbfgs``,
``detection1`` (gap statistic), ``detection`` (k-means, k = 2); ``nd_aggregation.py``).

Per call t (calls counted since ``reset()``; one call per round), with w_t = ``ctx.global_model``:
1. Hessian-vector product by L-BFGS (Byrd-Nocedal-Schnabel compact form, as the authors' ``lbfgs``)
   from the last ``window`` pairs (s_r = w_r - w_{r-1}, y_r = g_r - g_{r-1}), g_r this rule's
   aggregate of round r: with S = [s], Y = [y], A = S^T Y, L its strictly lower part, D its
   diagonal, sigma = y_last^T s_last / s_last^T s_last,
   ``Hv = sigma v - [sigma S, Y] M^{-1} [sigma S^T v; Y^T v]``, ``M = [[sigma S^T S, L], [L^T, -D]]``,
   v = w_t - w_{t-1} (M^{-1} by a pseudo-inverse where M is singular; pairs with s = 0 are skipped).
   Rows here are model updates (a negative multiple of a gradient): the pairs then describe that
   multiple of the Hessian, and every distance below scales alike, so the scores are unchanged.
2. Prediction for each client i that also sent a row in round t-1: ``ghat_i = g_{t-1}^i + Hv``;
   ``d_i = ||ghat_i - g_t^i||``, normalised ``d_i / sum_j d_j`` over the clients scored this round
   (as the authors' code). Predictions start at t > ``warmup`` (default 50: the authors' code
   computes the product from epoch 51) and need at least one pair.
3. Suspicious score: the mean of a client's normalised distances over the last ``window`` calls
   (default N = 10, the paper's and the code's buffer size).
4. Detection, once ``window`` calls have been scored, over the present unflagged clients with a
   score (at least 3): the scores min-max normalised to [0, 1]; the gap statistic as in the
   authors' ``detection1``: k = 1 .. min(7, n - 1), W_k the k-means within-cluster sum of squares,
   10 reference sets uniform on [0, 1] drawn from the round's generator (``ctx.generator``; a fresh
   one seeded 0 without it), ``gap_k = log(mean W_ref) - log(W_k)``,
   ``sd_k = sqrt(1 + 1/10) std(log W_ref)``; the number of clusters is the first k with
   ``gap_k >= gap_{k+1} - sd_{k+1}`` (the largest k if none). More than one cluster: k-means with
   k = 2, the cluster with the larger mean score is malicious. k-means is the exact optimum in one
   dimension (dynamic programming over the sorted scores), deterministic, where the authors call
   scikit-learn's randomly initialised KMeans. Equal scores everywhere: no attack.
5. Flagged clients are removed for good (the paper removes detected clients), until ``reset()``.
6. ``rule`` (a defense spec, default ``"median"``: the authors' code's ``--aggregation`` default)
   aggregates the unflagged rows with f-hat lowered by the number of flagged rows removed this
   round; weights are pulled back to the K rows (flagged rows 0), None if the rule gives none. All
   rows flagged: the zero update, zero weights.

State kept (float64, P = the model size): the previous global model and aggregate (2P), the last
``window`` pairs (2 window P), the previous round's rows keyed by ``ctx.client_ids`` (K P), each
client's normalised distances of the last ``window`` calls, the flagged ids. ``reset()`` clears it
all (the property suite checks it). Partial sharing (``ctx.coordinates``) is refused. Needs
``ctx.global_model``; ``ctx.client_ids``, when given, must hold K distinct ids (an InputError
otherwise). Guarantee: none of its own in terms of f; the final rule's (``min_clients``
is the rule's). Stats: ``num_flagged`` (all so far), ``num_excluded`` (rows removed this round),
``attack_detected``, ``num_scored``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .. import params
from ..capabilities import DefenseBase
from ..errors import InputError
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, generator_for, round_ids

NREFS = 10
MAX_K = 7
_KEEP = frozenset(
    {"permutation_invariant", "translation_equivariant", "scale_equivariant", "convex_combination",
     "coordinate_bounded"}
)


def lbfgs_hvp(s_list: list[Tensor], y_list: list[Tensor], v: Tensor) -> Tensor:
    """The compact L-BFGS approximation B v from the pairs (s_r, y_r), B s_r ~ y_r (float64)."""
    s, y = torch.stack(s_list, 1), torch.stack(y_list, 1)  # (P, m)
    sty, sts = s.T @ y, s.T @ s
    low = torch.tril(sty, diagonal=-1)
    sigma = float(y_list[-1] @ s_list[-1]) / float(s_list[-1] @ s_list[-1])
    lower = torch.cat([low.T, -torch.diag(torch.diag(sty))], 1)
    mat = torch.cat([torch.cat([sigma * sts, low], 1), lower], 0)
    rhs = torch.cat([s.T @ (sigma * v), y.T @ v])
    return sigma * v - torch.cat([sigma * s, y], 1) @ (torch.linalg.pinv(mat) @ rhs)


def kmeans_1d(x: np.ndarray, k: int) -> tuple[float, int]:
    """Exact 1-D k-means on sorted ``x``: (the least within-cluster sum of squares, and for k = 2
    the first index of the upper cluster). Dynamic programming over prefix sums."""
    n = len(x)
    c1, c2 = np.concatenate([[0.0], np.cumsum(x)]), np.concatenate([[0.0], np.cumsum(x * x)])

    def cost(i: np.ndarray, j: int) -> np.ndarray:  # SS of x[i:j] for every i in the array
        cnt = j - i
        return c2[j] - c2[i] - (c1[j] - c1[i]) ** 2 / np.maximum(cnt, 1)

    best = np.array([cost(np.array([0]), j)[0] for j in range(n + 1)])
    split = 0
    for kk in range(2, k + 1):
        new = np.full(n + 1, np.inf)
        for j in range(kk, n + 1):
            i = np.arange(kk - 1, j)
            tot = best[i] + cost(i, j)
            a = int(np.argmin(tot))
            new[j] = tot[a]
            if kk == 2 and j == n:
                split = int(i[a])
        best = new
    return float(max(best[n], 0.0)), split


def clusters_by_gap(scores: np.ndarray, ref: np.ndarray) -> int:
    """The gap statistic's number of clusters for the scores (authors' detection1, exact k-means)."""
    n = len(scores)
    x = np.sort((scores - scores.min()) / (scores.max() - scores.min()))
    ks = range(1, min(MAX_K, n - 1) + 1)
    gaps, sds = [], []
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in ks:
            wk = kmeans_1d(x, k)[0]
            wref = np.array([kmeans_1d(np.sort(r), k)[0] for r in ref])
            gaps.append(float(np.log(np.mean(wref)) - np.log(wk)))
            sds.append(float(math.sqrt((1.0 + NREFS) / NREFS) * np.std(np.log(wref))))
    for i in range(len(gaps) - 1):
        if gaps[i] - gaps[i + 1] + sds[i + 1] >= 0:
            return i + 1
    return len(gaps)


@dataclass
class FLDetector(Rule):
    rule: Any = "median"
    window: int = 10
    warmup: int = 50
    name = "fldetector"
    _inner: DefenseBase = field(init=False, repr=False, compare=False)
    _t: int = field(default=0, init=False, repr=False, compare=False)
    _scored: int = field(default=0, init=False, repr=False, compare=False)
    _w: Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _g: Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _pairs: deque[tuple[Tensor, Tensor]] = field(default_factory=deque, init=False, repr=False, compare=False)
    _rows: dict[int, Tensor] = field(default_factory=dict, init=False, repr=False, compare=False)
    _dist: dict[int, deque[tuple[int, float]]] = field(default_factory=dict, init=False, repr=False,
                                                       compare=False)
    _flagged: set[int] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from .compose import build_defense

        params.number(f"defense {self.name}", "window", self.window, low=1, integer=True)
        params.number(f"defense {self.name}", "warmup", self.warmup, low=0, integer=True)
        if not isinstance(self.rule, str | dict) or self.rule in ("fldetector", {"name": "fldetector"}):
            raise params.error(f"defense {self.name}", "rule", "a defense name or table (not fldetector)",
                               self.rule)
        self._inner = build_defense(self.rule)[1]

    @property
    def properties(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(self._inner.properties) & _KEEP

    def min_clients(self, f_hat: int) -> int:
        return int(self._inner.min_clients(f_hat))

    def admits(self, k: int, f_hat: int) -> bool:
        return bool(self._inner.admits(k, f_hat))

    def reset(self) -> None:
        self._t, self._scored, self._w, self._g = 0, 0, None, None
        self._pairs, self._rows, self._dist, self._flagged = deque(), {}, {}, set()
        self._inner.reset()

    def _score(self, u: Tensor, ids: list[int], w: Tensor, t: int) -> int:
        """Steps 1-3 for this round's (float64) rows; returns how many clients were scored."""
        if t <= self.warmup or not self._pairs or self._w is None:
            return 0
        hv = lbfgs_hvp([p[0] for p in self._pairs], [p[1] for p in self._pairs], w - self._w)
        who = [j for j, i in enumerate(ids) if i in self._rows and i not in self._flagged]
        if not who:
            return 0
        pred = torch.stack([self._rows[ids[j]] for j in who]) + hv
        d = torch.linalg.vector_norm(pred - u[who], dim=1)
        total = float(d.sum())
        norm = (d / total if total > 0 and math.isfinite(total) else torch.zeros_like(d)).tolist()
        for j, dj in zip(who, norm, strict=True):
            hist = self._dist.setdefault(ids[j], deque())
            hist.append((t, dj))
        return len(who)

    def _detect(self, ids: list[int], t: int, gen: torch.Generator) -> bool:
        """Steps 3-5: flag the malicious cluster among the present unflagged scored clients."""
        cand, sc = [], []
        for i in ids:
            hist = self._dist.get(i)
            while hist and hist[0][0] <= t - self.window:
                hist.popleft()
            if hist and i not in self._flagged:
                cand.append(i)
                sc.append(sum(v for _, v in hist) / len(hist))
        if self._scored < self.window or len(cand) < 3:
            return False
        x = np.asarray(sc, dtype=np.float64)
        if not np.all(np.isfinite(x)) or x.max() == x.min():
            return False
        ref = torch.rand(NREFS, len(x), generator=gen, dtype=torch.float64, device=gen.device).cpu().numpy()
        if clusters_by_gap(x, ref) <= 1:
            return False
        xn = (x - x.min()) / (x.max() - x.min())
        order = np.argsort(xn, kind="stable")
        split = kmeans_1d(xn[order], 2)[1]
        self._flagged.update(cand[int(j)] for j in order[split:])
        return True

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, p = updates.shape
        if ctx.coordinates is not None:
            raise InputError(f"{self.name}: partial sharing (ctx.coordinates) is not supported")
        if ctx.global_model is None or tuple(ctx.global_model.shape) != (p,):
            raise InputError(f"{self.name}: needs ctx.global_model of shape ({p},)")
        ids = round_ids(ctx, k, self.name)
        if ctx.num_samples is not None and ctx.num_samples.shape[0] != k:
            raise InputError(f"{self.name}: ctx.num_samples must hold one count per row (K = {k}), "
                             f"got {ctx.num_samples.shape[0]}")
        w = ctx.global_model.detach().to(dtype=torch.float64, device="cpu").clone()
        if self._w is not None and self._w.shape != w.shape:
            self.reset()
        t = self._t
        u = updates.detach().to(dtype=torch.float64, device="cpu")
        finite = torch.isfinite(row_norms(u))
        scored = self._score(u, ids, w, t) if bool(finite.all()) else 0
        self._scored += scored > 0
        detected = self._detect(ids, t, generator_for(ctx))
        keep = [j for j, i in enumerate(ids) if i not in self._flagged]
        removed = k - len(keep)
        weights: Tensor | None
        if not keep:
            vector, weights = updates.new_zeros(p), updates.new_zeros(k)
            inner_stats: dict[str, float] = {}
        else:
            idx = torch.tensor(keep, device=updates.device)
            sub = dataclasses.replace(
                ctx,
                assumed_byzantine=max(0, int(ctx.assumed_byzantine) - removed),
                client_ids=None if ctx.client_ids is None else ctx.client_ids[idx.cpu()],
                num_samples=None if ctx.num_samples is None else ctx.num_samples[idx.cpu()],
            )
            agg = self._inner(updates if removed == 0 else updates[idx], sub)
            vector, inner_stats = agg.vector, dict(agg.stats)
            weights = agg.weights
            if weights is not None and removed:
                full = updates.new_zeros(k)
                full[idx] = weights.to(updates.dtype)
                weights = full
        g = vector.detach().to(dtype=torch.float64, device="cpu").clone()
        if self._w is not None and self._g is not None and float((w - self._w).square().sum()) > 0:
            self._pairs.append((w - self._w, g - self._g))
            while len(self._pairs) > self.window:
                self._pairs.popleft()
        self._w, self._g, self._t = w, g, t + 1
        self._rows = {i: u[j].clone() for j, i in enumerate(ids) if bool(finite[j])}
        stats = {
            **inner_stats,
            "num_flagged": float(len(self._flagged)),
            "num_excluded": float(removed),
            "attack_detected": float(detected),
            "num_scored": float(scored),
        }
        return Aggregate(vector, weights, stats)
