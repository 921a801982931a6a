"""The flat formats of ``robustfl report``: CSV, JSON and Markdown, and :func:`render`, which
picks one (``html`` is the one HTML page, :func:`robustfl.reporting.page.page`).

Given ``published`` comparisons (:mod:`robustfl.reporting.published`), the Markdown view ends
with a "measured vs published" section per table and the JSON document gains a ``"published"``
list; without them (or with an empty list) they are as before.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from robustfl.errors import ConfigError
from robustfl.simulation.results import Cell

from . import published as _published
from .kappa_hat import VERSUS_ROW, cell_kappa, worst_notes
from .settings import settings_note
from .summaries import (
    DAGGER,
    WORST_ROW,
    axis_caption,
    axis_views,
    caption,
    convergence_note,
    format_seconds,
    layout,
    mean_elapsed,
    summarize,
    sweep_label,
    worst_case,
)

FORMATS = ("table", "csv", "json", "markdown", "html")

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


def to_csv(cells: Iterable[Cell], convergence: Sequence[Mapping[str, Any]] = ()) -> str:
    """One row per cell: ``Cell.record()`` (identity, status, sweep values, final metrics), plus
    ``key`` when the cells carry one, and, given the clean runs' ``convergence`` verdicts, the
    verdict of the cell's setting and seed: ``clean_converged`` (true/false) and
    ``clean_convergence`` (the criterion's value); ``kappa``, the cell's κ̂
    (:func:`~robustfl.reporting.kappa_hat.cell_kappa`), when some cell recorded one. Missing values
    are empty fields."""
    cells = list(cells)
    records = [c.record() for c in cells]
    if any(c.key for c in cells):
        for r, c in zip(records, cells, strict=True):
            r["key"] = c.key
    kappas = [cell_kappa(c) for c in cells]
    if any(k is not None for k in kappas):
        for r, k in zip(records, kappas, strict=True):
            r["kappa"] = k
    if convergence:
        found = {(sweep_label(v.get("sweep") or {}), v.get("seed")): v for v in convergence}
        for r, c in zip(records, cells, strict=True):
            v = found.get((sweep_label(c.sweep), c.seed))
            r["clean_converged"] = None if v is None else bool(v.get("converged"))
            r["clean_convergence"] = None if v is None else v.get("value")
    fields: dict[str, None] = {}
    for r in records:
        fields.update(dict.fromkeys(r))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(fields), restval="", lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: "" if v is None else v for k, v in r.items()})
    return out.getvalue()


_GROUP_KEYS = ("attack", "defense", "metric", "status", "text", "n", "mean", "std", "ci95", "ok", "diverged",
               "failed", "outside_guarantee", "kappa")
_WORST_KEYS = ("defense", "metric", "status", "attack", "mean", "text", "kappa", "by_attack",
               "kappa_by_attack", "missing", "outside_guarantee", "vs_fixed")


def to_json(
    cells: Iterable[Cell],
    scenario: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    published: Sequence[_published.Comparison] = (),
    *,
    runs: Sequence[Mapping[str, Any]] = (),
    setting_keys: Sequence[str] = (),
    metric: str = "relative_drift",
    convergence: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The matrix document of ``--json``: ``{"scenario", "provenance", "cells": [CELL, ...]}``
    (``scenario`` and ``provenance`` of the last run), strict JSON (non-finite numbers become
    null), and beside those:

    * ``"settings"``: ``{"keys": [the dotted keys that differ between the store's settings],
      "points": [{"setting": {key: value}, "label", "cells"}]}``; every CELL also carries one
      field per differing key, named as the key (``"threat.byzantine": 0.4``), like the CSV;
    * ``"groups"``: one summary per (setting, attack, defense) over seeds (:func:`summarize`):
      ``setting`` (the sweep point, with the setting keys), ``attack``, ``defense``, ``metric``,
      ``status``, ``text``, ``n``, ``mean``, ``std``, ``ci95`` (the ± of every view), ``ok``,
      ``diverged``, ``failed``, ``outside_guarantee``, ``kappa`` (the mean κ̂ over seeds, null
      without one: :mod:`~robustfl.reporting.kappa_hat`);
    * ``"worst_case"``: per (setting, defense) the worst attack (:func:`worst_case`): ``setting``,
      ``defense``, ``metric``, ``status``, ``attack``, ``mean``, ``text``, ``kappa`` (its κ̂),
      ``by_attack``, ``kappa_by_attack``, ``missing``, ``outside_guarantee`` and ``vs_fixed``
      (null, or the ``worst_case`` attack against the worst fixed one: ``attack``, ``mean``,
      ``kappa``, ``worst_case_mean``, ``worst_case_kappa``, ``gap``, ``kappa_ratio``, ...);
    * ``"runs"``: every run the store recorded, ``{"id", "started", "scenario", "provenance"}``;
    * ``"convergence"``: the clean run's verdict per setting and seed
      (:mod:`~robustfl.simulation.convergence`: ``criterion``, ``value``, ``threshold``,
      ``converged``, ``round``, ``rounds``, ``seed``, ``sweep``, ...), empty when it has none;
    * with ``published`` comparisons, ``"published": [COMPARISON, ...]``
      (:meth:`~robustfl.reporting.published.Comparison.to_json`)."""
    cells = list(cells)
    docs = []
    for c in cells:
        d = c.to_json()
        d.update({k: c.sweep.get(k) for k in setting_keys})
        docs.append(d)
    points: dict[str, dict[str, Any]] = {}
    for c in cells:
        label = sweep_label(c.sweep)
        entry = points.setdefault(label, {"setting": dict(c.sweep), "label": label, "cells": 0})
        entry["cells"] += 1
    groups = [
        {"setting": dict(g["sweep"]), **{k: g[k] for k in _GROUP_KEYS}}
        for g in summarize(cells, metric).values()
    ]
    worst = [
        {"setting": dict(w["sweep"]), **{k: w[k] for k in _WORST_KEYS}}
        for w in worst_case(cells, metric).values()
    ]
    doc: dict[str, Any] = {
        "scenario": dict(scenario or {}),
        "provenance": dict(provenance or {}),
        "cells": docs,
        "settings": {"keys": list(setting_keys), "points": list(points.values())},
        "groups": groups,
        "worst_case": worst,
        "runs": [dict(r) for r in runs],
        "convergence": [dict(v) for v in convergence],
    }
    if published:
        doc["published"] = [c.to_json() for c in published]
    return json.dumps(_finite(doc), indent=2, allow_nan=False, default=str) + "\n"


# -- Markdown -----------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def _md_table(corner: str, columns: Sequence[str], rows: Sequence[tuple[str, list[str]]], sep: str) -> str:
    lines = [f"| {corner} \\\\ defense | " + " | ".join(_md(c) for c in columns) + " |"]
    lines.append("|---|" + sep * len(columns))
    lines += [f"| {head} | " + " | ".join(row) + " |" for head, row in rows]
    return "\n".join(lines) + "\n"


def to_markdown(
    cells: Iterable[Cell],
    metric: str = "relative_drift",
    show_time: bool | None = None,
    published: Sequence[_published.Comparison] = (),
    setting_keys: Sequence[str] = (),
    convergence: Sequence[Mapping[str, Any]] = (),
) -> str:
    """One Markdown table per sweep point (and setting: see
    :func:`~robustfl.reporting.settings.annotate`; ``setting_keys`` named above them): rows
    attacks, columns defenses, "mean ± 95 % half-width" (:func:`caption`), and a "worst case"
    row (:func:`worst_case`, with the worst attack's κ̂) when there are several attacks, and a
    "worst_case vs best fixed" row where the ``worst_case`` attack ran (:mod:`.kappa_hat`); then,
    for a sweep, one table per sweep key (:func:`axis_views`, numbers right-aligned); then, with
    ``show_time`` (default: when the cells recorded their run times), the mean compute time per
    cell (:func:`mean_elapsed`); then a "measured vs published" section per ``published``
    comparison."""
    cells = list(cells)
    summary = summarize(cells, metric)
    worst = worst_case(cells, metric)
    parts: list[str] = []
    if setting_keys:
        parts.append(_md(settings_note(setting_keys, cells)) + "\n")
    for point, attacks, defenses in layout(summary):
        if point:
            parts.append(f"**{_md(point)}**\n")
        rows: list[tuple[str, list[str]]] = []
        for a in attacks:
            row = []
            for d in defenses:
                g = summary.get((point, a, d))
                mark = f" {DAGGER}" if g is not None and g["outside_guarantee"] else ""
                row.append("—" if g is None else _md(g["text"]) + mark)
            rows.append((_md(a), row))
        if len(attacks) > 1:
            rows.append((f"**{WORST_ROW}**", [_md(worst[(point, d)]["text"]) for d in defenses]))
            versus = [worst[(point, d)]["vs_fixed"] for d in defenses]
            if any(versus):  # the worst_case attack ran: set against the worst fixed attack
                rows.append((f"**{_md(VERSUS_ROW)}**", [_md(v["text"]) if v else "—" for v in versus]))
        parts.append(_md_table("attack", defenses, rows, "---|"))
        unsettled = convergence_note(convergence, point)  # the clean run not converged: said here
        if unsettled:
            parts.append(f"**{_md(unsettled)}**\n")
    if summary:
        tabled = {point for point, attacks, _ in layout(summary) if len(attacks) > 1}  # with a worst row
        shown = [w for (point, _), w in worst.items() if point in tabled]
        text = "\n".join(t for t in (caption(summary, metric, colours=False), worst_notes(shown)) if t)
        parts.append(text.replace("\n", "  \n") + "\n")
    for key, view in axis_views(cells, metric).items():
        table = view["rows"]
        rows = [
            (_md(v), [_md(table[(v, d)]["text"]) if (v, d) in table else "—" for d in view["defenses"]])
            for v in view["values"]
        ]
        rows.append((f"**{WORST_ROW}**", [_md(view["worst"][d]["text"]) for d in view["defenses"]]))
        parts.append(f"**by {_md(key)}**\n")
        parts.append(_md_table(_md(key), view["defenses"], rows, "---:|"))
        parts.append(axis_caption(view, metric) + "\n")
    times = mean_elapsed(cells)
    if show_time or (show_time is None and times):
        for point, attacks, defenses in layout(summary):
            parts.append(f"**compute time per cell{', ' + _md(point) if point else ''}**\n")
            rows = []
            for a in attacks:
                keys = [(point, a, d) for d in defenses]
                rows.append((_md(a), [format_seconds(times[k]) if k in times else "—" for k in keys]))
            parts.append(_md_table("attack", defenses, rows, "---:|"))
        parts.append("compute time: a cell's elapsed_s, mean over its seeds\n")
    if published:
        parts.append(_published.to_markdown(published))
    return "\n".join(parts)


def render(
    cells: Iterable[Cell],
    format: str,
    metric: str = "relative_drift",
    scenario: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    published: Sequence[_published.Comparison] = (),
    *,
    runs: Sequence[Mapping[str, Any]] = (),
    setting_keys: Sequence[str] = (),
    convergence: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The text of one non-terminal format: ``csv``, ``json``, ``markdown`` or ``html`` (the
    page of :func:`robustfl.reporting.page.page`, under its default title); ``published``
    comparisons go into json, markdown and html (csv stays one row per cell); ``runs`` (every run
    of the store) into json and html; ``setting_keys`` (the keys that tell the store's settings
    apart, :func:`~robustfl.reporting.settings.annotate`) are named in every format; so are the
    clean runs' ``convergence`` verdicts that say "not converged" (and every verdict in json and
    csv)."""
    if format == "csv":
        return to_csv(cells, convergence)
    if format == "json":
        return to_json(
            cells,
            scenario,
            provenance,
            published,
            runs=runs,
            setting_keys=setting_keys,
            metric=metric,
            convergence=convergence,
        )
    if format == "markdown":
        return to_markdown(
            cells, metric, published=published, setting_keys=setting_keys, convergence=convergence
        )
    if format == "html":  # the one HTML page (it draws its figures: matplotlib is imported then)
        from .page import page

        return page(
            cells,
            scenario,
            provenance,
            metric=metric,
            published=published,
            runs=runs,
            setting_keys=setting_keys,
            convergence=convergence,
        )
    if format == "table":  # the terminal table is the command line's (robustfl.cli.render)
        raise ConfigError("render: 'table' is the terminal's view (robustfl report); here use csv, json, "
                          "markdown or html")
    raise ConfigError(f"render: format must be one of csv, json, markdown, html, got {format!r}")
