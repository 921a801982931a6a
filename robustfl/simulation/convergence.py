"""Has the clean run converged? One criterion for every task, stated wherever results are shown.

Every cell's number is a relative drift against a reference w*: the exact optimum where the task
has one, else the final model of the clean run (attack ``none``, defense ``fedavg``, same seed and
setting). Either way the numbers mean something only if the clean run itself has settled: with
logistic regression at the bare defaults (``local_lr = 0.1``) and 60 rounds the clean FedAvg run
is still at relative drift ~0.4 from w*, so a whole matrix reads about 0.4 and an attack that
happens to push along the descent direction (``scaling``) even seems to help.

**The criterion** (the same form for exact-optimum and clean-run tasks)::

    v = ||w_t' - w*|| / ||w_0 - w*||,   t' = floor(0.9 T),   converged  <=>  v <= 0.05

the clean run's relative drift -- the contract's ``relative_drift`` metric, against the very
reference the cells use -- at round t', 10 % of the rounds before its end (T = federation.rounds).
t' does not depend on ``metrics.every``: a clean run whose metrics skip round t' keeps its model
there as the rounds pass (``runner.clean_convergence``), so measuring less often never moves the
checkpoint (it once did: with ``metrics.every = 20`` the MNIST reproduction was judged at round 80
of 100, 0.108, where round 90 reads 0.046).

* Exact-optimum tasks: v is the clean run's distance to w* at t' (at least its final drift when
  it converges monotonically): the floor under every number of the table. It is read late, not
  at T, so that a run still moving in its last rounds does not pass on its last step.
* Clean-run tasks: w* = w_T, so v = ||w_t' - w_T|| / ||w_0 - w_T|| is how far the run still moved
  over its last 10 % of rounds, as a fraction of its whole way: a reference that is still moving
  is no reference; any cell closer to it than v is indistinguishable from the clean run stopped
  a few rounds earlier.
* The threshold 0.05 is half the edge of the best severity band (``report.BANDS``: safe < 0.1),
  so a "safe" cell can never be an artefact of the clean run's own error. The shipped scenarios
  sit below it (quick: 6e-4; the highest, attacks on digits: 0.036, and psfed: 0.026 / 0.034
  for seeds 0 / 1 after its rounds and local_lr were raised); the bare-defaults logistic
  regression at 60 rounds reads 0.40.

Where it is computed: ``run_matrix`` (``sweep.verdicts.clean_verdicts``) reads v off the matrix's
own ``none x fedavg`` cell when it ran and measured round t'; else it takes the verdict kept in the
store (refs row ``conv-<the clean cell's key>``, written where the clean reference run itself was
computed, and only when it was judged at this t'); else it runs the clean run once in the driver
(``runner.clean_convergence``, which keeps w_t' as the rounds pass), shared by sweep points that
differ only in ``threat.*``. ``robustfl run`` takes it from the clean run that
is the reference anyway (clean-run tasks), from the cell itself (``--attack none --defense
fedavg``), else from one clean run. The reports read the stored verdicts.

A clean run that diverged, or that could not run, is not converged (``value`` None, ``error``
says why). The verdict is a plain dict (JSON as is)::

    {"criterion", "metric": "relative_drift", "round": t', "rounds": T, "threshold": 0.05,
     "value": v | None, "converged": bool, "reference": "exact" | "clean_run",
     "final_relative_drift": ||w_T - w*|| / ||w_0 - w*|| (exact tasks) | None,
     "seed", "sweep": {key: value}, "error": str | None}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

THRESHOLD = 0.05
METRIC = "relative_drift"
CRITERION = (
    "the clean run's (attack none, defense fedavg) relative drift ||w_t - w*|| / ||w_0 - w*|| at "
    "t = floor(0.9 T) "
    f"must be <= {THRESHOLD:g}, w* the cells' reference (exact optimum, or the clean "
    "run's final model)"
)
ADVICE = "raise federation.rounds or federation.local_lr"
STORE_PREFIX = "conv-"  # the verdict's row in the store's refs table: conv-<the clean cell's key>


def checkpoint_round(rounds: int) -> int:
    """t' = floor(0.9 T), in integers (no float rounding): 60 -> 54, 100 -> 90, 1 -> 0."""
    return (9 * int(rounds)) // 10


def _vec(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64).reshape(-1)


def relative_distance(w: Any, w0: Any, w_ref: Any) -> float:
    """||w - w_ref|| / ||w0 - w_ref|| in float64 (inf when w0 = w_ref and w differs, NaN on NaN)."""
    a, b, r = _vec(w), _vec(w0), _vec(w_ref)
    num, den = float(np.linalg.norm(a - r)), float(np.linalg.norm(b - r))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def verdict(
    value: float | None,
    *,
    rounds: int,
    reference: str,
    seed: int,
    sweep: Mapping[str, Any] | None = None,
    final_relative_drift: float | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The verdict dict (module doc) for a criterion value ``value`` (None: no value, ``error`` why)."""
    ok_value = value is not None and math.isfinite(value)
    return {
        "criterion": CRITERION,
        "metric": METRIC,
        "round": checkpoint_round(rounds),
        "rounds": int(rounds),
        "threshold": THRESHOLD,
        "value": float(value) if ok_value and value is not None else None,
        "converged": bool(ok_value and value is not None and value <= THRESHOLD and error is None),
        "reference": reference,
        "final_relative_drift": final_relative_drift,
        "seed": int(seed),
        "sweep": dict(sweep or {}),
        "error": error,
    }


def from_cell(cell: Any, rounds: int, sweep: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The verdict read off the clean cell itself (attack none, defense fedavg, the matrix's own
    reference): its recorded ``relative_drift`` at round t'. None when that round was not
    measured (``metrics.every``) or the cell did not run to ``ok``/``diverged``."""
    t = checkpoint_round(rounds)
    final = cell.final.get(METRIC) if cell.reference == "exact" else None
    if cell.status == "diverged":
        return verdict(
            None,
            rounds=rounds,
            reference=cell.reference,
            seed=cell.seed,
            sweep=sweep,
            error=cell.error or "the clean run diverged",
        )
    if cell.status != "ok":
        return None
    # t' = 0: w_0 itself, relative drift 1 by definition
    found = 1.0 if t == 0 else next((r.get(METRIC) for r in cell.rounds if r.get("round") == t), None)
    if found is None:
        return None
    return verdict(
        float(found),
        rounds=rounds,
        reference=cell.reference,
        seed=cell.seed,
        sweep=sweep,
        final_relative_drift=None if final is None else float(final),
    )


def failed(verdicts: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The verdicts that say "not converged"."""
    return [v for v in verdicts if not v.get("converged", False)]


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def note(verdicts: Sequence[Mapping[str, Any]], with_criterion: bool = True) -> str:
    """One line when some clean run has not converged, else "" (nothing of the kind is said)::

    clean FedAvg run not converged: relative drift 0.4 at round 54 of 60 > 0.05 (seed 0)
    (criterion: ...; raise federation.rounds or federation.local_lr)
    """
    bad = failed(verdicts)
    if not bad:
        return ""
    parts = []
    by_rounds: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    errors = []
    for v in bad:
        if v.get("value") is None:
            errors.append(f"seed {v.get('seed')}: {v.get('error') or 'no value'}")
        else:
            by_rounds.setdefault((int(v["round"]), int(v["rounds"])), []).append(v)
    for (t, total), vs in by_rounds.items():
        values = ", ".join(f"{_fmt(float(v['value']))} (seed {v['seed']})" for v in vs)
        parts.append(f"relative drift {values} at round {t} of {total} > {_fmt(float(vs[0]['threshold']))}")
    if errors:
        parts.append("no value: " + "; ".join(errors))
    text = "clean FedAvg run not converged: " + "; ".join(parts)
    if with_criterion:
        text += f" (criterion: {CRITERION}; {ADVICE})"
    return text


def store_key(clean_cell_key: str) -> str:
    """The key of a verdict's row in the store's refs table."""
    return STORE_PREFIX + clean_cell_key


def clean_key_of(config: Mapping[str, Any]) -> str:
    """The key of the clean cell (attack none, defense fedavg) of a stored cell's configuration
    (``runner.cell_config``): the same setting and seed."""
    from ..scenario import config_hash

    return config_hash({**dict(config), "attack": "none", "defense": "fedavg"})


def by_point(verdicts: Iterable[Mapping[str, Any]], label: Any) -> dict[str, list[Mapping[str, Any]]]:
    """``{point label: [verdict, ...]}`` with ``label(sweep dict) -> str`` (``report.sweep_label``)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for v in verdicts:
        out.setdefault(str(label(v.get("sweep") or {})), []).append(v)
    return out
