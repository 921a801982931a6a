"""The statistics of ``robustfl bound``: the fitted slopes and rates, and the lemma tallies.

* :func:`loglog_slope` -- OLS slope of log y on log x with a t-based 95 % interval (per-group
  intercepts, e.g. one per seed): the root error's and the error floor's dependence on |D0|.
* :func:`linear_rate` -- the per-round rate of the first phase of a trajectory.
* :class:`Tally` -- Lemma 1 and Lemma 2 checked on every FLTrust round (a violation when
  LHS > RHS (1 + ``TOL``)), with the largest ratios and root error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

TOL = 1e-9  # relative tolerance of the lemma checks
PHASE = 3.0  # the first phase: rounds whose error exceeds PHASE times the floor


def loglog_slope(x: Any, y: Any, groups: Any = None) -> dict[str, Any]:
    """OLS slope of log(y) on log(x) with a t-based 95% interval; ``groups`` (e.g. seeds) get their
    own intercepts. Non-positive or non-finite points are dropped."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ga = np.zeros(len(xa), dtype=int) if groups is None else np.asarray(groups)
    keep = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0)
    lx, ly, ga = np.log(xa[keep]), np.log(ya[keep]), ga[keep]
    n, ng = len(lx), len(np.unique(ga)) if len(ga) else 0
    out: dict[str, Any] = {"estimate": None, "ci95": [None, None], "points": int(n)}
    if n - ng < 2 or len(np.unique(lx)) < 2:
        return out
    for gval in np.unique(ga):
        sel = ga == gval
        lx[sel] -= lx[sel].mean()
        ly[sel] -= ly[sel].mean()
    sxx = float(lx @ lx)
    slope = float(lx @ ly) / sxx
    resid = ly - slope * lx
    dof = n - ng - 1
    se = math.sqrt(float(resid @ resid) / dof / sxx) if dof > 0 else math.inf
    half = float(sps.t.ppf(0.975, dof)) * se if dof > 0 else math.inf
    out.update(estimate=slope, ci95=[slope - half, slope + half], stderr=se)
    return out


def linear_rate(errors: np.ndarray, phase: float = PHASE) -> dict[str, Any]:
    """Per-round rate exp(slope) of log error over the first phase: from round 0 until the error
    first falls to ``phase`` times the floor (the median of the last fifth of the rounds)."""
    e = np.asarray(errors, dtype=float)
    out: dict[str, Any] = {"estimate": None, "ci95": [None, None], "rounds_fitted": 0, "floor": None}
    if len(e) < 5 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        return out
    floor = float(np.median(e[-max(1, len(e) // 5) :]))
    below = np.nonzero(e <= phase * floor)[0]
    end = int(below[0]) if len(below) else len(e)
    out["floor"] = floor
    out["rounds_fitted"] = end
    if end < 3:
        return out
    t, le = np.arange(end, dtype=float), np.log(e[:end])
    res = sps.linregress(t, le)
    half = float(sps.t.ppf(0.975, end - 2)) * float(res.stderr)
    out.update(
        estimate=math.exp(res.slope),
        ci95=[math.exp(res.slope - half), math.exp(res.slope + half)],
    )
    return out


@dataclass
class Tally:
    """The lemma checks of a set of FLTrust trajectories: rounds, violations, worst LHS/RHS ratios."""

    rounds: int = 0
    violations1: int = 0
    violations2: int = 0
    max_ratio1: float = 0.0
    max_ratio2: float = 0.0
    max_root_error: float = 0.0

    def add(self, checks: np.ndarray | None) -> None:
        if checks is None or len(checks) == 0:
            return
        lhs1, rhs1, lhs2, rhs2, root = checks.T
        self.rounds += len(checks)
        self.violations1 += int(np.sum(~(lhs1 <= rhs1 * (1 + TOL))))
        self.violations2 += int(np.sum(~(lhs2 <= rhs2 * (1 + TOL))))
        with np.errstate(divide="ignore", invalid="ignore"):
            r1 = np.where(rhs1 > 0, lhs1 / rhs1, np.where(lhs1 > 0, np.inf, 0.0))
            r2 = np.where(rhs2 > 0, lhs2 / rhs2, np.where(lhs2 > 0, np.inf, 0.0))
        self.max_ratio1 = max(self.max_ratio1, float(np.max(r1)))
        self.max_ratio2 = max(self.max_ratio2, float(np.max(r2)))
        self.max_root_error = max(self.max_root_error, float(np.max(root)))

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "lemma1_violations": self.violations1,
            "lemma1_max_ratio": self.max_ratio1,
            "lemma2_violations": self.violations2,
            "lemma2_max_ratio": self.max_ratio2,
            "max_root_error": self.max_root_error,
        }
