"""``python -m robustfl._warm`` (run by ``make setup``) compiles every numba kernel a run uses."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, numba
from robustfl import _compiled, _warm
_warm.main()
print(json.dumps({
    n: sorted({str(s[0].dtype) for s in k.signatures})
    for n, k in vars(_compiled).items()
    if isinstance(k, numba.core.registry.CPUDispatcher) and not n.startswith("_")
}))
"""


def test_warm_compiles_every_kernel_for_both_dtypes() -> None:
    """In a fresh process (nothing compiled before), every public kernel of robustfl._compiled
    (the private helpers are compiled into their callers) has a signature after the warm-up, the
    order statistics for float32 and float64 rows."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[0].startswith("robustfl: numba kernels compiled and cached")
    kernels = json.loads(lines[-1])
    assert len(kernels) >= 5
    for name, dtypes in kernels.items():
        assert dtypes, f"{name}: not compiled by robustfl._warm"
    for name in ("order_stat_mean", "order_stat_mean_serial"):
        assert {"float32", "float64"} <= set(kernels[name]), (name, kernels[name])
