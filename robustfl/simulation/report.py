"""Views of results that need no terminal: summaries over seeds, CSV, JSON, Markdown and HTML.

:func:`summarize` groups cells by (sweep point, attack, defense) and summarises one final
metric over the seeds of each group. A store may hold several settings (runs with different
``--set`` values): :func:`load_store` / :func:`annotate` add the configuration keys that differ
between them to every cell's sweep point, so a group is always one setting, never several pooled
(see "settings" below).

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
The rich table (``robustfl.cli.render``) and the heatmap (``robustfl.cli.plots``) read the same
summary, so every view shows the same numbers, coloured by one fixed scale (``BANDS``,
``BAND_COLOURS``) stated on every view that has colours.

Worst cases and sweep axes, computed from those group means:

* :func:`worst_case`: per (sweep point, defense), the attack whose mean is worst -- the largest
  for error metrics (relative drift, ...), the smallest for ``accuracy`` and the detection
  rates; a diverged group (+inf) is worse than any value. Groups without a value (all seeds
  failed, or ``n/a``) are left out and counted. The tables end with this "worst case" row.
* :func:`axis_views`: for each sweep key, rows its values, columns the defenses; an entry
  summarises the worst cases over attacks at the sweep points with that value: ``mean`` over the
  other axes' values and ``worst`` of them (its text shows the worst only where it differs).
* :func:`mean_elapsed`: a cell's compute time (``elapsed_s``), mean over its seeds.

Given ``published`` comparisons (:mod:`robustfl.simulation.published`), the Markdown and HTML
views end with a "measured vs published" section per table and the JSON document gains a
``"published"`` list; without them (or with an empty list) they are as before.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy import stats

from robustfl.errors import ConfigError
from robustfl.simulation import convergence as _convergence
from robustfl.simulation import published as _published
from robustfl.simulation.results import Cell, clean_number

FORMATS = ("table", "csv", "json", "markdown", "html")
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
    return ", ".join(f"{k}={_plain(v)}" for k, v in sweep.items())


def _plain(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


# -- settings -----------------------------------------------------------------------------------
#
# A store holds whatever was run into it: two `robustfl matrix` runs with different `--set`
# values write two settings into one file. A cell's setting is its stored configuration (what
# `runner.cell_config` hashes into its key): the scenario's values as dotted keys. The views
# never pool different settings: :func:`annotate` adds every key whose value differs between the
# cells of a store to each cell's sweep point, so the grouping by sweep point that every view
# already does (tables, CSV columns, axis views, heatmap panels, published comparisons, compare)
# keeps the settings apart and names them (``threat.byzantine=0.4``). Keys swept by a
# ``matrix.sweep`` come first, in their order, then the other differing keys in the
# configuration's order. An attack (or defense) label that stands for different specifications in
# one store (``alie`` with z = 1 and with z = 1.5) is told apart the same way: the parameters that
# differ are appended to the label, ``alie (z=1.5)`` and ``alie (z=default)``.

_NO_SETTING = ("matrix", "bound", "attack", "defense")


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"threat": {"byzantine": 0.2}}`` -> ``{"threat.byzantine": 0.2}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def setting_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's setting: its stored configuration's scenario as dotted keys."""
    scenario = config.get("scenario") or {}
    return flatten({k: v for k, v in scenario.items() if k not in _NO_SETTING})


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def differing_keys(settings: Sequence[Mapping[str, Any]], first: Iterable[str] = ()) -> list[str]:
    """The dotted keys whose values are not the same in every setting (a key absent from some
    counts as differing); ``first`` (sweep keys) lead, in their order, then first-seen order."""
    seen: dict[str, set[str]] = {}
    for s in settings:
        for k in s:
            seen.setdefault(k, set())
    for s in settings:
        for k in seen:
            seen[k].add(_canon(s[k]) if k in s else "\0missing")
    differ = [k for k, values in seen.items() if len(values) > 1]
    lead = [k for k in dict.fromkeys(first) if k in differ]
    return lead + [k for k in differ if k not in lead]


def _spec_params(spec: Any) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return flatten({k: v for k, v in spec.items() if k != "label"})
    return {"name": spec}


def _relabel(pairs: Sequence[tuple[Cell, Mapping[str, Any]]], field: str) -> list[str]:
    """Each cell's ``field`` label, with the differing parameters appended where one label stands
    for several specifications in the store."""
    specs: dict[str, dict[str, dict[str, Any]]] = {}
    for cell, cfg in pairs:
        if field in cfg:
            p = _spec_params(cfg[field])
            specs.setdefault(getattr(cell, field), {})[_canon(p)] = p
    out = []
    for cell, cfg in pairs:
        label = str(getattr(cell, field))
        variants = specs.get(label, {})
        if len(variants) > 1 and field in cfg:
            p = _spec_params(cfg[field])
            keys = differing_keys(list(variants.values()))
            label += " (" + ", ".join(f"{k}={_plain(p[k]) if k in p else 'default'}" for k in keys) + ")"
        out.append(label)
    return out


def annotate(
    pairs: Sequence[tuple[Cell, Mapping[str, Any]]], keys: Sequence[str] | None = None
) -> tuple[list[Cell], list[str]]:
    """``(cells, keys)``: copies of the cells whose sweep points also carry the setting ``keys``
    (default: those that differ between the cells' configurations), and the keys. A cell whose
    configuration lacks a key gets None for it."""
    settings = [setting_of(cfg) for _, cfg in pairs]
    if keys is None:
        keys = differing_keys(settings, (k for c, _ in pairs for k in c.sweep))
    keys = list(keys)
    attacks, defenses = _relabel(pairs, "attack"), _relabel(pairs, "defense")
    cells = []
    for (cell, _), setting, attack, defense in zip(pairs, settings, attacks, defenses, strict=True):
        sweep = {k: v for k, v in cell.sweep.items() if k not in keys}
        sweep.update({k: cell.sweep[k] if k in cell.sweep else setting.get(k) for k in keys})
        cells.append(dataclasses.replace(cell, sweep=sweep, attack=attack, defense=defense))
    return cells, keys


@dataclasses.dataclass
class StoreView:
    """What a store holds, ready for the views: ``cells`` annotated with their settings
    (:func:`annotate`), the setting ``keys`` that differ, every run (oldest first) and the last
    run's ``scenario`` and ``provenance`` (the contract's JSON keys)."""

    path: str
    cells: list[Cell]
    keys: list[str]
    runs: list[dict[str, Any]]
    pairs: list[tuple[Cell, dict[str, Any]]]
    # the clean runs' convergence verdicts (convergence.py), their sweep points as the cells'
    convergence: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def scenario(self) -> dict[str, Any] | None:
        return self.runs[-1]["scenario"] if self.runs else None

    @property
    def provenance(self) -> dict[str, Any] | None:
        return self.runs[-1]["provenance"] if self.runs else None


def load_store(path: str | Path) -> StoreView:
    """Read a store for the views (see :class:`StoreView`)."""
    from robustfl.errors import StoreError
    from robustfl.simulation.store import Store

    with Store(path) as st:
        try:
            pairs = st.cells_with_configs()
        except (TypeError, AttributeError) as exc:  # a row whose JSON has the wrong shape
            raise StoreError(f"store {path} is corrupt: cannot read the cells: {exc}") from None
        runs = st.runs()
        cells, keys = annotate(pairs)
        verdicts = stored_verdicts(st, pairs, cells)
    return StoreView(str(path), cells, keys, runs, pairs, verdicts)


def stored_verdicts(
    store: Any, pairs: Sequence[tuple[Cell, Mapping[str, Any]]], annotated: Sequence[Cell]
) -> list[dict[str, Any]]:
    """The convergence verdict of each (setting, seed) of a store's cells: the one the matrix kept
    (refs row ``conv-<clean cell key>``), else read off the stored clean cell (attack none, defense
    fedavg) when it measured round floor(0.9 T); none for a setting that has neither. Each
    verdict's ``sweep`` is its cells' annotated sweep point, so the views match it to their tables."""
    by_key = {c.key: c for c, _ in pairs if c.key}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for (_, cfg), cell in zip(pairs, annotated, strict=True):
        if not cfg or "scenario" not in cfg:
            continue
        clean = _convergence.clean_key_of(cfg)
        if clean in seen:
            continue
        seen.add(clean)
        meta = store.get_ref_meta(_convergence.store_key(clean))
        v: dict[str, Any] | None = None
        if meta and isinstance(meta.get("verdict"), Mapping):
            v = dict(meta["verdict"])
        elif clean in by_key:
            rounds = ((cfg["scenario"] or {}).get("federation") or {}).get("rounds")
            every = ((cfg["scenario"] or {}).get("metrics") or {}).get("every", 1)
            if isinstance(rounds, int):
                v = _convergence.from_cell(by_key[clean], rounds, every=int(every))
        if v is not None:
            v["sweep"] = dict(cell.sweep)
            out.append(v)
    return out


def convergence_note(
    verdicts: Sequence[Mapping[str, Any]], point: str | None = None, with_criterion: bool = True
) -> str:
    """"clean FedAvg run not converged: ..." for the verdicts of sweep point ``point`` (all
    when None), with the criterion unless ``with_criterion`` is False, or "" when every clean run
    there converged (:mod:`robustfl.simulation.convergence`)."""
    if point is not None:
        verdicts = _convergence.by_point(verdicts, sweep_label).get(point, [])
    return _convergence.note(verdicts, with_criterion)


def settings_note(keys: Sequence[str], cells: Iterable[Cell] = ()) -> str:
    """One line saying which keys tell the store's settings apart (empty for one setting)."""
    if not keys:
        return ""
    points = {_canon({k: c.sweep.get(k) for k in keys}) for c in cells}
    n = f"{len(points)} settings" if points else "several settings"
    return (
        f"this store holds {n}, differing in {', '.join(keys)}: each table is one setting; "
        "numbers are never pooled across settings"
    )


def run_setting(run: Mapping[str, Any], keys: Sequence[str]) -> str:
    """``threat.byzantine=0.4`` for a run's values of the setting keys (``key=swept`` where the
    run's matrix swept it)."""
    scenario = run.get("scenario") or {}
    swept = dict((scenario.get("matrix") or {}).get("sweep") or {})
    flat = setting_of({"scenario": scenario})
    parts = []
    for k in keys:
        if k in swept:
            parts.append(f"{k}={_plain(swept[k])}")
        elif k in flat:
            parts.append(f"{k}={_plain(flat[k])}")
    return ", ".join(parts)


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
    (attacks without one), ``outside_guarantee`` and ``text`` (``0.54 (alie)``)."""
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
            "missing": missing,
            "outside_guarantee": any(g["outside_guarantee"] for g in groups),
        }
        if ran:
            worst = max(ran, key=lambda g: _badness(metric, g["status"], g["mean"]))  # first on ties
            entry.update(status=worst["status"], attack=worst["attack"], mean=worst["mean"])
            value = "diverged" if worst["status"] == "diverged" else format_value(worst["mean"])
            text = f"{value} ({worst['attack']}"
            text += f"; {len(missing)} without a value)" if missing else ")"
        else:
            status = "failed" if any(g["status"] == "failed" for g in groups) else "n/a"
            entry.update(status=status, attack=None, mean=math.nan)
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
            label = _plain(entry["sweep"][key])
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
    ``clean_convergence`` (the criterion's value). Missing values are empty fields."""
    cells = list(cells)
    records = [c.record() for c in cells]
    if any(c.key for c in cells):
        for r, c in zip(records, cells, strict=True):
            r["key"] = c.key
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
               "failed", "outside_guarantee")


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
      ``diverged``, ``failed``, ``outside_guarantee``;
    * ``"runs"``: every run the store recorded, ``{"id", "started", "scenario", "provenance"}``;
    * ``"convergence"``: the clean run's verdict per setting and seed
      (:mod:`~robustfl.simulation.convergence`: ``criterion``, ``value``, ``threshold``,
      ``converged``, ``round``, ``rounds``, ``seed``, ``sweep``, ...), empty when it has none;
    * with ``published`` comparisons, ``"published": [COMPARISON, ...]``
      (:meth:`~robustfl.simulation.published.Comparison.to_json`)."""
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
    doc: dict[str, Any] = {
        "scenario": dict(scenario or {}),
        "provenance": dict(provenance or {}),
        "cells": docs,
        "settings": {"keys": list(setting_keys), "points": list(points.values())},
        "groups": groups,
        "runs": [dict(r) for r in runs],
        "convergence": [dict(v) for v in convergence],
    }
    if published:
        doc["published"] = [c.to_json() for c in published]
    return json.dumps(_finite(doc), indent=2, allow_nan=False, default=str) + "\n"


# -- tables -------------------------------------------------------------------------------------


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
    """One Markdown table per sweep point (and setting: see :func:`annotate`; ``setting_keys``
    named above them): rows attacks, columns defenses, "mean ± 95 % half-width" (:func:`caption`),
    and a "worst case" row (:func:`worst_case`) when there are several attacks; then, for a sweep,
    one table per sweep key (:func:`axis_views`, numbers right-aligned); then, with ``show_time``
    (default: when the cells recorded their run times), the mean compute time per cell
    (:func:`mean_elapsed`); then a "measured vs published" section per ``published`` comparison."""
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
        parts.append(_md_table("attack", defenses, rows, "---|"))
        unsettled = convergence_note(convergence, point)  # the clean run not converged: said here
        if unsettled:
            parts.append(f"**{_md(unsettled)}**\n")
    if summary:
        parts.append(caption(summary, metric, colours=False).replace("\n", "  \n") + "\n")
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


_HTML_COLOURS = BAND_COLOURS


def to_html(
    cells: Iterable[Cell],
    metric: str = "relative_drift",
    published: Sequence[_published.Comparison] = (),
    setting_keys: Sequence[str] = (),
    convergence: Sequence[Mapping[str, Any]] = (),
) -> str:
    """A standalone HTML page: one table per sweep point and setting (with its "worst case" row),
    then one per sweep key (:func:`axis_views`), cells coloured by severity; then a "measured vs published"
    section per ``published`` comparison."""
    cells = list(cells)
    summary = summarize(cells, metric)
    worst = worst_case(cells, metric)
    e = html.escape

    def td(entry: Mapping[str, Any] | None) -> str:  # a worst case, or an axis view's entry
        if entry is None:
            return "<td>—</td>"
        colour = _HTML_COLOURS.get(entry["severity"] or "", "")
        style = f' style="background:{colour}"' if colour else ""
        return f"<td{style}>{e(entry['text'])}</td>"

    body: list[str] = []
    if setting_keys:
        body.append(f"<p>{e(settings_note(setting_keys, cells))}</p>")
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
        body.append("</tbody>")
        if len(attacks) > 1:
            tds = [td(worst[(point, d)]) for d in defenses]
            body.append(f"<tfoot><tr><th>{WORST_ROW}</th>{''.join(tds)}</tr></tfoot>")
        body.append("</table>")
        unsettled = convergence_note(convergence, point)
        if unsettled:
            body.append(f'<p class="not-converged"><strong>{e(unsettled)}</strong></p>')
    if summary:
        body.append("<p>" + "<br>".join(e(line) for line in caption(summary, metric).splitlines()) + "</p>")
    for key, view in axis_views(cells, metric).items():
        body.append(f"<h2>by {e(key)}</h2>")
        body.append('<table class="robustfl-axis">')
        heads = "".join(f"<th>{e(d)}</th>" for d in view["defenses"])
        body.append(f"<thead><tr><th>{e(key)} \\ defense</th>{heads}</tr></thead><tbody>")
        for v in view["values"]:
            tds = [td(view["rows"].get((v, d))) for d in view["defenses"]]
            body.append(f"<tr><th>{e(v)}</th>{''.join(tds)}</tr>")
        tds = [td(view["worst"][d]) for d in view["defenses"]]
        body.append(f"</tbody><tfoot><tr><th>{WORST_ROW}</th>{''.join(tds)}</tr></tfoot></table>")
        body.append(f"<p>{e(axis_caption(view, metric))}</p>")
    if published:
        body.append(_published.to_html(published))
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
    published: Sequence[_published.Comparison] = (),
    *,
    runs: Sequence[Mapping[str, Any]] = (),
    setting_keys: Sequence[str] = (),
    convergence: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The text of one non-terminal format: ``csv``, ``json``, ``markdown`` or ``html``;
    ``published`` comparisons go into json, markdown and html (csv stays one row per cell);
    ``runs`` (every run of the store) into json; ``setting_keys`` (the keys that tell the
    store's settings apart, :func:`annotate`) are named in every format; so are the clean runs'
    ``convergence`` verdicts that say "not converged" (and every verdict in json and csv)."""
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
    if format == "html":
        return to_html(cells, metric, published, setting_keys, convergence)
    raise ConfigError(f"report: format must be one of {', '.join(FORMATS)}, got {format!r}")
