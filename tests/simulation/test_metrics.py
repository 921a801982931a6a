"""Metrics against numpy transcriptions of the contract's formulas."""

from __future__ import annotations

import numpy as np
import torch

from robustfl.simulation.metrics import aggregation_error, detection


def test_aggregation_error_matches_numpy() -> None:
    g = torch.Generator().manual_seed(0)
    u = torch.randn(9, 70_000, generator=g, dtype=torch.float32)  # more columns than one chunk
    honest = torch.tensor([1, 1, 0, 1, 1, 0, 1, 1, 1], dtype=torch.bool)
    vec = torch.randn(70_000, generator=g)
    h = u.numpy().astype(np.float64)[honest.numpy()]
    mu = h.mean(0)
    ref = np.linalg.norm(vec.numpy().astype(np.float64) - mu) / np.sqrt(((h - mu) ** 2).sum(1).mean())
    assert abs(aggregation_error(vec, u, honest) - ref) <= 1e-10 * ref


def test_aggregation_error_undefined_cases() -> None:
    u = torch.ones(4, 3)
    assert aggregation_error(torch.zeros(3), u, torch.zeros(4, dtype=torch.bool)) is None
    assert aggregation_error(torch.zeros(3), u, torch.ones(4, dtype=torch.bool)) is None  # no spread


def test_detection_precision_recall_by_hand() -> None:
    w = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0])
    byz = torch.tensor([True, False, False, False, True])
    p, r = detection(w, byz)
    assert p == 2 / 3 and r == 1.0
    assert detection(torch.tensor([0.5, 0.5]), torch.tensor([False, False])) == (None, None)
    assert detection(None, byz) == (None, None)
