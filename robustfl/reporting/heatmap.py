"""The matrix heatmap: attacks x defenses, the mean final metric over seeds, one panel per sweep point.

Drawn with matplotlib's Agg canvas on a bare ``Figure`` (no pyplot, so the caller's backend and
global figure state are left alone), under a title (``title``, by default the metric and "mean
over seeds"). For the final relative drift the colours are the one fixed scale of every view
(:data:`robustfl.reporting.summaries.BAND_COLOURS`: safe < 0.1 ≤ weak < 0.5 ≤ poor < 1 ≤ broken),
the same in every plot and every table, named on the colour bar; other metrics, which have no
severity bands, get a logarithmic scale fitted to the plot and shared by its panels, green (small)
to red, and the colour bar says so. A diverged cell is drawn at the top of the scale and reads ``div``;
a failed cell is hatched grey and reads ``fail``; every other cell shows its value (``†`` when
run outside the rule's guarantee). Numbers come from :func:`robustfl.reporting.summaries.summarize`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, Colormap, ListedColormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from robustfl.simulation.results import Cell

from . import summaries

CMAP = "RdYlGn_r"


def _limits(values: list[float], metric: str) -> tuple[float, float]:
    """Log-scale limits from the finite positive means; relative drift always spans [1e-3, 10] so
    that its colours read the same in every plot (yellow near 0.1, red from about 1)."""
    pos = [v for v in values if math.isfinite(v) and v > 0]
    if metric == "relative_drift":
        return min(pos + [1e-3]), max(pos + [10.0])
    if not pos:
        return 0.1, 1.0
    lo, hi = min(pos), max(pos)
    if hi / lo < 10:  # keep at least a decade so the colours mean something
        mid = math.sqrt(lo * hi)
        lo, hi = min(lo, mid / math.sqrt(10)), max(hi, mid * math.sqrt(10))
    return lo, hi


# The fixed scale of the relative drift: band edges, and a top where the last band stops on the bar.
_EDGES = (0.0, *(limit for limit, _ in summaries.BANDS), 10.0)
_BAND_NAMES = (*(name for _, name in summaries.BANDS), "broken")


def _band_scale() -> tuple[Colormap, Normalize]:
    cmap = ListedColormap([summaries.BAND_COLOURS[name] for name in _BAND_NAMES], name="robustfl-bands")
    return cmap, BoundaryNorm(list(_EDGES), cmap.N, clip=True)


def _ink(cmap: Colormap, norm: Normalize, value: float) -> str:
    """Black or white, whichever reads better on the cell's colour."""
    if not math.isfinite(value):
        return "black"
    r, g, b, _ = cmap(norm(value))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def heatmap(
    cells: Iterable[Cell], path: str | Path, metric: str = "relative_drift", title: str | None = None
) -> Path:
    """Write the heatmap to ``path`` (PNG unless its suffix names another format) under ``title``
    (default: ``final METRIC: mean over seeds``); returns the path."""
    path = Path(path)
    summary = summaries.summarize(cells, metric)
    panels = summaries.layout(summary)
    banded = metric in summaries.SEVERITY_METRICS
    cmap: Colormap
    norm: Normalize
    if banded:
        cmap, norm = _band_scale()
        lo, hi = _EDGES[0], _EDGES[-1]
    else:
        lo, hi = _limits([g["mean"] for g in summary.values() if g["status"] == "ok"], metric)
        cmap, norm = colormaps[CMAP], LogNorm(vmin=lo, vmax=hi, clip=True)

    n_att = max((len(a) for _, a, _ in panels), default=1)
    widths = [max(2.0, 1.1 * len(d)) for _, _, d in panels] or [4.0]
    fig = Figure(figsize=(sum(widths) + 2.5, 0.55 * n_att + 2.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title or f"final {metric.replace('_', ' ')}: mean over seeds", fontsize=11)
    if not panels:
        fig.text(0.5, 0.5, "no cells", ha="center", va="center")
    axes = fig.subplots(1, len(panels), squeeze=False, width_ratios=widths)[0] if panels else []
    image = None
    for ax, (point, attacks, defenses) in zip(axes, panels, strict=True):
        grid = np.full((len(attacks), len(defenses)), np.nan)
        for i, a in enumerate(attacks):
            for j, d in enumerate(defenses):
                g = summary.get((point, a, d))
                if g is None:
                    continue
                label = ""
                if g["status"] == "diverged":
                    grid[i, j], label = hi, "div"
                elif g["status"] == "ok":
                    grid[i, j], label = min(max(g["mean"], lo), hi), summaries.format_value(g["mean"])
                elif g["status"] == "failed":
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", hatch="///",
                                           edgecolor="0.5", linewidth=0))
                    label = "fail"
                else:
                    label = "n/a"
                if g["outside_guarantee"]:
                    label += " " + summaries.DAGGER
                ax.text(j, i, label, ha="center", va="center", fontsize=8, color=_ink(cmap, norm, grid[i, j]))
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
        ax.set_xticks(range(len(defenses)), defenses, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(attacks)), attacks, fontsize=8)
        ax.set_xlim(-0.5, len(defenses) - 0.5)
        ax.set_ylim(len(attacks) - 0.5, -0.5)
        ax.set_xlabel("defense")
        ax.set_ylabel("attack")
        if point:
            ax.set_title(point, fontsize=9)
    if image is not None and banded:
        bar = fig.colorbar(image, ax=list(axes), shrink=0.9, label=f"final {metric}: the tables' fixed bands")
        mids = [(a + b) / 2 for a, b in zip(_EDGES, _EDGES[1:], strict=False)]
        edges = [f"< {b:g}" for b in _EDGES[1:-1]] + [f"≥ {_EDGES[-2]:g}"]
        bar.set_ticks(mids, labels=[f"{n} {e}" for n, e in zip(_BAND_NAMES, edges, strict=True)])
    elif image is not None:
        fig.colorbar(
            image,
            ax=list(axes),
            shrink=0.9,
            label=f"final {metric} (mean over seeds; scale fitted to this plot)",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix[1:].lower()
    fig.savefig(path, format=fmt if fmt in fig.canvas.get_supported_filetypes() else "png")
    return path
