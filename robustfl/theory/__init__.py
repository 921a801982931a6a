"""FLTrust's error bound (Cao et al., NDSS 2021, Theorem 1) checked empirically (docs/bound.md).

* :mod:`robustfl.theory.constants` -- rho (proof-supported), rho_literal, Delta1 and sigma1.
* :mod:`robustfl.theory.bound` -- the theorem's setting on ridge regression, the per-round lemma
  checks, the sweeps, the JSON report and the ``robustfl bound`` command (:func:`run_bound`).
* :mod:`robustfl.theory.plot` -- the three-panel PNG.
"""

from __future__ import annotations

from .bound import run_bound
from .constants import Constants, rho, rho_literal, theorem_constants

__all__ = ["Constants", "rho", "rho_literal", "run_bound", "theorem_constants"]
