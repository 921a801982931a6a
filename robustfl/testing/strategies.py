"""Hypothesis strategies for update matrices, for robustfl's tests and plugin authors' tests.

* :func:`update_matrices` -- (K, P) float tensors. ``generic=True`` (default) draws the shape, a
  scale and a seed and fills the rows from a seeded Gaussian (plus a shared offset), so ties and
  symmetric configurations have probability zero: use it for properties that hold "up to ties"
  (permutation invariance of a selection rule). ``generic=False`` lets Hypothesis choose every
  entry (zeros, duplicates, ties, mixed magnitudes): use it for properties that always hold.
* :func:`scales` -- the magnitudes the project tests at: 1e-10, 1e-5, 1, 1e5, 1e12.
* :func:`with_byzantine` -- honest rows with f of them replaced, at Hypothesis-chosen positions,
  by Hypothesis-chosen values up to ``max_abs`` (default 1e12); returns (matrix, honest indices).
* :func:`gaussian_rows` -- the seeded Gaussian fill on its own (defined in
  ``robustfl.testing.defenses``, which needs no Hypothesis).
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from .defenses import gaussian_rows

SCALES: tuple[float, ...] = (1e-10, 1e-5, 1.0, 1e5, 1e12)


def scales() -> st.SearchStrategy[float]:
    return st.sampled_from(SCALES)


@st.composite
def update_matrices(
    draw: Any,
    min_k: int = 1,
    max_k: int = 12,
    min_p: int = 1,
    max_p: int = 16,
    scale: float | None = None,
    dtype: torch.dtype = torch.float64,
    generic: bool = True,
) -> Tensor:
    """A (K, P) tensor with K in [min_k, max_k], P in [min_p, max_p] (see the module docstring)."""
    k = draw(st.integers(min_k, max_k))
    p = draw(st.integers(min_p, max_p))
    s = scale if scale is not None else draw(scales())
    if generic:
        return gaussian_rows(k, p, seed=draw(st.integers(0, 2**32 - 1)), scale=s, dtype=dtype)
    unit = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False, allow_subnormal=False)
    values = draw(st.lists(unit, min_size=k * p, max_size=k * p))
    return (torch.tensor(values, dtype=torch.float64).reshape(k, p) * s).to(dtype)


@st.composite
def with_byzantine(draw: Any, honest: Tensor, f: int, max_abs: float = 1e12) -> tuple[Tensor, Tensor]:
    """Insert f Byzantine rows among ``honest`` rows: returns (all K = H + f rows, honest indices).

    Each Byzantine row is either entry-wise arbitrary (floats in [-max_abs, max_abs]), a constant
    row, or a scaled honest row (with a Hypothesis-chosen factor up to max_abs in size).
    """
    h, p = honest.shape
    k = h + f
    rows = []
    for _ in range(f):
        kind = draw(st.sampled_from(["arbitrary", "constant", "scaled"]))
        big = st.floats(-max_abs, max_abs, allow_nan=False, allow_infinity=False)
        if kind == "arbitrary":
            row = torch.tensor(draw(st.lists(big, min_size=p, max_size=p)), dtype=torch.float64)
        elif kind == "constant":
            row = torch.full((p,), draw(big), dtype=torch.float64)
        else:
            row = honest[draw(st.integers(0, h - 1))].to(torch.float64) * draw(big)
        rows.append(row.to(honest.dtype))
    positions = draw(st.permutations(range(k)))
    byz_pos = torch.tensor(sorted(positions[:f]), dtype=torch.long)
    honest_pos = torch.tensor(sorted(positions[f:]), dtype=torch.long)
    out = torch.empty(k, p, dtype=honest.dtype)
    out[honest_pos] = honest
    if f:
        out[byz_pos] = torch.stack(rows)
    return out, honest_pos
