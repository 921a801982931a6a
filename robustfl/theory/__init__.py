"""FLTrust's error bound (Cao et al., NDSS 2021, Theorem 1) checked empirically (docs/bound.md).

Data only: nothing here prints or parses arguments (``robustfl bound`` lives in ``robustfl.cli``).

* :mod:`robustfl.theory.constants` -- rho (proof-supported), rho_literal, Delta1 and sigma1.
* :mod:`robustfl.theory.bound` -- :func:`run_bound`: the sweeps and the JSON report, assembled
  from :mod:`~robustfl.theory.plan` (the ``[bound]`` section), :mod:`~robustfl.theory.setting`
  (the ridge problem), :mod:`~robustfl.theory.trajectory` (one replay with the per-round lemma
  checks), :mod:`~robustfl.theory.pool` (the jobs and their processes),
  :mod:`~robustfl.theory.fits` (the statistics) and :mod:`~robustfl.theory.claims` (the verdict).
* :mod:`robustfl.theory.plot` -- the three-panel PNG.
"""

from __future__ import annotations

from .bound import run_bound
from .constants import Constants, rho, rho_literal, theorem_constants

__all__ = ["Constants", "rho", "rho_literal", "run_bound", "theorem_constants"]
