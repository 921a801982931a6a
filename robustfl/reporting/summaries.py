"""Summaries of results over seeds, the one colour scale, worst cases and sweep axes: the numbers
every view shows (the terminal table, CSV/JSON/Markdown, the HTML page, the heatmap).

:func:`summarize` groups cells by (sweep point, attack, defense) and summarises one final
metric over the seeds of each group. A store may hold several settings (runs with different
``--set`` values): :func:`robustfl.reporting.settings.annotate` adds the configuration keys that
differ between them to every cell's sweep point, so a group is always one setting, never several
pooled.

Every view also says when a clean run (attack none, defense fedavg) has not converged by the one
criterion of :mod:`robustfl.simulation.convergence` (its relative drift at round floor(0.9 T)
above 0.05): a "clean FedAvg run not converged: ..." line under the table of that sweep point
(:func:`convergence_note`), the verdicts in the JSON's ``"convergence"`` list and the CSV's
``clean_converged`` / ``clean_convergence`` columns; a converged run adds nothing but those.

* ``mean`` over the seeds that produced a value; ``std`` the *sample* standard deviation
  (``ddof=1``, computed exactly by :mod:`statistics`) when n > 1, else 0; ``ci95`` the
  half-width of the two-sided 95 % Student-t interval for the mean,
  ``t_{0.975, n-1} * std / sqrt(n)`` (NaN when n < 2: one seed says nothing about the spread).
* ``text``: ``mean ± ci95`` -- the one meaning of ± in every view (terminal, CSV/JSON groups,
  Markdown, HTML), stated in each caption (:func:`caption`); one seed shows the mean alone.
* A ``diverged`` cell counts as +inf: one diverged seed makes the group's mean +inf (std and
  ci95 NaN) and its text ``diverged`` (``diverged (1/3)`` when only some seeds diverged).
* ``failed`` cells (raised; any unknown status too) are left out of the statistics and counted;
  a group with only failed cells reads ``failed``, one with some reads ``... (1 failed)``.
* An ``ok`` cell without the metric (``accuracy`` on a regression task) is left out; a group
  with no value at all reads ``n/a``.

Groups, sweep points, attacks and defenses keep the order in which the cells first show them.
The rich table (``robustfl.cli.render``), the HTML page (:mod:`robustfl.reporting.page`) and the
heatmap (:mod:`robustfl.reporting.heatmap`) read the same summary, so every view shows the same
numbers, coloured by one fixed scale (``BANDS``, ``BAND_COLOURS``: the one colour table) stated
on every view that has colours.

Worst cases and sweep axes, computed from those group means:

* :func:`worst_case`: per (sweep point, defense), the attack whose mean is worst -- the largest
  for error metrics (relative drift, ...), the smallest for ``accuracy`` and the detection
  rates; a diverged group (+inf) is worse than any value. Groups without a value (all seeds
  failed, or ``n/a``) are left out and counted. The tables end with this "worst case" row, with
  the worst attack's κ̂ and, where the ``worst_case`` attack ran, a comparison with the worst fixed
  attack (:mod:`.kappa_hat`: κ̂ = max over a seed's rounds of aggregation_error², mean over seeds).
* :func:`axis_views`: for each sweep key, rows its values, columns the defenses; an entry
  summarises the worst cases over attacks at the sweep points with that value: ``mean`` over the
  other axes' values and ``worst`` of them (its text shows the worst only where it differs).
* :func:`mean_elapsed`: a cell's compute time (``elapsed_s``), mean over its seeds.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from robustfl.errors import UnknownNameError
from robustfl.simulation import convergence as _convergence
from robustfl.simulation.results import METRIC_KEYS, Cell, clean_number

from .kappa_hat import kappa_text, mean_kappa, versus_fixed


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom: the factor of every 95 %
    half-width in the views. scipy.stats is imported here, on first use, not with the module: it
    costs ~1 s, and every command line imports this module."""
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


DAGGER = "†"
GUARANTEE_NOTE = "† run outside the rule's guarantee (--allow-outside-guarantee: too few clients)"
# Severity bands of the final relative drift: below 0.1 safe, 0.5 weak, 1 poor, else broken.
BANDS = ((0.1, "safe"), (0.5, "weak"), (1.0, "poor"))
# The one colour scale of every view (the terminal uses the nearest named colours).
BAND_COLOURS = {
    "safe": "#c8e6c9",
    "weak": "#fff59d",
    "poor": "#ffcc80",
    "broken": "#ef9a9a",
    "diverged": "#ef9a9a",
    "failed": "#e1bee7",
}
SEVERITY_METRICS = frozenset({"relative_drift"})
# Metrics where a larger value is better: their worst case is the smallest.
HIGHER_IS_BETTER = frozenset({"accuracy", "detection_precision", "detection_recall"})
WORST_ROW = "worst case"

GroupKey = tuple[str, str, str]  # (sweep label, attack, defense)
PointKey = tuple[str, str]  # (sweep label, defense)


def format_value(x: float) -> str:
    return f"{x:.3g}"


def sweep_label(sweep: Mapping[str, Any]) -> str:
    """``threat.byzantine=0.1, federation.clients=50``; empty when the cell has no sweep point."""
    return ", ".join(f"{k}={plain(v)}" for k, v in sweep.items())


def plain(v: Any) -> str:
    """A sweep or setting value as shown in a label: strings as they are, others as JSON."""
    return v if isinstance(v, str) else json.dumps(v, default=str)


def _value(cell: Cell, metric: str) -> float | None:
    v = clean_number(cell.final.get(metric))
    return None if v is None else float(v)


def _summary(cells: Sequence[Cell], metric: str) -> dict[str, Any]:
    ok = [c for c in cells if c.status == "ok"]
    diverged = [c for c in cells if c.status == "diverged"]
    failed = len(cells) - len(ok) - len(diverged)
    values = [v for v in (_value(c, metric) for c in ok) if v is not None]
    n = len(values) + len(diverged)
    mean = std = ci95 = math.nan
    if diverged:
        status = "diverged"
        mean = math.inf
        ran = len(ok) + len(diverged)
        text = "diverged" if len(diverged) == ran else f"diverged ({len(diverged)}/{ran})"
    elif values:
        status = "ok"
        # statistics computes in exact rationals: identical seeds give std exactly 0, not 1e-17.
        mean = statistics.fmean(values)
        std = statistics.stdev(values) if n > 1 else 0.0
        ci95 = t975(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
        # ± is the half-width of the 95 % Student-t interval in every view; one seed has none.
        text = f"{format_value(mean)} ± {ci95:.2g}" if n > 1 else format_value(mean)
    elif ok:
        status, text = "n/a", "n/a"
    else:
        status, text = "failed", "failed"
    if failed and status != "failed":
        text += f" ({failed} failed)"
    return {
        "sweep": dict(cells[0].sweep),
        "attack": cells[0].attack,
        "defense": cells[0].defense,
        "metric": metric,
        "status": status,
        "text": text,
        "n": n,
        "mean": mean,
        "std": std,
        "ci95": ci95,
        "ok": len(ok),
        "diverged": len(diverged),
        "failed": failed,
        "outside_guarantee": any(c.outside_guarantee for c in cells),
        "values": values + [math.inf] * len(diverged),
        "kappa": mean_kappa(cells),
    }


def summarize(cells: Iterable[Cell], metric: str = "relative_drift") -> dict[GroupKey, dict[str, Any]]:
    """``{(sweep label, attack, defense): summary}`` over seeds, in first-seen order (see module doc).
    A metric no cell records (a misspelt name) is refused: it would read n/a everywhere."""
    cells = list(cells)
    if metric not in METRIC_KEYS and not any(metric in c.final for c in cells):
        raise UnknownNameError("metric", str(metric), METRIC_KEYS)
    groups: dict[GroupKey, list[Cell]] = {}
    for c in cells:
        groups.setdefault((sweep_label(c.sweep), c.attack, c.defense), []).append(c)
    return {k: _summary(v, metric) for k, v in groups.items()}


def layout(summary: Mapping[GroupKey, Any]) -> list[tuple[str, list[str], list[str]]]:
    """``[(sweep label, attacks, defenses), ...]``: one panel per sweep point, in first-seen order."""
    panels: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
    for point, attack, defense in summary:
        attacks, defenses = panels.setdefault(point, ({}, {}))
        attacks[attack] = None
        defenses[defense] = None
    return [(p, list(a), list(d)) for p, (a, d) in panels.items()]


def severity(group: Mapping[str, Any]) -> str | None:
    """``safe``/``weak``/``poor``/``broken`` by the mean's band, or ``diverged``/``failed``; None
    for ``n/a`` and for metrics without bands (only relative drift has them)."""
    if group["status"] in ("diverged", "failed"):
        return str(group["status"])
    if group["status"] != "ok" or group["metric"] not in SEVERITY_METRICS:
        return None
    return next((name for limit, name in BANDS if group["mean"] < limit), "broken")


PLUS_MINUS = "mean ± 95 % Student-t half-width (t(0.975, n-1)·s/√n)"
ONE_SEED_NOTE = "a value without ± comes from one seed"
BANDS_NOTE = "colours, one fixed scale in every view: safe < 0.1 ≤ weak < 0.5 ≤ poor < 1 ≤ broken"


def caption(summary: Mapping[GroupKey, Mapping[str, Any]], metric: str, colours: bool = True) -> str:
    """What the table's entries are: the metric, what ± means, over how many seeds; with
    ``colours`` and a metric with severity bands, the colour scale."""
    seeds = sorted({g["ok"] + g["diverged"] + g["failed"] for g in summary.values()})
    over = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    text = f"final {metric} over {over} seed{'s' if seeds[-1] != 1 else ''}: {PLUS_MINUS}"
    if any(g["status"] == "ok" and g["n"] == 1 for g in summary.values()):
        text += "; " + ONE_SEED_NOTE
    if colours and metric in SEVERITY_METRICS:
        text += "\n" + BANDS_NOTE
    if any(g["outside_guarantee"] for g in summary.values()):
        text += "\n" + GUARANTEE_NOTE
    return text


# -- worst cases, sweep axes, time --------------------------------------------------------------


def _badness(metric: str, status: str, mean: float) -> float:
    """Larger is worse: +inf for diverged, the mean (negated where larger is better)."""
    if status == "diverged" or math.isinf(mean):
        return math.inf
    return -mean if metric in HIGHER_IS_BETTER else mean


def _band(metric: str, status: str, value: float) -> str | None:
    return severity({"status": status, "metric": metric, "mean": value})


def worst_case(cells: Iterable[Cell], metric: str = "relative_drift") -> dict[PointKey, dict[str, Any]]:
    """``{(sweep label, defense): worst}``: per sweep point and defense, the worst attack (see
    the module doc). ``worst`` holds ``sweep``, ``defense``, ``metric``, ``status`` (``ok``,
    ``diverged``, or ``failed``/``n/a`` when no attack has a value), ``attack`` (None then),
    ``mean``, ``by_attack`` ({attack: group mean} of the attacks with a value), ``missing``
    (attacks without one), ``outside_guarantee``, ``kappa`` (the worst attack's κ̂, mean over its
    seeds; None without one), ``kappa_by_attack`` ({attack: κ̂ or None}), ``vs_fixed``
    (:func:`~robustfl.reporting.kappa_hat.versus_fixed`: ``worst_case`` against the worst fixed
    attack, or None) and ``text`` (``0.54 (alie) κ̂ 2.1``)."""
    summary = summarize(cells, metric)
    by: dict[PointKey, list[dict[str, Any]]] = {}
    for (point, _, defense), g in summary.items():
        by.setdefault((point, defense), []).append(g)
    out: dict[PointKey, dict[str, Any]] = {}
    for (point, defense), groups in by.items():
        ran = [g for g in groups if g["status"] in ("ok", "diverged")]
        missing = [g["attack"] for g in groups if g not in ran]
        entry: dict[str, Any] = {
            "sweep": dict(groups[0]["sweep"]),
            "defense": defense,
            "metric": metric,
            "by_attack": {g["attack"]: g["mean"] for g in ran},
            "kappa_by_attack": {g["attack"]: g["kappa"] for g in ran},
            "missing": missing,
            "outside_guarantee": any(g["outside_guarantee"] for g in groups),
            "vs_fixed": versus_fixed(groups, lambda g: _badness(metric, g["status"], g["mean"])),
        }
        if ran:
            worst = max(ran, key=lambda g: _badness(metric, g["status"], g["mean"]))  # first on ties
            entry.update(status=worst["status"], attack=worst["attack"], mean=worst["mean"])
            entry["kappa"] = worst["kappa"]
            value = "diverged" if worst["status"] == "diverged" else format_value(worst["mean"])
            text = f"{value} ({worst['attack']}"
            text += f"; {len(missing)} without a value)" if missing else ")"
            text += f" {kappa_text(worst['kappa'])}" if worst["kappa"] is not None else ""
        else:
            status = "failed" if any(g["status"] == "failed" for g in groups) else "n/a"
            entry.update(status=status, attack=None, mean=math.nan, kappa=None)
            text = status
        entry["text"] = text
        entry["severity"] = _band(metric, entry["status"], entry["mean"])
        out[(point, defense)] = entry
    return out


def axis_views(cells: Iterable[Cell], metric: str = "relative_drift") -> dict[str, dict[str, Any]]:
    """``{sweep key: view}``, one per key the cells' sweep points carry (first-seen order).

    ``view["values"]``: the key's values as labels (``sweep_label`` style), ``view["defenses"]``,
    ``view["rows"][(value label, defense)]``: ``mean`` and ``worst`` of :func:`worst_case` over
    the sweep points with that value (``points`` of them; those without a value left out and
    counted in ``missing``), ``worst_at`` (the point and attack of the worst), ``status``,
    ``severity`` (of the worst) and ``text``; ``view["worst"][defense]``: the same over every
    point (the table's "worst case" row).
    """
    wc = worst_case(cells, metric)
    keys: dict[str, None] = {}
    for entry in wc.values():
        keys.update(dict.fromkeys(entry["sweep"]))
    views: dict[str, dict[str, Any]] = {}
    for key in keys:
        values: dict[str, None] = {}
        defenses: dict[str, None] = {}
        groups: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
        overall: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for (point, defense), entry in wc.items():
            if key not in entry["sweep"]:
                continue
            label = plain(entry["sweep"][key])
            values[label] = None
            defenses[defense] = None
            groups.setdefault((label, defense), []).append((point, entry))
            overall.setdefault(defense, []).append((point, entry))
        views[key] = {
            "key": key,
            "values": list(values),
            "defenses": list(defenses),
            "rows": {k: _over_points(v, metric) for k, v in groups.items()},
            "worst": {d: _over_points(v, metric) for d, v in overall.items()},
        }
    return views


def _over_points(entries: Sequence[tuple[str, Mapping[str, Any]]], metric: str) -> dict[str, Any]:
    ran = [(p, e) for p, e in entries if e["status"] in ("ok", "diverged")]
    out: dict[str, Any] = {
        "points": len(entries),
        "missing": len(entries) - len(ran),
        "metric": metric,
        "outside_guarantee": any(e["outside_guarantee"] for _, e in entries),
    }
    if not ran:
        status = "failed" if any(e["status"] == "failed" for _, e in entries) else "n/a"
        out.update(status=status, mean=math.nan, worst=math.nan, worst_at=None, text=status)
        out["severity"] = _band(metric, status, math.nan)
        return out
    point, worst = max(ran, key=lambda pe: _badness(metric, pe[1]["status"], pe[1]["mean"]))
    diverged = any(e["status"] == "diverged" for _, e in ran)
    mean = math.inf if diverged else statistics.fmean(e["mean"] for _, e in ran)
    status = "diverged" if worst["status"] == "diverged" else "ok"
    out.update(
        status=status,
        mean=mean,
        worst=worst["mean"],
        worst_at=(point, worst["attack"]),
        severity=_band(metric, status, worst["mean"]),
    )

    if diverged:
        n_div = sum(e["status"] == "diverged" for _, e in ran)
        text = "diverged" if len(ran) == 1 else f"diverged ({n_div}/{len(ran)})"
    elif len(ran) == 1 or format_value(mean) == format_value(worst["mean"]):
        text = format_value(worst["mean"])
    else:
        text = f"{format_value(mean)} (worst {format_value(worst['mean'])})"
    if out["missing"]:
        text += f" ({out['missing']} without a value)"
    out["text"] = text
    return out


def axis_caption(view: Mapping[str, Any], metric: str) -> str:
    """What an axis view's entries are."""
    text = (
        f"final {metric} of the worst attack (mean over seeds), averaged over the row's sweep points; "
        "the worst point in brackets where it differs"
    )
    entries = [*view["rows"].values(), *view["worst"].values()]
    if any(e["status"] == "diverged" for e in entries):
        text += "\ndiverged (k/n): diverged at k of the row's n sweep points"
    return text


def mean_elapsed(cells: Iterable[Cell]) -> dict[GroupKey, float]:
    """``{(sweep label, attack, defense): mean elapsed_s}`` over the seeds that recorded a time
    (> 0; a cell that failed before running has none)."""
    times: dict[GroupKey, list[float]] = {}
    for c in cells:
        if c.elapsed_s and c.elapsed_s > 0:
            times.setdefault((sweep_label(c.sweep), c.attack, c.defense), []).append(float(c.elapsed_s))
    return {k: statistics.fmean(v) for k, v in times.items()}


def format_seconds(s: float) -> str:
    return f"{s:.3g} s"


def convergence_note(
    verdicts: Sequence[Mapping[str, Any]], point: str | None = None, with_criterion: bool = True
) -> str:
    """"clean FedAvg run not converged: ..." for the verdicts of sweep point ``point`` (all
    when None), with the criterion unless ``with_criterion`` is False, or "" when every clean run
    there converged (:mod:`robustfl.simulation.convergence`)."""
    if point is not None:
        verdicts = _convergence.by_point(verdicts, sweep_label).get(point, [])
    return _convergence.note(verdicts, with_criterion)
