"""Per-round metrics (the contract's METRICS), as pure functions of one round's tensors."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..tasks.base import Problem
from ..types import Aggregate

_CHUNK = 1 << 16


def _norm(v: Tensor) -> float:
    return float(torch.linalg.vector_norm(v.double()))


def detection(weights: Tensor | None, byz: Tensor) -> tuple[float | None, float | None]:
    """(precision, recall) of 'weight exactly zero' as a Byzantine flag; None where undefined."""
    if weights is None:
        return None, None
    flagged = weights == 0
    hits = int((flagged & byz).sum())
    n_flag, n_byz = int(flagged.sum()), int(byz.sum())
    precision = hits / n_flag if n_flag else None
    recall = hits / n_byz if n_byz else None
    return precision, recall


def aggregation_error(vector: Tensor, updates: Tensor, honest: Tensor) -> float | None:
    """||A(U) - mean(H)|| / sqrt(mean_h ||h - mean(H)||^2) over the honest rows (mask ``honest``).

    Accumulated in float64 over column chunks: no (K, P) copy, whatever P is.
    """
    n = int(honest.sum())
    if n == 0:
        return None
    h_idx = honest.nonzero().squeeze(1)
    num = 0.0
    spread = 0.0
    for lo in range(0, updates.shape[1], _CHUNK):
        h = updates[:, lo : lo + _CHUNK].index_select(0, h_idx).double()
        mu = h.mean(0)
        spread += float(torch.linalg.vector_norm(h.sub_(mu)).square()) / n  # h is our copy
        num += float(torch.linalg.vector_norm(vector[lo : lo + _CHUNK].double() - mu).square())
    if not spread > 0 or not math.isfinite(spread) or not math.isfinite(num):
        return None
    return math.sqrt(num) / math.sqrt(spread)


def round_metrics(
    t: int,
    w: Tensor,
    w_ref: Tensor | None,
    d0: float,
    f_ref: float,
    problem: Problem,
    agg: Aggregate,
    updates: Tensor,
    byz: Tensor,
    backdoor: tuple[Tensor, Tensor] | None,
    sybil_rows: Tensor | None = None,
) -> dict[str, Any]:
    m: dict[str, Any] = {"round": t}
    finite = bool(torch.isfinite(w).all())
    if w_ref is not None and finite:
        drift = _norm(w - w_ref)
        m["drift"] = drift
        m["relative_drift"] = drift / d0 if d0 > 0 else None
        with torch.no_grad():
            m["loss_gap"] = problem.objective(w) - f_ref
    if finite and problem.info.num_classes is not None:
        m["accuracy"] = problem.accuracy(w)
        if backdoor is not None and problem.predict is not None:
            with torch.no_grad():
                m["attack_success_rate"] = float(
                    (problem.predict(w, backdoor[0]) == backdoor[1]).double().mean()
                )
    weights = agg.weights
    if weights is not None:
        wt = weights.double()
        m["byzantine_weight"] = float(wt[byz].sum())
        m["detection_precision"], m["detection_recall"] = detection(wt, byz)
        if sybil_rows is not None:
            m["sybil_weight"] = float(wt[sybil_rows].sum())
    m["aggregation_error"] = aggregation_error(agg.vector, updates, ~byz)
    return m
