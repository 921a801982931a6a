"""The verdict of ``robustfl bound`` in words: each claim's status and figure, and the summary.

Statuses: ``holds``, ``fails``, ``vacuous`` (the statement promises nothing here) and ``finding``
(a measurement reported with its interval, not a pass/fail). The thresholds: FLTrust's final error
within ``WITHIN`` x max(no-attack error, ||w_D0 - w*||); FedAvg and the median "break" under
sign_flip at ``BREAK_FRACTION`` when their error is at least ``BREAK`` x FLTrust's worst.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

WITHIN = 1.5  # FLTrust's final error <= WITHIN * max(no-attack error, ||w_D0 - w*||)
BREAK = 10.0  # FedAvg / median at sign_flip 0.6: >= BREAK * FLTrust's worst final error
BREAK_FRACTION = 0.6


def floor_meaning(fit: Mapping[str, Any]) -> str:
    """What the floor's slope against |D0| says, in words."""
    est, (lo, hi) = fit.get("estimate"), fit.get("ci95", [None, None])
    if est is None or lo is None or hi is None:
        return "not enough finite points to fit"
    if lo <= -0.5 <= hi:
        return (
            "the floor shrinks like |D0|^-1/2: under this attack FLTrust tracks the root data's own "
            "optimum, so the root set's size (the Delta1 term) sets the error"
        )
    if lo <= 0 <= hi:
        return (
            "the floor does not shrink with |D0|: it is set by what the root set does not control "
            "(the clients' fixed data and the attack's pull), not by the Delta1 term"
        )
    if hi < -0.5:
        return (
            "the floor shrinks faster than |D0|^-1/2 over this range "
            "(the attack's pull fades with a larger root set)"
        )
    if hi < 0:
        return (
            "the floor shrinks with |D0|, but slower than |D0|^-1/2: part of it comes from the root "
            "data (the Delta1 term), part from what a larger root set does not remove "
            "(the clients' fixed data and the attack's pull)"
        )
    return "the floor grows with |D0| over this range"


def _fmt(v: Any, spec: str = ".3g") -> str:
    return "null" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def claims(r: Mapping[str, Any]) -> list[dict[str, str]]:
    """Each claim with its status (holds / fails / vacuous / finding) and its figure."""
    out: list[dict[str, str]] = []
    c = r["constants"]

    def add(name: str, status: str, figure: str, detail: str = "") -> None:
        out.append({"claim": name, "status": status, "figure": figure, "detail": detail})

    add(
        "Theorem 1: ||w^t - w*|| <= (1-rho)^t ||w^0 - w*|| + 12 alpha Delta1 / rho",
        "vacuous" if r["theorem_vacuous"] else "holds",
        f"rho = {_fmt(r['rho'], '.4g')} (proof-supported, Delta2 = 0); "
        f"rho_literal = {_fmt(r['rho_literal'], '.4g')}",
        (
            "rho <= 0: the proof's recursion factor 1 - rho >= 1 never contracts, so the theorem "
            "guarantees nothing"
            + (
                "; rho_literal > 0 only because the printed formula uses Lemma 2's factor, which the "
                "proof establishes at alpha = mu/(2L^2) alone"
                if r["rho_literal"] is not None and r["rho_literal"] > 0
                else ""
            )
        )
        if r["theorem_vacuous"]
        else "rho > 0 at this alpha",
    )
    n = r["rounds_checked"]
    add(
        "Lemma 1: ||g - grad F|| <= 3 ||g0 - grad F|| + 2 ||grad F||",
        "holds" if r["lemma1_violations"] == 0 and n > 0 else "fails",
        f"{r['lemma1_violations']} violations in {n} FLTrust rounds; "
        f"max LHS/RHS = {_fmt(r['lemma1_max_ratio'])}",
    )
    add(
        "Lemma 2: ||w - alpha grad F(w) - w*|| <= sqrt(1 - mu^2/4L^2) ||w - w*|| at alpha = mu/2L^2",
        "holds" if r["lemma2_violations"] == 0 and n > 0 else "fails",
        f"{r['lemma2_violations']} violations; max LHS/RHS = {_fmt(r['lemma2_max_ratio'])}",
    )
    rs = r["root_error_slope"]
    lo, hi = rs["ci95"]
    ok = rs["estimate"] is not None and lo is not None and lo <= -0.5 <= hi and hi < 0
    add(
        "Lemma 3 (Delta1 term): root error at w* ~ |D0|^-1/2",
        "holds" if ok else "fails",
        f"slope {_fmt(rs['estimate'])} [{_fmt(lo)}, {_fmt(hi)}] over {rs['points']} root draws",
    )
    within = [row["within_2delta1"] for row in r["root_sweep"]]
    need = 1 - c["delta"] / 3
    add(
        "Lemma 3 at w*: root error <= 2 Delta1 w.p. >= 1 - delta/3 (sigma1 estimated)",
        "holds" if within and min(within) >= need else "fails",
        f"fraction within: min {_fmt(min(within) if within else None)} over root sizes (need {need:.4f}); "
        f"sigma1 = {_fmt(c['sigma1'])}, Delta1(|D0| = {c['root_size']}) = {_fmt(c['delta1'])}",
    )
    # behaviour (1): FLTrust within 1.5 x max(no-attack error, ||w_D0 - w*||)
    seeds = {p["seed"]: p for p in r["per_seed"]}
    worst_ratio, worst_at = 0.0, ""
    fl = r["settings"]["defenses"][0]
    for row in r["fractions"]:
        if row["defense"] != fl:
            continue
        p = seeds[row["seed"]]
        ref = max(p["no_attack_error"] or math.inf, p["root_optimum_error"])
        e = row["final_error"] if row["final_error"] is not None else math.inf
        ratio = e / ref
        if ratio > worst_ratio:
            worst_ratio, worst_at = ratio, f"{row['attack']} at {row['fraction']:g}"
    add(
        f"FLTrust's final error <= {WITHIN} x max(no-attack error, ||w_D0 - w*||), every attack and fraction",
        "holds" if worst_ratio <= WITHIN else "fails",
        f"worst ratio {_fmt(worst_ratio)} ({worst_at}); ||w_D0 - w*|| = {_fmt(r['root_optimum_error'])}, "
        f"no-attack error = {_fmt(r['per_seed'][0]['no_attack_error'])}",
    )
    # behaviour (1'): FedAvg and the median break past one half
    fracs = sorted({row["fraction"] for row in r["fractions"]})
    above = [x for x in fracs if x > 0.5]
    at = min(above, key=lambda x: abs(x - BREAK_FRACTION)) if above else None  # 0.6 when listed
    if at is not None and "sign_flip" in r["settings"]["attacks"]:
        parts, ok = [], True
        for name in ("fedavg", "median"):
            rows = [
                row
                for row in r["fractions"]
                if row["attack"] == "sign_flip" and row["fraction"] == at and row["defense"] == name
            ]
            for row in rows:
                worst = seeds[row["seed"]]["fltrust_worst_error"]
                e = row["final_error"]
                broke = row["status"] == "diverged" or (e is not None and e >= BREAK * worst)
                ok &= broke
                parts.append(f"{name} diverged" if e is None else f"{name} {_fmt(e)} ({_fmt(e / worst)}x)")
        if parts:
            add(
                f"FedAvg and median break under sign_flip at {at:g} (>= {BREAK:g}x FLTrust's worst)",
                "holds" if ok else "fails",
                "; ".join(parts) + f"; FLTrust's worst {_fmt(r['per_seed'][0]['fltrust_worst_error'])}",
            )
    lr = r["linear_rate"]
    lo, hi = lr.get("ci95", [None, None])
    add(
        "Linear convergence until the floor (FLTrust, no attack)",
        "finding",
        f"fitted rate {_fmt(lr.get('estimate'), '.4f')} [{_fmt(lo, '.4f')}, {_fmt(hi, '.4f')}] over "
        f"{lr.get('rounds_fitted')} rounds; Lemma 2's factor {_fmt(lr['lemma2_factor'], '.4f')}, "
        f"gradient descent's {_fmt(lr['gradient_descent_factor'], '.4f')}, the proof's 1 - rho "
        f"{_fmt(lr['recursion_factor'], '.4f')}",
    )
    fs = r["floor_slope"]
    lo, hi = fs["ci95"]
    others = "; ".join(
        f"{a}: {_fmt(f['estimate'])} [{_fmt(f['ci95'][0])}, {_fmt(f['ci95'][1])}]"
        for a, f in r.get("floor_slopes", {}).items()
        if a != fs["attack"]
    )
    add(
        f"Error floor vs |D0| (the strongest attack, {fs['attack']}, at {fs['fraction']:g})",
        "finding",
        f"slope {_fmt(fs['estimate'])} [{_fmt(lo)}, {_fmt(hi)}] over {fs['points']} trajectories",
        fs["meaning"] + (f". Other attacks at {fs['fraction']:g}: {others}" if others else ""),
    )
    return out


def verdict(r: Mapping[str, Any]) -> str:
    """The plain-words verdict."""
    failed = [c["claim"] for c in r["claims"] if c["status"] == "fails"]
    head = (
        f"Theorem 1 as proved is vacuous here: rho = {_fmt(r['rho'], '.4g')} <= 0, so its recursion never "
        "contracts and it promises no bound (the culprit is Lemma 1's 2||grad F|| term, which costs "
        "2 alpha L per round against a contraction gain of about alpha mu / 2)."
        if r["theorem_vacuous"]
        else f"Theorem 1 applies: rho = {_fmt(r['rho'], '.4g')} > 0."
    )
    tail = (
        " Its lemmas hold on every round checked, and the behaviour it aims at is real: under every "
        f"attack and fraction FLTrust's final error stays within {WITHIN:g} x max(its no-attack error, "
        "the root data's own optimum error), while FedAvg and the median break."
        if not failed
        else " Checks that failed: " + "; ".join(failed) + "."
    )
    return head + tail
