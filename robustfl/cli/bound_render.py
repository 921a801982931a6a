"""Terminal output of ``robustfl bound``: progress, the constants, each claim with its figure, the
Byzantine-fraction table, the root-size sweep and the verdict.

A thin rich layer over the report dict of :func:`robustfl.theory.bound.run_bound` (the JSON), so
the terminal, the JSON and the plot show the same numbers. Claim statuses: ``holds`` (green),
``fails`` (red), ``vacuous`` (yellow: the statement promises nothing here), ``finding`` (cyan: a
measurement reported with its interval, not a pass/fail). In the fraction table a value marked
``†`` was run outside the rule's guarantee (FedAvg with any Byzantine row, the median with
f >= K/2, Krum with K < 2f + 3); ``div`` is a run that diverged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .tables import StdoutConsole

STATUS_STYLES = {"holds": "bold green", "fails": "bold red", "vacuous": "bold yellow", "finding": "bold cyan"}
DAGGER = "†"


def _num(v: Any, spec: str = ".3g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, spec)


class BoundProgress:
    """A progress bar over the trajectories (nothing when quiet or not a terminal)."""

    def __init__(self, quiet: bool = False, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> BoundProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("bound", total=None)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=stage, completed=done, total=total)


def constants_table(r: Mapping[str, Any]) -> Table:
    c = r["constants"]
    t = Table(
        title="Theorem 1's constants", title_justify="left", show_header=False, box=None, padding=(0, 2)
    )
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_row(
        "mu, L (Sigma + l2 I)",
        f"{_num(c['mu'], '.4g')}, {_num(c['L'], '.4g')}",
        f"L/mu = {_num(c['cond'], '.3g')}",
    )
    t.add_row(
        "alpha (server step)",
        _num(c["alpha"], ".4g"),
        f"Lemma 2's mu/(2L^2) = {_num(c['alpha_lemma'], '.4g')}",
    )
    t.add_row("Lemma 2 factor", _num(c["lemma2_factor"], ".5f"), "sqrt(1 - mu^2/(4L^2))")
    t.add_row("rho (proof-supported)", _num(r["rho"], ".4g"), "at alpha, Delta2 = 0: an upper bound on rho")
    t.add_row("rho_literal", _num(r["rho_literal"], ".4g"), "the printed formula at alpha, Delta2 = 0")
    t.add_row(
        "sigma1, Delta1",
        f"{_num(c['sigma1'], '.4g')}, {_num(c['delta1'], '.4g')}",
        f"|D0| = {c['root_size']}, d = {c['dim']}, delta = {c['delta']}",
    )
    floor = c.get("theorem_floor")
    t.add_row("12 alpha Delta1 / rho", _num(floor, ".4g"), "no bound (rho <= 0)" if floor is None else "")
    return t


def claims_table(r: Mapping[str, Any]) -> Table:
    t = Table(title="Claims", title_justify="left", show_lines=True)
    t.add_column("status", no_wrap=True)
    t.add_column("claim", ratio=2)
    t.add_column("figure", ratio=3)
    for c in r["claims"]:
        figure = Text(c["figure"])
        if c.get("detail"):
            figure.append("\n" + c["detail"], style="dim")
        t.add_row(Text(c["status"], style=STATUS_STYLES.get(c["status"], "")), Text(c["claim"]), figure)
    return t


def fractions_table(r: Mapping[str, Any], seed: int | None = None) -> Table:
    """Final ||w^T - w*|| per attack x defense (rows) and Byzantine fraction (columns)."""
    rows = [row for row in r["fractions"] if seed is None or row["seed"] == seed]
    seed = rows[0]["seed"] if rows else 0
    rows = [row for row in rows if row["seed"] == seed]
    fracs = sorted({row["fraction"] for row in rows})
    t = Table(
        title=f"Final error ||w^T - w*|| by Byzantine fraction (seed {seed})",
        title_justify="left",
        caption=f"{DAGGER} outside the rule's guarantee; div = diverged",
        caption_justify="left",
    )
    t.add_column("attack")
    t.add_column("defense")
    for x in fracs:
        t.add_column(f"{x:g}", justify="right")
    cells: dict[tuple[str, str], dict[float, Mapping[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["attack"], row["defense"]), {})[row["fraction"]] = row
    last = None
    for (attack, defense), by in cells.items():
        if last is not None and attack != last:
            t.add_section()
        last = attack
        out: list[Text] = []
        for x in fracs:
            row = by.get(x)
            if row is None:
                out.append(Text("—", style="dim"))
                continue
            if row["status"] == "diverged" or row["final_error"] is None:
                text = Text("div", style="bold red")
            else:
                text = Text(_num(row["final_error"]))
            if not row["inside_guarantee"]:
                text.append(" " + DAGGER, style="dim")
            out.append(text)
        t.add_row(Text(attack), Text(defense, style="bold" if defense == "fltrust" else ""), *out)
    return t


def root_table(r: Mapping[str, Any]) -> Table:
    """Per root size: the mean root error at w*, 2 Delta1, the share of draws within it,
    ||w_D0 - w*||, and FLTrust's mean floor under each attack at the top fraction; last row: slopes."""
    fs = r["floor_slope"]
    attacks = list(r.get("floor_slopes", {fs["attack"]: fs}))
    t = Table(
        title=f"Root-size sweep: root error at w* over {r['settings']['draws']} draws; FLTrust's floor "
        f"(final error) at fraction {fs['fraction']:g} over {fs['draws']} draws (strongest: {fs['attack']})",
        title_justify="left",
    )
    for name in ("|D0|", "root err at w*", "2 Delta1", "within", "||w_D0 - w*||"):
        t.add_column(name, justify="right")
    for a in attacks:
        t.add_column(
            f"floor {a}", justify="right", style="bold" if a == fs["attack"] else "", overflow="fold"
        )
    for row in r["root_sweep"]:
        floors = row.get("floors", {fs["attack"]: row["floor"]})
        t.add_row(
            str(row["root_size"]),
            _num(row["root_error_mean"]),
            _num(2 * row["delta1"]),
            _num(row["within_2delta1"], ".3f"),
            _num(row["root_optimum_error_mean"]),
            *[_num(sum(floors[a]) / len(floors[a]) if floors.get(a) else None) for a in attacks],
        )
    slopes = r.get("floor_slopes", {fs["attack"]: fs})
    t.add_section()
    t.add_row(
        "slope",
        _num(r["root_error_slope"]["estimate"]),
        "",
        "",
        "",
        *[_num(slopes[a]["estimate"]) for a in attacks],
        style="italic",
    )
    return t


def print_bound(report: Mapping[str, Any], console: Console | None = None, quiet: bool = False) -> None:
    """The whole report (``quiet``: the claims and the verdict only)."""
    con = console if console is not None else StdoutConsole()
    s = report["settings"]
    if not quiet:
        con.print(
            Text(
                f"FLTrust's error bound (Cao et al., NDSS 2021, Theorem 1) -- scenario {s['scenario']}: "
                f"{s['clients']} clients, {s['rounds']} rounds, alpha = {_num(s.get('alpha'), '.4g')}, "
                f"{report['rounds_checked']} FLTrust rounds checked, "
                f"{_num(report.get('elapsed_s'), '.1f')} s",
                style="bold",
            )
        )
        con.print(constants_table(report))
        con.print(fractions_table(report))
        con.print(root_table(report))
    con.print(claims_table(report))
    con.print(Text(report["verdict"]))
