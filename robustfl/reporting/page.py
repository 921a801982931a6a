"""``robustfl report STORE --format html``: one self-contained HTML page for a results store.

The page needs nothing but itself: no scripts, no external stylesheet, font or image; every
figure is a PNG inlined as a ``data:image/png;base64`` URI. It shows, per sweep point:

* the heatmap of the final relative drift (:func:`robustfl.reporting.heatmap.heatmap`);
* a table of the final relative drift (and accuracy, on classification tasks): the mean over
  seeds ± the half-width of its two-sided 95 % Student-t interval,
  ``t_{0.975, n-1} · s / sqrt(n)`` (from :func:`robustfl.reporting.summaries.summarize`), coloured
  by severity, with diverged and failed seeds counted; with several attacks, a "worst case" row
  (the worst attack per defense with its κ̂) and, where the ``worst_case`` attack ran, a
  "worst_case vs best fixed" row (:mod:`robustfl.reporting.kappa_hat`);
* drift curves: relative drift over rounds, one small plot per attack with a line per defense,
  the mean over seeds and a light 95 % band (the same t interval, per round, over the seeds that
  reached that round), drawn where at least three seeds did;
* weight diagnostics for the rules that give rows weights (FedSim, FLTrust, FedAvg, Krum, ...):
  the Byzantine rows' total weight share and the detection precision and recall ("weight exactly
  zero" as a flag) over rounds, per attack that has Byzantine clients;
* for a store whose scenario has published tables (:mod:`robustfl.reporting.published`), the
  measured error (and backdoor success) rates beside the paper's, with the cells outside the
  tolerance flagged and Kendall's tau per attack;
* under a table whose clean run (attack none, defense fedavg) has not converged by the criterion
  of :mod:`robustfl.simulation.convergence`, a "clean FedAvg run not converged: ..." line;
* the failed cells with their errors, and the provenance of every run written to the store
  (versions, overrides, where each attack and defense came from, the scenario's hash, the
  scenario itself), each headed by its values of the keys that tell the store's settings apart.

A store holding several settings (two runs with different ``--set`` values) shows one table,
heatmap panel and set of curves per setting, never pooled
(:func:`robustfl.reporting.settings.annotate`).
Colours follow the one severity scale of every view (``summaries.BAND_COLOURS``), stated under
each table; ± is the 95 % Student-t half-width everywhere.

The curves are drawn by :mod:`robustfl.reporting.curves`; matplotlib is imported only when a
page is drawn.
"""

from __future__ import annotations

import base64
import html
import json
import math
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from robustfl.simulation.results import Cell, clean_number

from . import published as _published
from . import summaries
from .curves import BAND_MIN_SEEDS, diagnostics_figure, drift_figure
from .kappa_hat import VERSUS_ROW, worst_notes
from .settings import run_setting, settings_note

_PROVENANCE_KEYS = ("robustfl", "torch", "numpy", "python", "platform", "scenario_hash", "scenario_path")
_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222;max-width:1250px}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.05em}
table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #aaa;padding:.25em .55em;text-align:right;font-size:.9em}
th{background:#eee}td.l,th.l{text-align:left}
img{max-width:100%;height:auto;display:block;margin:.5em 0}
.note{color:#555;font-size:.9em}
.not-converged{color:#b71c1c;font-size:.9em}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.8em}
nav a{margin-right:1em}
"""


def cell_text(group: Mapping[str, Any]) -> str:
    """A summary group's text, the same as every other view's (``mean ± 95 % half-width``, its
    diverged / failed seeds noted), with ``†`` when run outside the rule's guarantee."""
    text = str(group["text"])
    if group["outside_guarantee"]:
        text += f" {summaries.DAGGER}"
    return text


# -- figures ------------------------------------------------------------------------------------


def _png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _heatmap_png(cells: Sequence[Cell], metric: str, title: str | None = None) -> bytes:
    from .heatmap import heatmap

    with tempfile.TemporaryDirectory(prefix="robustfl-html-") as tmp:
        path = heatmap(cells, Path(tmp) / "heatmap.png", metric, title=title)
        return path.read_bytes()


def _groups(cells: Iterable[Cell]) -> dict[str, dict[str, dict[str, list[Cell]]]]:
    """``{sweep label: {attack: {defense: [cells over seeds]}}}`` in first-seen order."""
    out: dict[str, dict[str, dict[str, list[Cell]]]] = {}
    for c in cells:
        by_attack = out.setdefault(summaries.sweep_label(c.sweep), {})
        by_attack.setdefault(c.attack, {}).setdefault(c.defense, []).append(c)
    return out


# -- the page -----------------------------------------------------------------------------------


def _img(png: bytes, alt: str) -> str:
    return f'<img src="{_png_uri(png)}" alt="{html.escape(alt)}">'


def _worst_rows(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The table's foot: the "worst case" row (the worst attack, its κ̂) and, where the
    ``worst_case`` attack ran, the "worst_case vs best fixed" row."""
    e = html.escape
    tds = []
    for w in entries:
        colour = summaries.BAND_COLOURS.get(w["severity"] or "", "")
        style = f' style="background:{colour}"' if colour else ""
        tds.append(f"<td{style}>{e(cell_text(w))}</td>")
    rows = [f'<tr><th class="l">{e(summaries.WORST_ROW)}</th>{"".join(tds)}</tr>']
    if any(w["vs_fixed"] for w in entries):
        versus = "".join(f"<td>{e(w['vs_fixed']['text']) if w['vs_fixed'] else '—'}</td>" for w in entries)
        rows.append(f'<tr><th class="l">{e(VERSUS_ROW)}</th>{versus}</tr>')
    return ["<tfoot>", *rows, "</tfoot>"]


def _table(
    cells: Sequence[Cell], metric: str, convergence: Sequence[Mapping[str, Any]] = ()
) -> list[str]:
    e = html.escape
    summary = summaries.summarize(cells, metric)
    worst = summaries.worst_case(cells, metric)
    shown: list[Mapping[str, Any]] = []  # the worst cases in a table (with several attacks)
    out: list[str] = []
    for point, attacks, defenses in summaries.layout(summary):
        if point:
            out.append(f"<h3>{e(point)}</h3>")
        out.append(f'<table class="matrix" data-metric="{e(metric)}">')
        out.append(
            '<thead><tr><th class="l">attack \\ defense</th>' + "".join(f"<th>{e(d)}</th>" for d in defenses)
        )
        out.append("</tr></thead><tbody>")
        for a in attacks:
            tds = []
            for d in defenses:
                g = summary.get((point, a, d))
                if g is None:
                    tds.append("<td>—</td>")
                    continue
                colour = summaries.BAND_COLOURS.get(summaries.severity(g) or "", "")
                style = f' style="background:{colour}"' if colour else ""
                tds.append(f"<td{style}>{e(cell_text(g))}</td>")
            out.append(f'<tr><th class="l">{e(a)}</th>{"".join(tds)}</tr>')
        out.append("</tbody>")
        if len(attacks) > 1:
            entries = [worst[(point, d)] for d in defenses]
            shown += entries
            out += _worst_rows(entries)
        out.append("</table>")
        unsettled = summaries.convergence_note(convergence, point)  # the clean run has not converged
        if unsettled:
            out.append(f'<p class="not-converged"><strong>{e(unsettled)}</strong></p>')
    if summary:
        lines = [*summaries.caption(summary, metric).splitlines(), *worst_notes(shown).splitlines()]
        note = "<br>".join(e(line) for line in lines)
        out.append(f'<p class="note">{note}</p>')
    return out


def _failures(cells: Sequence[Cell]) -> list[str]:
    e = html.escape
    bad = [c for c in cells if c.status == "failed"]
    if not bad:
        return []
    out = [f'<h2 id="failed">Failed cells ({len(bad)})</h2>', "<table><thead><tr>"]
    out.append('<th class="l">setting</th><th class="l">attack</th><th class="l">defense</th><th>seed</th>')
    out.append('<th class="l">error</th></tr></thead><tbody>')
    for c in bad:
        out.append(
            f'<tr><td class="l">{e(summaries.sweep_label(c.sweep))}</td><td class="l">{e(c.attack)}</td>'
            f'<td class="l">{e(c.defense)}</td><td>{c.seed}</td><td class="l">{e(c.error or "")}</td></tr>'
        )
    out.append("</tbody></table>")
    return out


def _run_rows(provenance: Mapping[str, Any]) -> list[tuple[str, str]]:
    prov = dict(provenance)
    rows: list[tuple[str, str]] = []
    for key in _PROVENANCE_KEYS:
        if prov.get(key) is not None:
            rows.append((key, str(prov[key])))
    if prov.get("overrides"):
        rows.append(("overrides", " ".join(str(o) for o in prov["overrides"])))
    created = prov.get("created")
    if isinstance(created, int | float) and math.isfinite(created):
        rows.append(("run started", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created))))
    known = {*_PROVENANCE_KEYS, "overrides", "created", "origins"}
    rows += [
        (k, v if isinstance(v, str) else json.dumps(v, default=str))
        for k, v in prov.items()
        if k not in known
    ]
    return rows


def _one_run(
    scenario: Mapping[str, Any] | None, provenance: Mapping[str, Any] | None, heading: str | None
) -> list[str]:
    e = html.escape
    prov = dict(provenance or {})
    out = ['<div class="run">']
    if heading:
        out.append(f"<h3>{e(heading)}</h3>")
    out.append('<table class="provenance"><tbody>')
    out += [f'<tr><th class="l">{e(k)}</th><td class="l">{e(v)}</td></tr>' for k, v in _run_rows(prov)]
    out.append("</tbody></table>")
    origins = prov.get("origins") or {}
    if isinstance(origins, Mapping) and origins:
        out.append("<details><summary>where each attack and defense came from</summary>")
        out.append('<table class="origins"><thead><tr><th class="l">name</th><th class="l">origin</th></tr>')
        out.append("</thead><tbody>")
        out += [
            f'<tr><td class="l">{e(str(k))}</td><td class="l">{e(str(v))}</td></tr>'
            for k, v in origins.items()
        ]
        out.append("</tbody></table></details>")
    if scenario:
        text = json.dumps(scenario, indent=1, sort_keys=False, default=str, allow_nan=True)
        out.append(f"<details><summary>scenario (resolved)</summary><pre>{e(text)}</pre></details>")
    out.append("</div>")
    return out


def _provenance(
    scenario: Mapping[str, Any] | None,
    provenance: Mapping[str, Any] | None,
    runs: Sequence[Mapping[str, Any]] = (),
    setting_keys: Sequence[str] = (),
) -> list[str]:
    """Every run written to the store, oldest first (each with its versions, overrides, origins
    and resolved scenario, headed by its values of the setting keys); without ``runs``, the one
    ``scenario`` / ``provenance`` given."""
    out = ['<h2 id="provenance">Provenance</h2>']
    if not runs:
        if not provenance and not scenario:
            out.append('<p class="note">The store records no run.</p>')
            return out
        return out + _one_run(scenario, provenance, None)
    out.append(
        f'<p class="note">{len(runs)} run{"s" if len(runs) != 1 else ""} wrote to this store, oldest '
        "first (each with its own values of the keys that tell the settings apart).</p>"
    )
    for i, run in enumerate(runs, 1):
        head = f"run {i} of {len(runs)}"
        setting = run_setting(run, setting_keys)
        if setting:
            head += f": {setting}"
        out += _one_run(run.get("scenario"), run.get("provenance"), head)
    return out


def page(
    cells: Iterable[Cell],
    scenario: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    *,
    metric: str = "relative_drift",
    title: str = "robustfl results",
    published: Sequence[_published.Comparison] = (),
    runs: Sequence[Mapping[str, Any]] = (),
    setting_keys: Sequence[str] = (),
    convergence: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The whole HTML page (see the module docstring); ``convergence``: the clean runs' verdicts
    (:mod:`robustfl.simulation.convergence`), a "not converged" line under each table whose clean
    run has not converged; ``published``: the comparisons with
    published tables to show (none by default); ``runs``: every run of the store, for the
    provenance (default: the one ``scenario`` / ``provenance``); ``setting_keys``: the keys that
    tell the store's settings apart (the cells' sweep points carry them,
    :func:`~robustfl.reporting.settings.annotate`)."""
    cells = list(cells)
    e = html.escape
    body: list[str] = [f"<h1>{e(title)}</h1>"]
    statuses = {s: sum(c.status == s for c in cells) for s in ("ok", "diverged", "failed")}
    body.append(
        f'<p class="note">{len(cells)} cells: {statuses["ok"]} ok, {statuses["diverged"]} diverged, '
        f"{statuses['failed']} failed.</p>"
    )
    if not cells:
        body.append("<p>The store holds no cells yet.</p>")
        body += _provenance(scenario, provenance, runs, setting_keys)
        return _document(title, body)
    body.append(
        '<nav><a href="#matrix">matrix</a><a href="#curves">drift curves</a>'
        '<a href="#diagnostics">weight diagnostics</a>'
        + ('<a href="#published">measured vs published</a>' if published else "")
        + ('<a href="#failed">failed cells</a>' if statuses["failed"] else "")
        + '<a href="#provenance">provenance</a></nav>'
    )
    if setting_keys:
        body.append(f"<p><strong>{e(settings_note(setting_keys, cells))}</strong></p>")
    body.append('<h2 id="matrix">Final relative drift</h2>')
    heading = f"final {metric.replace('_', ' ')} by attack and defense (mean over seeds)"
    body.append(_img(_heatmap_png(cells, metric, heading), f"heatmap of the final {metric}"))
    body += _table(cells, metric, convergence)
    if any(clean_number(c.final.get("accuracy")) is not None for c in cells):
        body.append("<h2>Final accuracy</h2>")
        body += _table(cells, "accuracy")
    groups = _groups(cells)
    body.append('<h2 id="curves">Drift over rounds</h2>')
    body.append(
        f'<p class="note">{e(metric.replace("_", " "))} per round: mean over seeds; shaded, the 95 % '
        "Student-t band over the seeds that reached the round, drawn only where at least "
        f"{BAND_MIN_SEEDS} did (with 2 seeds t(0.975, 1) = 12.7 makes the band about 9 times the "
        "seeds' spread: it would hide the curves and say little). The axes fit the seeds' values; "
        "a wider band is cut at the edge.</p>"
    )
    for point, attacks in groups.items():
        if point:
            body.append(f"<h3>{e(point)}</h3>")
        png = drift_figure(attacks, metric)
        body.append(_img(png, f"{metric} over rounds {point}") if png else '<p class="note">no values</p>')
    body.append('<h2 id="diagnostics">Weight diagnostics</h2>')
    body.append(
        '<p class="note">For rules that weight rows (FedSim, FLTrust, FedAvg, Krum, ...): the total '
        "weight given to Byzantine rows, and the precision and recall of “weight exactly zero” as a "
        f"Byzantine flag; mean over seeds, with a 95 % band where at least {BAND_MIN_SEEDS} seeds ran.</p>"
    )
    for point, attacks in groups.items():
        png = diagnostics_figure(attacks)
        if point:
            body.append(f"<h3>{e(point)}</h3>")
        body.append(
            _img(png, f"weight diagnostics {point}")
            if png
            else '<p class="note">No rule here reports row weights under an attack.</p>'
        )
    if published:
        body.append('<h2 id="published">Measured vs published</h2>')
        body.append(_published.to_html(published, heading="h3"))
    body += _failures(cells)
    body += _provenance(scenario, provenance, runs, setting_keys)
    return _document(title, body)


def _document(title: str, body: Sequence[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
