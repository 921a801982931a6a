"""Deprecated: these helpers now live in :mod:`robustfl.kernels` (this shim goes in the next release).

Importing this module emits a ``DeprecationWarning`` naming ``robustfl.kernels``; every name it
held is re-exported unchanged, so a plugin written against it keeps working meanwhile.
"""

from __future__ import annotations

import warnings

from ..kernels import (  # noqa: F401  (re-exported for old plugins)
    _BLOCK,
    _CHUNK,
    EPS,
    check_updates,
    entropy,
    finite_rows,
    row_norms,
    sq_distances,
    valid_rows,
    zero_weights,
)

__all__ = ["EPS", "check_updates", "entropy", "finite_rows", "row_norms", "sq_distances", "valid_rows",
           "zero_weights"]

warnings.warn(
    "robustfl.defenses._util is deprecated and will be removed in the next release: "
    "import its helpers from robustfl.kernels",
    DeprecationWarning,
    stacklevel=2,
)
