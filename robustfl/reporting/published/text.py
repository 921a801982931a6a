"""A published comparison as text: the rows of its tables (shared with the terminal view in
``robustfl.cli.render``), its header lines, and its Markdown and HTML sections. A cell outside
the tolerance is flagged ``⚠`` (:data:`FLAG`) and, in HTML, shaded in the "poor" colour of the one
colour scale (:data:`robustfl.reporting.summaries.BAND_COLOURS`)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from ..summaries import BAND_COLOURS
from .comparison import CellComparison, Comparison, mean_text

FLAG = "⚠"
FLAGGED_COLOUR = BAND_COLOURS["poor"]  # a row outside the tolerance, in HTML

HEADERS = (
    "attack (paper → robustfl)",
    "rule",
    "measured error",
    "published",
    "difference",
    "flag",
    "measured ASR",
    "published ASR",
    "ASR difference",
)


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.3f}"


def _pub(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def attack_text(c: CellComparison) -> str:
    """``Min-Max attack → min_max_std (strongest of min_max, min_max_std)``."""
    if not c.candidates:
        return f"{c.attack} → (no robustfl counterpart)"
    if c.chosen is None:
        return f"{c.attack} → {', '.join(c.candidates)}"
    if c.strongest_of:
        return f"{c.attack} → {c.chosen} (strongest of {', '.join(c.present)})"
    return f"{c.attack} → {c.chosen}"


def row_cells(c: CellComparison) -> list[str]:
    """The text of one comparison row (:data:`HEADERS`); the flag column holds ``⚠`` or ``ok``."""
    m = c.measured
    status = c.status
    if status == "compared" and m is not None:
        measured = m.text()
        if m.failed:
            measured += f" ({m.failed} failed)"
    elif status == "not mapped":
        measured = "not compared"
    elif status == "not published":
        measured = m.text() if m is not None else "—"
    else:
        measured = m.text() if m is not None and status != "not run" else status
    flag = FLAG if c.outside or c.asr_outside else ("ok" if status == "compared" else "")
    if c.published_asr is not None or (m is not None and m.asr_n):
        asr = mean_text(m.asr_mean, m.asr_ci95, m.asr_n) if m is not None and m.asr_n else "—"
        asr_cells = [asr, _pub(c.published_asr), _signed(c.asr_difference)]
    else:
        asr_cells = ["", "", ""]
    rule = c.rule if c.rule == c.defense else f"{c.rule} ({c.defense})"
    return [attack_text(c), rule, measured, _pub(c.published), _signed(c.difference), flag, *asr_cells]


def header_lines(comp: Comparison) -> list[str]:
    """The paper, the setting, what is compared, and whether the numbers were verified."""
    t = comp.table
    title = t.paper.title if t.paper.title[-1:] in ".?!" else t.paper.title + "."
    lines = [f"{', '.join(t.paper.authors)}. {title} {t.paper.venue} {t.paper.year}."]
    if t.paper.url:
        lines[0] += f" {t.paper.url}"
    lines.append(f"Table {t.number}" + (f": {t.caption}" if t.caption else ""))
    if t.row_tables:
        lines.append(
            "Rows from other tables: " + ", ".join(f"{r} (Table {n})" for r, n in t.row_tables.items())
        )
    lines.append(f"Setting: {t.setting}")
    if comp.other_scenario:
        lines.append(
            f"Warning: this table is for scenario '{t.scenario}', and the store ran scenario "
            f"'{comp.store_scenario}': its setting may not be the paper's."
        )
    lines.append(
        f"Metric: test error rate = 1 − final accuracy; attack success rate (ASR) for backdoor cells. "
        f"Measured: mean over seeds ± half-width of the 95 % Student-t interval (n seeds). "
        f"Flagged {FLAG}: |difference| > {t.tolerance:g} (ASR: > {t.asr_tol():g}). "
        f"Attacks mapped to several labelled variants take the strongest (highest mean error) in the store."
    )
    verified = f"Numbers {'' if t.verified else 'NOT '}verified against the paper."
    lines.append(verified + (f" Source: {t.source}" if t.source else ""))
    if t.note:
        lines.append(f"Note: {t.note}")
    return lines


def summary_line(comp: Comparison) -> str:
    cells = [c for s in comp.sections for c in s.cells]
    not_run = sum(c.status == "not run" for c in cells)
    text = f"{comp.compared} cells compared, {comp.flagged} outside the tolerance"
    if not_run:
        text += f", {not_run} not in the store"
    return text


def to_markdown(comparisons: Sequence[Comparison]) -> str:
    """``## Measured vs published`` sections, one per table; empty when there are none."""
    parts: list[str] = []
    for comp in comparisons:
        parts.append(f"## Measured vs published: {_md(comp.table.title)}\n")
        parts.append("  \n".join(_md(line) for line in header_lines(comp)) + "\n")
        for s in comp.sections:
            if s.point:
                parts.append(f"**{_md(s.point)}**\n")
            lines = ["| " + " | ".join(HEADERS) + " |", "|---|---|" + "---:|" * (len(HEADERS) - 2)]
            lines += ["| " + " | ".join(_md(x) for x in row_cells(c)) + " |" for c in s.cells]
            parts.append("\n".join(lines) + "\n")
            parts.append(
                "| attack (paper) | Kendall τ, published vs measured order of the rules |\n|---|---|"
            )
            parts[-1] += "".join(f"\n| {_md(r.attack)} | {_md(r.text())} |" for r in s.ranks) + "\n"
        parts.append(summary_line(comp) + "\n")
    return "\n".join(parts)


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def to_html(comparisons: Sequence[Comparison], heading: str = "h2") -> str:
    """``<section class="published">`` per table (empty string when there are none)."""
    e = html.escape
    out: list[str] = []
    for comp in comparisons:
        out.append(f'<section class="published" data-table="{e(comp.table.name)}">')
        out.append(f"<{heading}>Measured vs published: {e(comp.table.title)}</{heading}>")
        out.append('<p class="note">' + "<br>".join(e(line) for line in header_lines(comp)) + "</p>")
        for s in comp.sections:
            if s.point:
                out.append(f"<h3>{e(s.point)}</h3>")
            out.append('<table class="published-cells"><thead><tr>')
            out.append(
                "".join(
                    f'<th class="l">{e(h)}</th>' if i < 2 else f"<th>{e(h)}</th>"
                    for i, h in enumerate(HEADERS)
                )
            )
            out.append("</tr></thead><tbody>")
            for c in s.cells:
                texts = row_cells(c)
                style = f' style="background:{FLAGGED_COLOUR}"' if c.outside or c.asr_outside else ""
                tds = "".join(
                    f'<td class="l">{e(x)}</td>' if i < 2 else f"<td>{e(x)}</td>" for i, x in enumerate(texts)
                )
                out.append(f"<tr{style}>{tds}</tr>")
            out.append("</tbody></table>")
            out.append('<table class="published-ranks"><thead><tr><th class="l">attack (paper)</th>')
            out.append("<th>Kendall τ, published vs measured order of the rules</th></tr></thead><tbody>")
            out += [f'<tr><td class="l">{e(r.attack)}</td><td>{e(r.text())}</td></tr>' for r in s.ranks]
            out.append("</tbody></table>")
        out.append(f'<p class="note">{e(summary_line(comp))}</p>')
        out.append("</section>")
    return "\n".join(out)
