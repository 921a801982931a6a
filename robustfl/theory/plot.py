"""The ``robustfl bound`` figure: three panels drawn from the report dict (the JSON), so the plot
and the numbers agree.

1. FLTrust's trajectories ``||w^t - w*||`` (no attack, and every attack at the largest fraction)
   with the floor ``||w_D0 - w*||`` and the claim's line ``1.5 x max(no-attack error, floor)``.
2. The final error against the Byzantine fraction per defense (the worst over the attacks; hollow
   markers: outside the rule's guarantee; a cross at the top: diverged).
3. The root error at w* (Lemma 3's Delta1 term) and FLTrust's floor against |D0|, log-log, every
   draw as a dot, with the fitted lines and their slopes.

Matplotlib's Agg canvas on a bare ``Figure`` (no pyplot: the caller's backend is left alone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

COLORS = {"fltrust": "tab:blue", "fedavg": "tab:red", "median": "tab:orange", "krum": "tab:purple"}


def _fit_line(
    ax: Any, xs: np.ndarray, ys: np.ndarray, fit: Mapping[str, Any], color: str, label: str
) -> None:
    est = fit.get("estimate")
    keep = np.isfinite(ys) & (ys > 0)
    if est is None or not keep.any():
        return
    lx, ly = np.log(xs[keep]), np.log(ys[keep])
    intercept = float(np.mean(ly) - est * np.mean(lx))
    grid = np.geomspace(xs.min(), xs.max(), 50)
    lo, hi = fit.get("ci95", [None, None])
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    ax.plot(grid, np.exp(intercept) * grid**est, color=color, lw=1.5, label=f"{label}: slope {est:.2f}{ci}")


def plot_report(report: Mapping[str, Any], path: str | Path) -> Path:
    """Write the three-panel figure to ``path`` (PNG unless the suffix names another format)."""
    path = Path(path)
    fig = Figure(figsize=(17, 6), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2, ax3 = fig.subplots(1, 3)
    seed0 = report["per_seed"][0]
    floor = seed0["root_optimum_error"]
    no_attack = seed0["no_attack_error"]

    # 1. trajectories
    for i, tr in enumerate(report["trajectories"]):
        e = np.array([math.nan if v is None else v for v in tr["errors"]], dtype=float)
        if tr["attack"] == "none":  # drawn wide and underneath: an attack that changes nothing hides it
            ax1.plot(np.arange(len(e)), e, lw=4, color="0.75", label="no attack", zorder=1)
        else:
            label = f"{tr['attack']} ({tr['fraction']:g})"
            ax1.plot(np.arange(len(e)), e, lw=1.4, color=f"C{i}", label=label, zorder=2)
    ax1.axhline(floor, color="black", ls=":", lw=1.2, label="||w_D0 - w*|| (root optimum)")
    if no_attack is not None:
        ax1.axhline(
            1.5 * max(no_attack, floor), color="grey", ls="--", lw=1.0, label="1.5 x max(no attack, root)"
        )
    ax1.set_yscale("log")
    ax1.set_xlabel("round t")
    ax1.set_ylabel("||w^t - w*||")
    ax1.set_title("FLTrust's trajectories and floor")
    ax1.legend(fontsize=8)

    # 2. final error against the Byzantine fraction, per defense (worst over the attacks)
    rows = [r for r in report["fractions"] if r["seed"] == seed0["seed"]]
    finite = [r["final_error"] for r in rows if r["final_error"] is not None]
    top = max(finite) * 3 if finite else 1.0
    defs = report["settings"]["defenses"]
    for di, d in enumerate(defs):
        shift = 0.012 * (di - (len(defs) - 1) / 2)  # side by side where the values coincide
        xs, ys, outside, diverged = [], [], [], []
        for x in report["settings"]["fractions"]:
            cell = [r for r in rows if r["defense"] == d and r["fraction"] == x and r["attack"] != "none"]
            cell = cell or [r for r in rows if r["defense"] == d and r["fraction"] == x]
            if not cell:
                continue
            div = any(r["status"] == "diverged" or r["final_error"] is None for r in cell)
            worst = top if div else max(r["final_error"] for r in cell)
            xs.append(x + shift)
            ys.append(worst)
            outside.append(not all(r["inside_guarantee"] for r in cell))
            diverged.append(div)
        color = COLORS.get(d)
        ax2.plot(xs, ys, lw=1.4, color=color, label=d)
        for x, y, out, div in zip(xs, ys, outside, diverged, strict=True):
            if div:
                ax2.plot([x], [y], marker="x", ms=9, color=color)
            else:
                ax2.plot([x], [y], marker="o", ms=6, color=color, mfc="none" if out else color)
    ax2.axhline(floor, color="black", ls=":", lw=1.2)
    ax2.set_yscale("log")
    ax2.set_xlabel("Byzantine fraction")
    ax2.set_ylabel("final ||w^T - w*|| (worst attack)")
    ax2.set_title("Final error vs Byzantine fraction, worst attack\n(hollow: outside guarantee; x: diverged)")
    ax2.legend(fontsize=8)

    # 3. root error at w* and the floor against |D0|
    sweep = report["root_sweep"]
    rx = np.concatenate([[r["root_size"]] * len(r["root_error"]) for r in sweep]).astype(float)
    ry = np.concatenate([r["root_error"] for r in sweep]).astype(float)
    fx = np.concatenate([[r["root_size"]] * len(r["floor"]) for r in sweep]).astype(float)
    fy = np.array([math.inf if v is None else v for r in sweep for v in r["floor"]], dtype=float)
    jitter = np.exp(np.random.default_rng(0).uniform(-0.06, 0.06, len(rx)))
    ax3.scatter(rx * jitter, ry, s=4, alpha=0.25, color="tab:green")
    ax3.scatter(fx, fy, s=10, alpha=0.6, color="tab:blue")
    _fit_line(ax3, rx, ry, report["root_error_slope"], "tab:green", "root error at w*")
    fs = report["floor_slope"]
    _fit_line(ax3, fx, fy, fs, "tab:blue", f"FLTrust floor ({fs['attack']}, {fs['fraction']:g})")
    sizes = np.array([r["root_size"] for r in sweep], dtype=float)
    for i, (a, fit) in enumerate(report.get("floor_slopes", {}).items()):
        if a == fs["attack"]:
            continue
        means = [np.mean([math.inf if v is None else v for v in r["floors"][a]]) for r in sweep]
        est = fit.get("estimate")
        ax3.plot(
            sizes,
            means,
            ls="--",
            lw=1.0,
            marker=".",
            color=f"C{(i + 3) % 10}",
            label=f"floor, {a}: slope {est:.2f}" if est is not None else f"floor, {a}",
        )
    opt = [r["root_optimum_error_mean"] for r in sweep]
    ax3.plot(sizes, opt, ls=":", color="black", lw=1.2, label="||w_D0 - w*|| (mean)")
    ax3.set_xscale("log")
    ax3.set_yscale("log")
    ax3.set_xlabel("|D0| (root samples)")
    ax3.set_ylabel("error")
    ax3.set_title("Root error ||grad f_D0(w*) - grad F(w*)|| and\nFLTrust's floor vs |D0|")
    ax3.legend(fontsize=7, loc="lower left", framealpha=0.85)

    fig.suptitle(
        f"FLTrust's Theorem 1, checked: rho = {report['rho']:.3g} "
        f"({'vacuous' if report['theorem_vacuous'] else 'a bound'}), "
        f"{report['rounds_checked']} rounds, Lemma 1 violations {report['lemma1_violations']}",
        fontsize=11,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
