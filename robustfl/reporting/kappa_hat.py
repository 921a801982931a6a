"""κ̂, the κ a rule exhibited in a run, and the ``worst_case`` attack set against the worst fixed one.

Every measured round records ``aggregation_error`` = ||A(U) − mean(H)|| / sqrt(mean_h ||h − mean(H)||²)
over the honest rows H; its square is the κ of (f, κ)-robustness (Allouah et al., AISTATS 2023) that
the rule exhibited that round for the honest set.

* :func:`cell_kappa`: a cell's κ̂, the largest ``aggregation_error²`` over its recorded rounds
  (rounds without a value skipped; None when none has one);
* :func:`mean_kappa`: a table entry's κ̂, the mean over its seeds that ran (ok or diverged) and
  recorded one; the "worst case" row shows the worst attack's (``0.54 (alie) κ̂ 2.1``);
* :func:`versus_fixed`: where the attack named ``worst_case`` (:mod:`robustfl.attacks.worst_case`,
  a search for the Byzantine rows maximising that κ each round) ran beside fixed attacks (every
  other attack but ``none``), the worst of those fixed attacks, its mean and κ̂, and the gap:
  ``gap`` = worst_case's mean − the fixed one's, ``kappa_ratio`` = worst_case's κ̂ / the fixed
  one's; the tables show it in a "worst_case vs best fixed" row (``alie 0.43 κ̂ 2.1: Δ +0.11, κ̂×4.4``).

Only :mod:`robustfl.simulation.results` is imported: :mod:`.summaries` builds on this module.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from robustfl.simulation.results import Cell, clean_number

KAPPA = "κ̂"
WORST_CASE_ATTACK = "worst_case"
NOT_FIXED = frozenset({"none", WORST_CASE_ATTACK})  # every other attack is a fixed one
VERSUS_ROW = "worst_case vs best fixed"
KAPPA_NOTE = (
    "κ̂ (of the worst attack): the largest aggregation_error² over a seed's measured rounds, the κ of "
    "(f, κ)-robustness the rule exhibited; mean over seeds"
)
VERSUS_NOTE = (
    "worst_case vs best fixed: the worst fixed attack (all but none and worst_case), its mean and κ̂; "
    "Δ: worst_case's mean − that mean; κ̂×r: worst_case's κ̂ is r times that κ̂"
)


def cell_kappa(cell: Cell) -> float | None:
    """max over the cell's recorded rounds of ``aggregation_error²`` (None where no round has one)."""
    values = (clean_number(r.get("aggregation_error")) for r in cell.rounds)
    squares = [float(v) ** 2 for v in values if v is not None]
    return max(squares) if squares else None


def mean_kappa(cells: Iterable[Cell]) -> float | None:
    """The mean :func:`cell_kappa` over the cells that ran (ok or diverged) and have one, else None."""
    ran = (cell_kappa(c) for c in cells if c.status in ("ok", "diverged"))
    values = [k for k in ran if k is not None]
    return statistics.fmean(values) if values else None


def kappa_text(kappa: float | None) -> str:
    """``κ̂ 2.1`` (3 significant digits), or "" without a value."""
    return "" if kappa is None else f"{KAPPA} {kappa:.3g}"


def _value(group: Mapping[str, Any]) -> str:
    return "diverged" if group["status"] == "diverged" else f"{group['mean']:.3g}"


def _gap_text(wc: Mapping[str, Any], fixed: Mapping[str, Any], gap: float) -> str:
    """``Δ +0.11``, or which of the two diverged (the gap is not finite then)."""
    if math.isfinite(gap):
        return f"Δ {gap:+.3g}"
    if wc["status"] == "diverged":
        return "both diverged" if fixed["status"] == "diverged" else f"{WORST_CASE_ATTACK} diverged"
    return "only the fixed one diverged"


def versus_fixed(
    groups: Sequence[Mapping[str, Any]], badness: Callable[[Mapping[str, Any]], float]
) -> dict[str, Any] | None:
    """``worst_case`` against the worst fixed attack among ``groups`` (the summaries of one sweep
    point and defense, each with ``attack``, ``status``, ``mean``, ``kappa``), worst by ``badness``
    (larger is worse; the first on ties); None unless ``worst_case`` and a fixed attack both have a
    value (ok or diverged). The dict: ``attack``, ``status``, ``mean``, ``kappa`` (the fixed one's),
    ``worst_case_status``, ``worst_case_mean``, ``worst_case_kappa``, ``gap`` (worst_case's mean −
    the fixed one's; not finite where one diverged), ``kappa_ratio`` (None without both κ̂ or with
    the fixed one's 0) and ``text``."""
    ran = [g for g in groups if g["status"] in ("ok", "diverged")]
    wc = next((g for g in ran if g["attack"] == WORST_CASE_ATTACK), None)
    fixed = [g for g in ran if g["attack"] not in NOT_FIXED]
    if wc is None or not fixed:
        return None
    best = max(fixed, key=badness)
    wc_mean = math.inf if wc["status"] == "diverged" else float(wc["mean"])
    fixed_mean = math.inf if best["status"] == "diverged" else float(best["mean"])
    gap = wc_mean - fixed_mean if math.isfinite(wc_mean) or math.isfinite(fixed_mean) else math.nan
    k_wc, k_fixed = wc.get("kappa"), best.get("kappa")
    ratio = k_wc / k_fixed if k_wc is not None and k_fixed is not None and k_fixed > 0 else None
    out = {
        "attack": best["attack"],
        "status": best["status"],
        "mean": fixed_mean,
        "kappa": k_fixed,
        "worst_case_status": wc["status"],
        "worst_case_mean": wc_mean,
        "worst_case_kappa": k_wc,
        "gap": gap,
        "kappa_ratio": ratio,
    }
    out["text"] = ": ".join(versus_lines(out))
    return out


def versus_lines(versus: Mapping[str, Any]) -> list[str]:
    """A :func:`versus_fixed` comparison in two parts, the fixed attack and the gap: ``["alie 0.43
    κ̂ 2.1", "Δ +0.11, κ̂×4.4"]`` (its ``text`` joins them with ": "; the terminal, with a new line)."""
    fixed = {"status": versus["status"], "mean": versus["mean"]}
    head = " ".join(t for t in (versus["attack"], _value(fixed), kappa_text(versus["kappa"])) if t)
    wc = {"status": versus["worst_case_status"]}
    gap = _gap_text(wc, fixed, versus["gap"])
    if versus["kappa_ratio"] is not None:
        gap += f", {KAPPA}×{versus['kappa_ratio']:.3g}"
    return [head, gap]


def worst_notes(entries: Iterable[Mapping[str, Any]]) -> str:
    """The caption lines for worst-case entries: :data:`KAPPA_NOTE` where one shows a κ̂,
    :data:`VERSUS_NOTE` where one has a ``vs_fixed`` comparison; "" for neither."""
    entries = list(entries)
    lines = []
    if any(e.get("kappa") is not None for e in entries):
        lines.append(KAPPA_NOTE)
    if any(e.get("vs_fixed") for e in entries):
        lines.append(VERSUS_NOTE)
    return "\n".join(lines)
