"""Bucketing: average the rows in random buckets of size s before the rule.

Paper: Karimireddy, He, Jaggi, "Byzantine-Robust Learning on Heterogeneous Datasets via Bucketing",
ICLR 2022

A random permutation of the K rows (``torch.randperm(K, generator=ctx.generator)``; a fresh
generator seeded 0 when the context has none) is cut into consecutive buckets of ``size`` s
(default 2; the last bucket may be smaller) and each bucket is averaged: one GEMM with the
(K', K) averaging matrix, which reads U once (rows with non-finite entries take the exact
per-bucket mean instead, so a NaN stays in its bucket). The rule then sees K' = ceil(K / s)
rows with f' = min(f, K') -- each Byzantine row can spoil one bucket, so the Byzantine fraction
grows up to s-fold. Linear: the next stage's weight on a bucket is shared equally by its rows
(the pullback). The new context has ``client_ids = None`` (rows are buckets) and
``num_samples`` summed per bucket.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ... import params
from ...kernels import check_updates
from ...types import DefenseContext
from .._select import f_hat, generator_for
from . import Pre, Pullback


@dataclass
class Bucketing(Pre):
    size: int = 2
    name = "bucketing"
    fresh_output = True
    preserves = frozenset(
        {"translation_equivariant", "scale_equivariant", "convex_combination", "coordinate_bounded"}
    )

    def __post_init__(self) -> None:
        params.number(f"pre-aggregator {self.name}", "size", self.size, low=1, integer=True)

    def transform_counts(self, k: int, f_hat: int) -> tuple[int, int]:
        kb = math.ceil(k / self.size)
        return kb, min(f_hat, kb)

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> tuple[Tensor, DefenseContext, Pullback]:
        check_updates(updates, self.name)
        k, p = updates.shape
        s = self.size
        g = generator_for(ctx)
        perm = torch.randperm(k, generator=g, device=g.device).to(updates.device)
        kb, fb = self.transform_counts(k, f_hat(ctx))
        bucket_of = torch.empty(k, dtype=torch.long, device=updates.device)
        bucket_of[perm] = torch.arange(k, device=updates.device) // s
        sizes = torch.bincount(bucket_of, minlength=kb)
        # one (K', K) averaging matrix: a single GEMM reads U once (a gather would copy it first)
        avg = torch.zeros(kb, k, dtype=updates.dtype, device=updates.device)
        avg[bucket_of, torch.arange(k, device=updates.device)] = 1.0 / sizes[bucket_of].to(updates.dtype)
        buckets = avg @ updates
        # 0 * inf = NaN would reach every bucket. One sum is the cheap test (an overflowing sum
        # of finite entries only takes the exact path needlessly)
        if not math.isfinite(float(buckets.sum())):
            q = k // s
            parts = [updates[perm[: q * s]].view(q, s, p).mean(1)]
            if q * s < k:
                parts.append(updates[perm[q * s :]].mean(0, keepdim=True))
            buckets = torch.cat(parts)
        samples = ctx.num_samples
        if samples is not None:
            samples = torch.zeros(kb, dtype=samples.dtype, device=samples.device).index_add_(
                0, bucket_of.to(samples.device), samples
            )
        new_ctx = dataclasses.replace(ctx, assumed_byzantine=fb, client_ids=None, num_samples=samples)

        def pullback(weights: Tensor) -> Tensor:
            idx = bucket_of.to(weights.device)
            return weights[idx] / sizes.to(weights.device)[idx].to(weights.dtype)

        return buckets, new_ctx, pullback
