"""The HTML page's curves: a metric over rounds per (attack, defense), the mean over seeds with a
light 95 % Student-t band (:func:`curve`), as PNG figures.

* :func:`drift_figure`: relative drift over rounds, one small plot per attack with a line per
  defense; the band is drawn where at least :data:`BAND_MIN_SEEDS` seeds reached the round.
* :func:`diagnostics_figure`: for the rules that give rows weights (FedSim, FLTrust, FedAvg,
  Krum, ...), the Byzantine rows' total weight share and the detection precision and recall
  ("weight exactly zero" as a flag) over rounds, per attack that has Byzantine clients.

Drawn on bare matplotlib ``Figure`` objects with the Agg canvas (no pyplot: the caller's backend
and global figure state are left alone); matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from robustfl.simulation.results import Cell, clean_number

from .summaries import t975

DIAGNOSTICS = (
    ("byzantine_weight", "Byzantine weight share"),
    ("detection_precision", "detection precision"),
    ("detection_recall", "detection recall"),
)
# A 95 % band is drawn only where at least this many seeds reached the round: with two seeds
# the Student-t quantile is 12.7, so the band is ~9 times the seeds' spread and hides the curves.
BAND_MIN_SEEDS = 3
BAND_ALPHA = 0.12


def interval(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, half-width of the two-sided 95 % Student-t interval)``; the half-width is NaN for
    fewer than two values, and both are NaN for none."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan
    s = statistics.stdev(values)
    return mean, t975(n - 1) * s / math.sqrt(n)


def curve(cells: Sequence[Cell], metric: str) -> tuple[list[int], list[float], list[float]]:
    """``(rounds, mean, half-width)`` of ``metric`` per round over the cells' seeds: at each round
    the seeds that reached it with a finite value (half-width NaN where fewer than two)."""
    by_round: dict[int, list[float]] = {}
    for c in cells:
        for i, m in enumerate(c.rounds):
            v = clean_number(m.get(metric))
            if v is None:
                continue
            r = clean_number(m.get("round"))
            by_round.setdefault(int(r) if r is not None else i + 1, []).append(float(v))
    xs = sorted(by_round)
    means, halves = [], []
    for x in xs:
        mean, half = interval(by_round[x])
        means.append(mean)
        halves.append(half)
    return xs, means, halves


def _figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _colours(defenses: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(defenses) <= 10 else "tab20"]
    return {d: cmap(i % cmap.N) for i, d in enumerate(defenses)}


def _new_figure(rows: int, cols: int, width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _seeds_per_round(cells: Sequence[Cell], metric: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for c in cells:
        for i, m in enumerate(c.rounds):
            if clean_number(m.get(metric)) is None:
                continue
            r = clean_number(m.get("round"))
            x = int(r) if r is not None else i + 1
            counts[x] = counts.get(x, 0) + 1
    return counts


def _plot_line(ax: Any, cells: Sequence[Cell], metric: str, colour: Any, label: str, log: bool) -> bool:
    """Draw the mean and, at the rounds that at least ``BAND_MIN_SEEDS`` seeds reached, a light
    95 % band; returns whether anything was drawn. The caller fits the axes to the seeds' values,
    so a band wider than them is cut at the edge rather than squashing the curves."""
    xs, means, halves = curve(cells, metric)
    if not xs:
        return False
    diverged = sum(c.status == "diverged" for c in cells)
    if diverged:
        label += f" ({diverged} diverged)"
    ax.plot(xs, means, color=colour, linewidth=1.4, label=label)
    n = _seeds_per_round(cells, metric)
    show = [n.get(x, 0) >= BAND_MIN_SEEDS and math.isfinite(h) for x, h in zip(xs, halves, strict=True)]
    if any(show):
        lo = [m - h if ok else m for m, h, ok in zip(means, halves, show, strict=True)]
        hi = [m + h if ok else m for m, h, ok in zip(means, halves, show, strict=True)]
        if log:  # a band reaching zero or below runs off the bottom of the axes
            lo = [max(v, 1e-300) for v in lo]
        ax.fill_between(xs, lo, hi, where=show, color=colour, alpha=BAND_ALPHA, linewidth=0)
    return True


def drift_figure(
    attacks: Mapping[str, Mapping[str, Sequence[Cell]]], metric: str = "relative_drift"
) -> bytes | None:
    """One small plot per attack, a line per defense: ``metric`` over rounds, mean and 95 % band."""
    attack_names = [a for a, ds in attacks.items() if any(curve(cs, metric)[0] for cs in ds.values())]
    if not attack_names:
        return None
    defenses = list(dict.fromkeys(d for a in attack_names for d in attacks[a]))
    colours = _colours(defenses)
    cols = min(3, len(attack_names))
    rows = math.ceil(len(attack_names) / cols)
    fig, axes = _new_figure(rows, cols, 4.1 * cols, 3.0 * rows + 0.6)
    for i, ax in enumerate(axes.flat):
        if i >= len(attack_names):
            ax.set_visible(False)
            continue
        a = attack_names[i]
        values = [v for cs in attacks[a].values() for c in cs for v in _series(c, metric)]
        log = bool(values) and min(values) > 0
        for d, cs in attacks[a].items():
            _plot_line(ax, cs, metric, colours[d], d, log)
        # The axes fit the seeds' values (every seed's curve, not only the mean); a band reaching
        # past them is cut at the edge rather than stretching the scale over decades.
        if log:
            ax.set_yscale("log")
            ax.set_ylim(min(values) / 1.5, max(values) * 1.5)
        elif values:
            pad = 0.05 * ((max(values) - min(values)) or abs(max(values)) or 1.0)
            ax.set_ylim(min(values) - pad, max(values) + pad)
        ax.set_title(f"attack: {a}", fontsize=9)
        ax.set_xlabel("round", fontsize=8)
        ax.set_ylabel(metric.replace("_", " "), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _figure_png(fig)


def _series(cell: Cell, metric: str) -> list[float]:
    return [float(v) for m in cell.rounds if (v := clean_number(m.get(metric))) is not None]


def diagnostics_figure(attacks: Mapping[str, Mapping[str, Sequence[Cell]]]) -> bytes | None:
    """Per attack with Byzantine clients (a row): the Byzantine weight share and the detection
    precision and recall over rounds (columns), a line per defense that gives rows weights."""
    rows_of: list[tuple[str, dict[str, Sequence[Cell]]]] = []
    for a, ds in attacks.items():
        weighted = {d: cs for d, cs in ds.items() if any(_series(c, "byzantine_weight") for c in cs)}
        has_byzantine = any(_series(c, "detection_recall") for cs in weighted.values() for c in cs)
        if weighted and has_byzantine:
            rows_of.append((a, weighted))
    if not rows_of:
        return None
    defenses = list(dict.fromkeys(d for _, ds in rows_of for d in ds))
    colours = _colours(defenses)
    fig, axes = _new_figure(len(rows_of), len(DIAGNOSTICS), 4.1 * len(DIAGNOSTICS), 2.7 * len(rows_of) + 0.6)
    for r, (a, ds) in enumerate(rows_of):
        for k, (metric, title) in enumerate(DIAGNOSTICS):
            ax = axes[r][k]
            for d, cs in ds.items():
                _plot_line(ax, cs, metric, colours[d], d, log=False)
            ax.set_ylim(-0.03, 1.03)
            ax.set_title(f"{title} — attack: {a}", fontsize=9)
            ax.set_xlabel("round", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
            if k == 0:
                ax.legend(fontsize=7)
    return _figure_png(fig)
