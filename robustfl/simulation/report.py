"""Views of results that need no terminal: summaries over seeds, CSV, JSON, Markdown and HTML.

:func:`summarize` groups cells by (sweep point, attack, defense) and summarises one final
metric over the seeds of each group:

* ``mean`` over the seeds that produced a value; ``std`` the *sample* standard deviation
  (``ddof=1``, computed exactly by :mod:`statistics`) when n > 1, else 0; ``ci95`` the
  half-width of the two-sided 95 % Student-t interval for the mean,
  ``t_{0.975, n-1} * std / sqrt(n)`` (NaN when n < 2: one seed says nothing about the spread).
* A ``diverged`` cell counts as +inf: one diverged seed makes the group's mean +inf (std and
  ci95 NaN) and its text ``diverged`` (``diverged (1/3)`` when only some seeds diverged).
* ``failed`` cells (raised; any unknown status too) are left out of the statistics and counted;
  a group with only failed cells reads ``failed``, one with some reads ``... (1 failed)``.
* An ``ok`` cell without the metric (``accuracy`` on a regression task) is left out; a group
  with no value at all reads ``n/a``.

Groups, sweep points, attacks and defenses keep the order in which the cells first show them.
The rich table (``robustfl.cli.render``) and the heatmap (``robustfl.cli.plots``) read the same
summary, so every view shows the same numbers.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scipy import stats

from robustfl.errors import ConfigError
from robustfl.simulation.results import Cell, clean_number

FORMATS = ("table", "csv", "json", "markdown", "html")
DAGGER = "†"
GUARANTEE_NOTE = "† run outside the rule's guarantee (--allow-outside-guarantee: too few clients)"
# Severity bands of the final relative drift: below 0.1 safe, 0.5 weak, 1 poor, else broken.
BANDS = ((0.1, "safe"), (0.5, "weak"), (1.0, "poor"))
SEVERITY_METRICS = frozenset({"relative_drift"})

GroupKey = tuple[str, str, str]  # (sweep label, attack, defense)


def format_value(x: float) -> str:
    return f"{x:.3g}"


def sweep_label(sweep: Mapping[str, Any]) -> str:
    """``threat.byzantine=0.1, federation.clients=50``; empty when the cell has no sweep point."""
    return ", ".join(f"{k}={_plain(v)}" for k, v in sweep.items())


def _plain(v: Any) -> str:
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
        ci95 = float(stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)) if n > 1 else math.nan
        text = f"{format_value(mean)} ± {std:.2g}"
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
    }


def summarize(cells: Iterable[Cell], metric: str = "relative_drift") -> dict[GroupKey, dict[str, Any]]:
    """``{(sweep label, attack, defense): summary}`` over seeds, in first-seen order (see module doc)."""
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


def caption(summary: Mapping[GroupKey, Mapping[str, Any]], metric: str) -> str:
    seeds = sorted({g["ok"] + g["diverged"] + g["failed"] for g in summary.values()})
    over = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    text = f"final {metric}: mean ± std over {over} seed{'s' if seeds[-1] != 1 else ''}"
    if any(g["outside_guarantee"] for g in summary.values()):
        text += "\n" + GUARANTEE_NOTE
    return text


# -- flat formats -------------------------------------------------------------------------------


def _finite(x: Any) -> Any:
    """The same structure with every non-finite float as None (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def to_csv(cells: Iterable[Cell]) -> str:
    """One row per cell: ``Cell.record()`` (identity, status, sweep values, final metrics), plus
    ``key`` when the cells carry one. Missing values are empty fields."""
    cells = list(cells)
    records = [c.record() for c in cells]
    if any(c.key for c in cells):
        for r, c in zip(records, cells, strict=True):
            r["key"] = c.key
    fields: dict[str, None] = {}
    for r in records:
        fields.update(dict.fromkeys(r))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(fields), restval="", lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: "" if v is None else v for k, v in r.items()})
    return out.getvalue()


def to_json(
    cells: Iterable[Cell],
    scenario: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> str:
    """The matrix document of ``--json``: ``{"scenario", "provenance", "cells": [CELL, ...]}``,
    strict JSON (non-finite numbers become null)."""
    doc = {
        "scenario": dict(scenario or {}),
        "provenance": dict(provenance or {}),
        "cells": [c.to_json() for c in cells],
    }
    return json.dumps(_finite(doc), indent=2, allow_nan=False, default=str) + "\n"


# -- tables -------------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def to_markdown(cells: Iterable[Cell], metric: str = "relative_drift") -> str:
    """One Markdown table per sweep point: rows attacks, columns defenses, "mean ± std"."""
    summary = summarize(cells, metric)
    parts: list[str] = []
    for point, attacks, defenses in layout(summary):
        if point:
            parts.append(f"**{_md(point)}**\n")
        lines = ["| attack \\\\ defense | " + " | ".join(_md(d) for d in defenses) + " |"]
        lines.append("|---|" + "---|" * len(defenses))
        for a in attacks:
            row = []
            for d in defenses:
                g = summary.get((point, a, d))
                mark = f" {DAGGER}" if g is not None and g["outside_guarantee"] else ""
                row.append("—" if g is None else _md(g["text"]) + mark)
            lines.append(f"| {_md(a)} | " + " | ".join(row) + " |")
        parts.append("\n".join(lines) + "\n")
    if summary:
        parts.append(caption(summary, metric).replace("\n", "  \n") + "\n")
    return "\n".join(parts)


_HTML_COLOURS = {
    "safe": "#c8e6c9",
    "weak": "#fff59d",
    "poor": "#ffcc80",
    "broken": "#ef9a9a",
    "diverged": "#ef9a9a",
    "failed": "#e1bee7",
}


def to_html(cells: Iterable[Cell], metric: str = "relative_drift") -> str:
    """A standalone HTML page: one table per sweep point, cells coloured by severity."""
    summary = summarize(cells, metric)
    e = html.escape
    body: list[str] = []
    for point, attacks, defenses in layout(summary):
        if point:
            body.append(f"<h2>{e(point)}</h2>")
        body.append('<table class="robustfl-matrix">')
        body.append("<thead><tr><th>attack \\ defense</th>" + "".join(f"<th>{e(d)}</th>" for d in defenses))
        body.append("</tr></thead><tbody>")
        for a in attacks:
            tds = []
            for d in defenses:
                g = summary.get((point, a, d))
                if g is None:
                    tds.append("<td>—</td>")
                    continue
                colour = _HTML_COLOURS.get(severity(g) or "", "")
                style = f' style="background:{colour}"' if colour else ""
                mark = f" {DAGGER}" if g["outside_guarantee"] else ""
                tds.append(f"<td{style}>{e(g['text'] + mark)}</td>")
            body.append(f"<tr><th>{e(a)}</th>{''.join(tds)}</tr>")
        body.append("</tbody></table>")
    if summary:
        body.append("<p>" + "<br>".join(e(line) for line in caption(summary, metric).splitlines()) + "</p>")
    style = (
        "body{font-family:sans-serif}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #999;padding:.3em .6em;text-align:right}th{background:#eee}"
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>robustfl results</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def render(
    cells: Iterable[Cell],
    format: str,
    metric: str = "relative_drift",
    scenario: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> str:
    """The text of one non-terminal format: ``csv``, ``json``, ``markdown`` or ``html``."""
    if format == "csv":
        return to_csv(cells)
    if format == "json":
        return to_json(cells, scenario, provenance)
    if format == "markdown":
        return to_markdown(cells, metric)
    if format == "html":
        return to_html(cells, metric)
    raise ConfigError(f"report: format must be one of {', '.join(FORMATS)}, got {format!r}")
