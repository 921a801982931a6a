"""``robustfl kappa``: each aggregation rule against (f, kappa)-robustness, by searching for the
worst attack (docs/kappa.md). Data only: the CLI prints it.

A rule F is (f, kappa)-robust (Allouah et al., "Fixing by Mixing", AISTATS 2023, Definition 1) if
for every set S of n - f of its n inputs ``||F(x) - mean(S)||^2 <= (kappa/|S|) sum_{i in S}
||x_i - mean(S)||^2``. For each rule x setting (n, f, f-hat) x input family, :func:`run_kappa`
runs the worst-case search (:func:`robustfl.attacks.worst_case.search`: every catalogue attack,
copies of honest rows, directional line searches, gradient ascent, a local evolution strategy) on
the honest rows S and reports the largest kappa_hat found, what found it, the proven upper bound
with its source (:mod:`robustfl.theory.kappa_bounds`) and the lower bound f / (n - 2f).

kappa_hat is what an attack achieved on these inputs: a lower bound on the rule's true kappa. It
certifies non-robustness only; it can never prove a rule robust. A kappa_hat above a proven upper
bound is a finding (an implementation bug, a precondition not met, or an error in the bound): the
row says ``exceeds_bound`` and the inputs that show it are saved (``save_dir``) for reproduction.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import attacks, params
from ..attacks.worst_case import search
from ..errors import ConfigError
from ..scenario import check_seed
from ..simulation import components as C
from ..types import DefenseContext
from .kappa_bounds import lower_bound, reported_unverified, upper_bound
from .kappa_families import FAMILIES, Rows, family_rows

DEFAULT_RULES = (
    "fedavg",
    "krum",
    "multi_krum",
    "median",
    "trimmed_mean",
    "geometric_median",
    "centered_clipping",
    "bulyan",
    {"name": "krum", "pre": ["nnm"]},
    {"name": "median", "pre": ["nnm"]},
    {"name": "trimmed_mean", "pre": ["nnm"]},
)
DEFAULT_N = 20
DEFAULT_F = (2, 4, 6, 8)
DEFAULT_BUDGET = 1000
DEFAULT_DIM = 100
TOLERANCE = 1e-9  # relative: kappa_hat above bound x (1 + TOLERANCE) is a finding


@dataclass(frozen=True)
class Setting:
    """n clients, f of them Byzantine, the rule told f_hat."""

    n: int
    f: int
    f_hat: int

    @property
    def label(self) -> str:
        return f"n={self.n} f={self.f}" + (f" f_hat={self.f_hat}" if self.f_hat != self.f else "")


def settings(n: int, fs: Sequence[int], misspecified: Sequence[tuple[int, int]] = ()) -> list[Setting]:
    """(n, f, f_hat = f) for each f, then the misspecified (f, f_hat) pairs."""
    n = params.number("settings", "n", n, low=1, integer=True)
    if isinstance(fs, str | bytes) or not isinstance(fs, Sequence):
        raise ConfigError(f"settings: fs must be a list of counts, got {fs!r}")
    fs = [params.number("settings", "f", f, integer=True) for f in fs]
    pairs = []
    for pair in misspecified:
        if not (isinstance(pair, Sequence) and len(pair) == 2):
            raise ConfigError(f"settings: a misspecified setting is a pair (f, f_hat), got {pair!r}")
        pairs.append(tuple(params.number("settings", "f", v, integer=True) for v in pair))
    out = [Setting(n, f, f) for f in fs] + [Setting(n, f, fh) for f, fh in pairs]
    for s in out:
        if not (0 <= s.f < s.n and 0 <= s.f_hat < s.n):
            raise ConfigError(f"setting {s.label}: expected 0 <= f, f_hat < n")
    return out


NNM_REPORTED = (
    "UNVERIFIED: kappa(F o NNM) <= 8f/(n - f) (kappa_F + 1), the NNM theorem of Allouah et al. "
    "(AISTATS 2023) as recalled, with kappa_F the reported bound of the inner rule; the paper's text "
    "could not be read here"
)


def bound_for(label: str, n: int, f: int) -> tuple[float | None, str, str, bool]:
    """(value, source, condition, verified): the verified published bound where there is one, else
    the constant secondary sources report (marked UNVERIFIED), else None with the reason."""
    verified = upper_bound(label, n, f)
    if verified.value is not None or label == "fedavg":
        return verified.value, verified.source, verified.condition, True
    if label.startswith("nnm+"):
        inner = reported_unverified(label[len("nnm+") :], n, f)
        if inner.value is not None and n > f:
            return 8 * f / (n - f) * (inner.value + 1), NNM_REPORTED, inner.condition, False
        return None, verified.source, verified.condition, False
    reported = reported_unverified(label, n, f)
    if reported.value is not None:
        return reported.value, reported.source, reported.condition, False
    return None, verified.source, verified.condition, False


def bound_key(spec: C.Spec) -> str | None:
    """The rule a published bound is looked up by: the composition of names (``nnm+krum``), never
    the entry's label (a median labelled "krum" is no Krum); None when the entry sets parameters
    (the bounds are stated for the rules as published)."""
    if isinstance(spec, str):
        return spec
    pre = spec.get("pre") or []
    if set(spec) - {"name", "label", "pre"} or any(not isinstance(p, str) and set(p) - {"name"} for p in pre):
        return None
    return C.defense_label({"name": spec["name"], "pre": pre})


def _row(spec: C.Spec, s: Setting, family: str) -> dict[str, Any]:
    label, key = C.defense_label(spec), bound_key(spec)
    if key is None:
        value, source, condition, verified = None, "no published bound: the entry sets parameters", "", False
    else:
        value, source, condition, verified = bound_for(key, s.n, s.f_hat)
    if s.f != s.f_hat:
        value, source = (
            None,
            f"f_hat = {s.f_hat} != f = {s.f}: no published bound covers a misspecified f_hat",
        )
    return {
        "rule": label,
        "spec": spec,
        "n": s.n,
        "f": s.f,
        "f_hat": s.f_hat,
        "family": family,
        "kappa": None,
        "attack": None,
        "upper_bound": value,
        "upper_source": source,
        "upper_condition": condition,
        "upper_verified": verified,
        "lower_bound": lower_bound(s.n, s.f),
        "evaluations": 0,
        "best_fixed": None,
        "best_fixed_attack": None,
        "status": "ok",
        "error": None,
        "saved": None,
        "elapsed_s": 0.0,
    }


def measure(
    spec: C.Spec,
    s: Setting,
    rows: Rows,
    *,
    budget: int,
    seed: int,
    allow_outside_guarantee: bool = False,
    save_dir: Path | None = None,
) -> dict[str, Any]:
    """One row of the table: the worst-case search for ``spec`` on ``rows`` at setting ``s``."""
    row = _row(spec, s, rows.family)
    rule = C.build_defense(spec)
    if rule.needs_reference and rows.reference is None:
        row.update(
            status="refused",
            error=f"{row['rule']} needs the server's reference update: measured on "
            "a task's recorded rounds only (robustfl kappa SCENARIO)",
        )
        return row
    if not rule.admits(s.n, s.f_hat):
        need = rule.min_clients(s.f_hat)
        row["error"] = (
            f"{row['rule']} needs n >= {need} for f_hat = {s.f_hat} (its precondition), got n = {s.n}"
        )
        if not allow_outside_guarantee:
            row["status"] = "refused"
            return row
        row["status"] = "outside_guarantee"
        row["upper_bound"], row["upper_source"] = None, "outside the rule's precondition: no bound applies"
    honest, own = rows.honest, rows.own
    ctx = DefenseContext(
        assumed_byzantine=s.f_hat,
        client_ids=torch.arange(s.n),
        reference=rows.reference,
        global_model=torch.zeros(honest.shape[1], dtype=torch.float64),
    )

    def evaluate(byz: Tensor) -> Tensor:
        rule.reset()
        g = C.named_generator(seed, "defense")
        return rule(torch.cat([honest, byz.to(honest)]), dataclasses.replace(ctx, generator=g)).vector

    names = [n for n, origin in attacks.registry.items() if origin == "built-in" and n != "worst_case"]
    start = time.perf_counter()
    found = search(
        evaluate,
        honest,
        own,
        budget=budget,
        generator=C.named_generator(seed, f"kappa:{rows.family}"),
        attacks=names,
        num_clients=s.n,
        reference=rows.reference,
    )
    row["elapsed_s"] = time.perf_counter() - start
    best_fixed = max(found.fixed.items(), key=lambda kv: kv[1], default=(None, None))
    row.update(
        kappa=found.kappa,
        attack={"name": found.attack, "params": found.params},
        evaluations=found.evaluations,
        best_fixed=best_fixed[1],
        best_fixed_attack=best_fixed[0],
        fixed=dict(found.fixed),
    )
    bound = row["upper_bound"]
    if bound is not None and (not math.isfinite(found.kappa) or found.kappa > bound * (1 + TOLERANCE)):
        row["status"] = "exceeds_bound"
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            path = (
                save_dir / f"kappa-{row['rule']}-n{s.n}-f{s.f}-fh{s.f_hat}-{rows.family.replace(' ', '_')}.pt"
            )
            torch.save(
                {
                    "honest": honest,
                    "byzantine": found.rows,
                    "reference": rows.reference,
                    "spec": spec,
                    "n": s.n,
                    "f": s.f,
                    "f_hat": s.f_hat,
                    "seed": seed,
                    "kappa": found.kappa,
                },
                path,
            )
            row["saved"] = str(path)
    return row


def _check_arguments(rules: Any, setting_list: Any, families: Any, task: Any, on_row: Any) -> None:
    """One line for a list that is a string or empty (an empty one ran nothing, or the defaults)."""
    for name, value, none_ok in (("rules", rules, False), ("setting_list", setting_list, True),
                                 ("families", families, False), ("task", task, True)):
        if value is None and none_ok:
            continue
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not value:
            raise ConfigError(f"run_kappa: {name} must be a non-empty list, got {value!r}")
    if setting_list is not None and not all(isinstance(x, Setting) for x in setting_list):
        raise ConfigError(f"run_kappa: setting_list must hold Settings (settings()), got {setting_list!r}")
    if on_row is not None and not callable(on_row):
        raise ConfigError(f"run_kappa: on_row must be a function (row, done, total) or None, got {on_row!r}")


def run_kappa(
    rules: Sequence[C.Spec] = DEFAULT_RULES,
    setting_list: Sequence[Setting] | None = None,
    families: Sequence[str] = FAMILIES,
    *,
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    dim: int = DEFAULT_DIM,
    task: Sequence[Rows] | None = None,
    allow_outside_guarantee: bool = False,
    save_dir: Path | None = None,
    on_row: Callable[[dict[str, Any], int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """The table: one row per rule x setting x family (or x recorded task round, ``task``)."""
    _check_arguments(rules, setting_list, families, task, on_row)
    for spec in rules:
        C.check_spec("defense", spec)
        C.build_defense(spec)  # unknown names fail before any work
    budget = params.number("run_kappa", "budget", budget, low=1, integer=True)
    dim = params.number("run_kappa", "dim", dim, low=1, integer=True)
    seed = check_seed("run_kappa seed", seed)
    allow_outside_guarantee = params.boolean("run_kappa", "allow_outside_guarantee", allow_outside_guarantee)
    if save_dir is not None:
        save_dir = Path(save_dir)  # a str too
        if save_dir.exists() and not save_dir.is_dir():
            raise ConfigError(f"save_dir {str(save_dir)!r} is a file: expected a folder")
    todo: list[tuple[C.Spec, Setting, Rows]] = []
    for s in setting_list or settings(DEFAULT_N, DEFAULT_F):
        inputs = (
            list(task)
            if task is not None
            else [
                family_rows(fam, s.n, s.f, dim, C.named_generator(seed, f"family:{fam}:{s.n}:{s.f}"))
                for fam in families
                if fam != "lower_bound" or s.n - 2 * s.f >= 1
            ]
        )
        todo += [(spec, s, rows) for rows in inputs for spec in rules]
    out: list[dict[str, Any]] = []
    for i, (spec, s, rows) in enumerate(todo):
        row = measure(
            spec,
            s,
            rows,
            budget=budget,
            seed=seed,
            allow_outside_guarantee=allow_outside_guarantee,
            save_dir=save_dir,
        )
        out.append(row)
        if on_row is not None:
            on_row(row, i + 1, len(todo))
    return out
