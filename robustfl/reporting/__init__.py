"""Views of results that need no terminal: summaries over seeds, the store's settings, CSV, JSON
and Markdown, one HTML page with its figures, comparisons with published tables and between
stores.

Imports :mod:`robustfl.simulation` (cells, the store, convergence verdicts) and never
:mod:`robustfl.cli`; the terminal views in ``robustfl.cli`` read the same summaries. matplotlib is
imported only when a figure is drawn. The modules, bottom up:

* :mod:`.kappa_hat`: κ̂, the κ of (f, κ)-robustness a rule exhibited (max over a cell's rounds of
  aggregation_error²), and the ``worst_case`` attack set against the worst fixed one;
* :mod:`.summaries`: a final metric over seeds per (sweep point, attack, defense), its severity
  band and the one colour scale, worst cases, sweep-axis views, captions;
* :mod:`.settings`: the setting keys that tell a store's runs apart (never pooled);
* :mod:`.store_view`: a store read for the views;
* :mod:`.formats`: CSV, JSON, Markdown, and :func:`render` (any non-terminal format);
* :mod:`.page`: the one self-contained HTML page, with :mod:`.heatmap` and :mod:`.curves`;
* :mod:`.published`: published tables and the measured-vs-published comparison;
* :mod:`.compare`: two stores, cell by cell (``robustfl compare``).

The names of :mod:`.kappa_hat`, :mod:`.summaries`, :mod:`.settings`, :mod:`.store_view` and
:mod:`.formats` are importable from here.
"""

from __future__ import annotations

from .formats import (
    FORMATS,
    render,
    to_csv,
    to_json,
    to_markdown,
)
from .kappa_hat import (
    KAPPA,
    KAPPA_NOTE,
    NOT_FIXED,
    VERSUS_NOTE,
    VERSUS_ROW,
    WORST_CASE_ATTACK,
    cell_kappa,
    kappa_text,
    mean_kappa,
    versus_fixed,
    versus_lines,
    worst_notes,
)
from .settings import (
    annotate,
    differing_keys,
    flatten,
    run_setting,
    setting_of,
    settings_note,
)
from .store_view import (
    StoreView,
    load_store,
    stored_verdicts,
)
from .summaries import (
    BAND_COLOURS,
    BANDS,
    BANDS_NOTE,
    DAGGER,
    GUARANTEE_NOTE,
    HIGHER_IS_BETTER,
    ONE_SEED_NOTE,
    PLUS_MINUS,
    SEVERITY_METRICS,
    WORST_ROW,
    GroupKey,
    PointKey,
    axis_caption,
    axis_views,
    caption,
    convergence_note,
    format_seconds,
    format_value,
    layout,
    mean_elapsed,
    plain,
    severity,
    summarize,
    sweep_label,
    worst_case,
)

__all__ = [
    "BANDS",
    "BANDS_NOTE",
    "BAND_COLOURS",
    "DAGGER",
    "FORMATS",
    "GUARANTEE_NOTE",
    "GroupKey",
    "HIGHER_IS_BETTER",
    "KAPPA",
    "KAPPA_NOTE",
    "NOT_FIXED",
    "ONE_SEED_NOTE",
    "PLUS_MINUS",
    "PointKey",
    "SEVERITY_METRICS",
    "StoreView",
    "VERSUS_NOTE",
    "VERSUS_ROW",
    "WORST_CASE_ATTACK",
    "WORST_ROW",
    "annotate",
    "axis_caption",
    "axis_views",
    "caption",
    "cell_kappa",
    "convergence_note",
    "differing_keys",
    "flatten",
    "format_seconds",
    "format_value",
    "kappa_text",
    "layout",
    "load_store",
    "mean_elapsed",
    "mean_kappa",
    "plain",
    "render",
    "run_setting",
    "setting_of",
    "settings_note",
    "severity",
    "stored_verdicts",
    "summarize",
    "sweep_label",
    "to_csv",
    "to_json",
    "to_markdown",
    "versus_fixed",
    "versus_lines",
    "worst_case",
    "worst_notes",
]
