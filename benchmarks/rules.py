"""robustfl's rules against ByzFL's implementations of the same rules, side by side in one process.

For every rule both libraries implement, on one (K, P) float32 matrix (default K = 50,
P = 1,000,000, f = 10 assumed Byzantine): the best-of-N wall time of each (the two alternate,
reversing the order every repeat), ratio = byzfl_s / robustfl_s (> 1: robustfl is faster), and
whether the two outputs agree (float64 ``allclose`` with rtol 1e-5 and atol 1e-5 * max|ByzFL's
output|, plus the relative error ||a - b|| / ||b||). Conventions that change the result are noted:

* Krum / Multi-Krum: both use squared distances, but ByzFL scores with the K - f - 1 nearest
  rows (its ``sort(dist)[:, 1:n-f]`` after the zero self-distance), robustfl with the paper's
  K - f - 2. Timed at the same f; agreement is checked at the same f *and* with ByzFL given
  f + 1 (the same neighbour count), which is the convention-aligned check.
* Geometric median: ByzFL's default is ``T = 3`` iterations from z = 0 with an absolute floor
  ``nu = 0.1``; robustfl starts from the mean with a scale-free floor nu * mean row norm. Timed
  at equal iterations (robustfl ``max_iter = 3``; the iterations it actually ran are reported,
  as it may stop earlier on convergence), with ByzFL's ``nu`` set to robustfl's floor. The two
  3-iteration outputs differ by their starting points, so each is compared with the converged
  geometric median (robustfl, max_iter 1000).
* Centered clipping: the same fixed tau (the median row norm) for both, one iteration from 0
  (robustfl's state is reset and a fresh ByzFL object built for every call).
* Clipping / ARC: ByzFL clips its input in place. At equal settings (the ratio) both work in
  place on a fresh copy made outside the timed region: ByzFL's call against robustfl's
  ``apply_`` (the in-place form that ``compose`` uses on its own intermediates). robustfl's
  default call never mutates its input and writes a new (K, P) matrix: ``ratio_fresh`` compares
  it with ByzFL in place, ``ratio_with_copy`` with ByzFL charged the copy that keeps the
  caller's input intact (the same no-mutation contract), timed as one call.
* Bucketing: both draw one random permutation with ``torch.randperm(K)``; the check seeds
  ByzFL's global generator and robustfl's context generator alike, so the buckets match.
* NNM: ByzFL gathers a (K, K - f, P) tensor (``vectors[indices]``: 8 GB at the default size);
  when that would not fit in half the available memory it runs at the largest P that does (both
  libraries at that P, reported).
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from robustfl.defenses import create, pre_registry
from robustfl.defenses import names as names_defenses
from robustfl.types import DefenseContext

SPEED_TARGETS = {"krum": 5.0, "multi_krum": 5.0, "nnm": 5.0}  # every other rule: 1.0 (at least as fast)
REFERENCE_ITERATIONS = 300  # the converged geometric median the 3-iteration outputs are compared with
BIG = 1 << 20  # matrices this large (entries) get a garbage collection before each timed call
NOISE = 0.10  # a ratio within 10% of its target is reported as "~" (timing noise on a shared machine)

# robustfl name -> ByzFL class, for every rule both implement (ByzFL 0.0.11)
PAIRS = {
    "fedavg": "Average",
    "median": "Median",
    "trimmed_mean": "TrMean",
    "geometric_median": "GeometricMedian",
    "krum": "Krum",
    "multi_krum": "MultiKrum",
    "centered_clipping": "CenteredClipping",
    "nnm": "NNM",
    "clipping": "Clipping",
    "arc": "ARC",
    "bucketing": "Bucketing",
}


# --------------------------------------------------------------------------------------- timing

clock = time.perf_counter  # the timer (a module attribute so that tests can replace it)


def progress(msg: str) -> None:
    """One line of progress on stderr (the table goes to stdout at the end)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def alternate(
    fns: Mapping[str, Callable[..., Any]],
    repeats: int,
    setup: Mapping[str, Callable[[], tuple[Any, ...]]] | None = None,
    budget_s: float = math.inf,
    collect: bool = True,
) -> tuple[dict[str, float], int]:
    """Best-of-``repeats`` wall time of each function, calls alternating (order reversed on odd
    repeats). ``setup[name]()`` builds that call's arguments outside the timed region; with
    ``collect`` the garbage collector runs before each call (untimed), so one call's garbage is
    not freed inside the next. Stops early once every function ran twice and ``budget_s`` has
    passed. Returns (best, repeats run)."""
    best = {name: math.inf for name in fns}
    names = list(fns)
    start, done = clock(), 0
    for r in range(max(1, repeats)):
        for name in names if r % 2 == 0 else names[::-1]:
            args = setup[name]() if setup is not None and name in setup else ()
            if collect:
                gc.collect()
            t0 = clock()
            fns[name](*args)
            best[name] = min(best[name], clock() - t0)
            del args
        done = r + 1
        if done >= 2 and clock() - start > budget_s:
            break
    return best, done


def agreement(ours: Tensor, theirs: Tensor, rtol: float = 1e-5) -> dict[str, Any]:
    """Do two outputs agree? float64 allclose (atol = rtol * max|theirs|) and the relative error."""
    a, b = ours.detach().to(torch.float64).flatten(), theirs.detach().to(torch.float64).flatten()
    if a.shape != b.shape:
        return {"allclose": False, "rel_err": math.inf, "max_abs": math.inf, "shape": [len(a), len(b)]}
    scale = float(b.abs().max()) if b.numel() else 0.0
    diff = (a - b).abs()
    return {
        "allclose": bool(torch.allclose(a, b, rtol=rtol, atol=rtol * scale)),
        "rel_err": float(torch.linalg.vector_norm(a - b) / max(float(torch.linalg.vector_norm(b)), 1e-300)),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
    }


def verdict(ratio: float | None, target: float | None, higher_is_better: bool) -> str:
    """ "ok" when the target is met, "~" within NOISE of it, "MISS" otherwise ("-": no target)."""
    if target is None or ratio is None or not math.isfinite(ratio):
        return "-"
    if higher_is_better:
        return "ok" if ratio >= target else "~" if ratio >= target * (1 - NOISE) else "MISS"
    return "ok" if ratio <= target else "~" if ratio <= target * (1 + NOISE) else "MISS"


# ----------------------------------------------------------------------------------------- data


def make_updates(k: int, p: int, f: int, seed: int = 0) -> Tensor:
    """(K, P) float32: honest rows mu + N(0, I) around a common mu ~ N(0, I); the last f rows
    Byzantine (sign-flipped honest draws). Deterministic for a seed."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(p, generator=g)
    u = torch.randn(k, p, generator=g)
    u += mu
    if f > 0:
        u[k - f :] *= -1
    return u


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else a conservative 4 GiB."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


def row_norm_median(u: Tensor) -> float:
    return float(torch.linalg.vector_norm(u, dim=1).median())


# ----------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One rule in both libraries. ``ours``/``theirs`` take the matrix and return a (P,) or (K', P)
    tensor; ``checks`` are (label, ours output, theirs output) pairs for the agreement report."""

    name: str
    byzfl_call: str
    robustfl_call: str
    ours: Callable[[Tensor], Tensor]
    theirs: Callable[[Tensor], Tensor]
    theirs_mutates: bool = False
    ours_inplace: Callable[[Tensor], Tensor] | None = None  # ours, mutating like theirs (equal settings)
    checks: Callable[[Tensor], list[tuple[str, Tensor, Tensor]]] | None = None
    extra: Callable[[Tensor], dict[str, Any]] | None = None
    same_check: int | None = 0  # which check decides "same" (None: not comparable, see the checks)
    note: str = ""


def _ctx(f: int, seed: int = 0) -> DefenseContext:
    return DefenseContext(assumed_byzantine=f, generator=torch.Generator().manual_seed(seed))


def _vector(rule: Any, f: int) -> Callable[[Tensor], Tensor]:
    ctx = _ctx(f)

    def run(u: Tensor) -> Tensor:
        return rule(u, ctx).vector

    return run


def _pre_rows(pre: Any, f: int) -> Callable[[Tensor], Tensor]:
    ctx = _ctx(f)

    def run(u: Tensor) -> Tensor:
        return pre(u, ctx)[0]

    return run


def _pre_rows_inplace(pre: Any, f: int) -> Callable[[Tensor], Tensor]:
    ctx = _ctx(f)

    def run(u: Tensor) -> Tensor:
        return pre.apply_(u, ctx)[0]

    return run


def _krum_checks(name: str, byz: Any, f: int) -> Callable[[Tensor], list[tuple[str, Tensor, Tensor]]]:
    """Krum / Multi-Krum agreement: robustfl with f_hat = f - 1 scores with K - f - 1 neighbours,
    ByzFL's count at f (Multi-Krum keeps selecting K - f rows), then both at the same f."""
    cls = {"krum": "Krum", "multi_krum": "MultiKrum"}[name]

    def checks(u: Tensor) -> list[tuple[str, Tensor, Tensor]]:
        k = u.shape[0]
        params = {"selected": k - f} if name == "multi_krum" else {}
        theirs = getattr(byz, cls)(f=f)(u)
        aligned = create(name, **params)(u, _ctx(max(0, f - 1))).vector
        same_f = create(name, **params)(u, _ctx(f)).vector
        return [
            (f"robustfl f_hat={f - 1} vs ByzFL f={f} (both K-f-1 neighbours)", aligned, theirs),
            (f"robustfl f_hat={f} vs ByzFL f={f} (K-f-2 vs K-f-1 neighbours)", same_f, theirs),
        ]

    return checks


def build_case(name: str, byz: Any, u: Tensor, f: int) -> Case:
    """The pairing for robustfl rule ``name`` on matrix ``u`` with f assumed Byzantine."""
    k = u.shape[0]
    if name == "fedavg":
        return Case(
            name,
            "Average()",
            "fedavg(weighted=False)",
            _vector(create("fedavg", weighted=False), f),
            byz.Average(),
        )
    if name == "median":
        return Case(
            name,
            "Median()",
            "median",
            _vector(create("median"), f),
            byz.Median(),
            note="ByzFL: torch.quantile (a full sort); robustfl: numpy partition",
        )
    if name == "trimmed_mean":
        return Case(
            name,
            f"TrMean(f={f})",
            f"trimmed_mean, f_hat={f}",
            _vector(create("trimmed_mean"), f),
            byz.TrMean(f=f),
        )
    if name == "krum":
        ours = _vector(create("krum"), f)
        return Case(
            name,
            f"Krum(f={f})",
            f"krum, f_hat={f}",
            ours,
            byz.Krum(f=f),
            checks=_krum_checks("krum", byz, f),
            note="neighbours: ByzFL K-f-1, robustfl K-f-2 (paper); both squared",
        )
    if name == "multi_krum":
        ours = _vector(create("multi_krum"), f)
        return Case(
            name,
            f"MultiKrum(f={f})",
            f"multi_krum, f_hat={f} (m = K-f)",
            ours,
            byz.MultiKrum(f=f),
            checks=_krum_checks("multi_krum", byz, f),
            note="neighbours: ByzFL K-f-1, robustfl K-f-2 (paper); both average K-f rows",
        )
    if name == "geometric_median":
        return _geometric_median_case(byz, u, f)
    if name == "centered_clipping":
        tau = row_norm_median(u)
        rule = create("centered_clipping", tau=tau, iterations=1)
        ctx = _ctx(f)

        def ours_cc(x: Tensor) -> Tensor:
            rule.reset()
            return rule(x, ctx).vector

        def theirs_cc(x: Tensor) -> Tensor:
            return byz.CenteredClipping(tau=tau, L=1)(x)

        return Case(
            name,
            f"CenteredClipping(tau={tau:.4g}, L=1)",
            f"centered_clipping(tau={tau:.4g})",
            ours_cc,
            theirs_cc,
            note="fixed tau = median row norm, from v = 0, fresh state per call",
        )
    if name == "nnm":
        return Case(
            name,
            f"NNM(f={f})",
            f"nnm, f_hat={f}",
            _pre_rows(pre_registry.create("nnm"), f),
            byz.NNM(f=f),
            note="ByzFL gathers a (K, K-f, P) tensor",
        )
    if name == "clipping":
        tau = row_norm_median(u)
        return Case(
            name,
            f"Clipping(c={tau:.4g})",
            f"clipping(tau={tau:.4g})",
            _pre_rows(pre_registry.create("clipping", tau=tau), f),
            byz.Clipping(c=tau),
            theirs_mutates=True,
            ours_inplace=_pre_rows_inplace(pre_registry.create("clipping", tau=tau), f),
            note="both clip a fresh copy in place (untimed copy); robustfl via apply_",
        )
    if name == "arc":
        return Case(
            name,
            f"ARC(f={f})",
            f"arc, f_hat={f}",
            _pre_rows(pre_registry.create("arc"), f),
            byz.ARC(f=f),
            theirs_mutates=True,
            ours_inplace=_pre_rows_inplace(pre_registry.create("arc"), f),
            note="both clip a fresh copy in place (untimed copy); robustfl via apply_",
        )
    if name == "bucketing":
        pre = pre_registry.create("bucketing", size=2)
        ours_b = _pre_rows(pre, f)

        def checks_b(x: Tensor) -> list[tuple[str, Tensor, Tensor]]:
            mine = pre(x, _ctx(f, seed=0))[0]
            with torch.random.fork_rng():
                torch.manual_seed(0)
                theirs_out = byz.Bucketing(s=2)(x)
            return [("same permutation (both generators seeded 0)", mine, theirs_out)]

        return Case(name, "Bucketing(s=2)", "bucketing(size=2)", ours_b, byz.Bucketing(s=2), checks=checks_b)
    raise KeyError(f"no ByzFL pairing for {name!r} (K = {k})")


def _geometric_median_case(byz: Any, u: Tensor, f: int) -> Case:
    defaults = byz.GeometricMedian()
    iters = int(defaults.T)
    nu = 1e-6
    floor = nu * float(torch.linalg.vector_norm(u, dim=1).mean())
    rule = create("geometric_median", nu=nu, max_iter=iters)
    ctx = _ctx(f)
    theirs = byz.GeometricMedian(nu=float(floor), T=iters)
    seen: dict[str, Any] = {"byzfl_iterations": iters, "byzfl_default_nu": float(defaults.nu)}

    def ours(x: Tensor) -> Tensor:
        return rule(x, ctx).vector

    def checks(x: Tensor) -> list[tuple[str, Tensor, Tensor]]:
        mine = rule(x, ctx)
        ref = create("geometric_median", nu=nu, max_iter=REFERENCE_ITERATIONS)(x, ctx)
        seen["robustfl_iterations"] = int(mine.stats["iterations"])
        seen["reference_iterations"] = int(ref.stats["iterations"])
        seen["reference_converged"] = bool(ref.stats["converged"])
        b = theirs(x)
        return [
            (f"robustfl {iters} it vs ByzFL {iters} it (starts differ: mean vs 0)", mine.vector, b),
            (f"robustfl {iters} it vs converged GM", mine.vector, ref.vector),
            (f"ByzFL {iters} it vs converged GM", b, ref.vector),
        ]

    return Case(
        "geometric_median",
        f"GeometricMedian(nu={floor:.3g}, T={iters})",
        f"geometric_median(nu={nu:g}, max_iter={iters})",
        ours,
        theirs,
        checks=checks,
        extra=lambda x: dict(seen),
        same_check=None,
        note=f"equal iterations ({iters}, ByzFL's default); floor nu*s matched; starts differ",
    )


def byzfl_only(byz: Any) -> list[str]:
    """ByzFL aggregator classes with no robustfl counterpart here."""
    # byzfl/__init__ star-imports the aggregators package, whose submodule ``aggregators`` then
    # shadows the package attribute: look the two modules up by their full names.
    mods = [sys.modules.get(f"byzfl.aggregators.{m}") for m in ("aggregators", "preaggregators")]
    found = sorted(
        {
            n
            for m in mods
            if m is not None
            for n, v in vars(m).items()
            if isinstance(v, type) and v.__module__ == m.__name__
        }
    )
    return [n for n in found if n not in PAIRS.values()]


def _extra_bytes(name: str, k: int, p: int, f: int) -> int:
    """Memory ByzFL's implementation needs beyond the input, where it is large."""
    if name == "nnm":
        return k * (k - f) * p * 4
    return 4 * k * p  # a few (K, P) temporaries at most


# -------------------------------------------------------------------------------------- running


def run_case(case: Case, u: Tensor, repeats: int, budget_s: float) -> dict[str, Any]:
    k, p = u.shape
    setup: dict[str, Callable[[], tuple[Any, ...]]] = {"robustfl": lambda: (u,)}
    setup["byzfl"] = (lambda: (u.clone(),)) if case.theirs_mutates else (lambda: (u,))
    fns: dict[str, Callable[..., Any]] = {"robustfl": case.ours, "byzfl": case.theirs}
    if case.theirs_mutates:  # also charge ByzFL the copy that keeps the caller's input intact
        fns["byzfl_with_copy"] = lambda: case.theirs(u.clone())
    if case.ours_inplace is not None:  # equal settings: ours in place on a fresh copy too
        fns["robustfl_inplace"] = case.ours_inplace
        setup["robustfl_inplace"] = lambda: (u.clone(),)
    best, ran = alternate(fns, repeats, setup, budget_s, collect=u.numel() >= BIG)
    checks = (
        case.checks(u)
        if case.checks is not None
        else [("same inputs", case.ours(u), case.theirs(u.clone() if case.theirs_mutates else u))]
    )
    if case.ours_inplace is not None:
        theirs_out = case.theirs(u.clone())
        checks = [*checks, ("in place (apply_)", case.ours_inplace(u.clone()), theirs_out)]
    agree = [{"check": label, **agreement(a, b)} for label, a, b in checks]
    target = SPEED_TARGETS.get(case.name, 1.0)
    ours_s = best["robustfl_inplace"] if case.ours_inplace is not None else best["robustfl"]
    ratio = best["byzfl"] / ours_s
    rec: dict[str, Any] = {
        "name": case.name,
        "byzfl": case.byzfl_call,
        "robustfl": case.robustfl_call,
        "k": k,
        "p": p,
        "robustfl_s": ours_s,
        "byzfl_s": best["byzfl"],
        "ratio": ratio,
        "target": target,
        "verdict": verdict(ratio, target, higher_is_better=True),
        "repeats": ran,
        "same": None if case.same_check is None else agree[case.same_check]["allclose"],
        "agreement": agree,
        "note": case.note,
    }
    if case.ours_inplace is not None:
        rec["robustfl_fresh_s"] = best["robustfl"]
        rec["ratio_fresh"] = best["byzfl"] / best["robustfl"]
    if case.theirs_mutates:
        rec["byzfl_with_copy_s"] = best["byzfl_with_copy"]
        rec["ratio_with_copy"] = best["byzfl_with_copy"] / best["robustfl"]
    if case.extra is not None:
        rec.update(case.extra(u))
    return rec


def bench_rules(
    byz: Any,
    k: int = 50,
    p: int = 1_000_000,
    f: int = 10,
    repeats: int = 3,
    budget_s: float = 90.0,
    names: Sequence[str] | None = None,
    seed: int = 0,
    memory_fraction: float = 0.5,
) -> dict[str, Any]:
    """Every paired rule at (K, P) float32 with f assumed Byzantine. Returns {"cases", "byzfl_only", ...}.

    ``byz`` is the ByzFL module, or any object with ByzFL's aggregator classes as attributes.
    """
    u = make_updates(k, p, f, seed)
    cases: list[dict[str, Any]] = []
    for name in names if names is not None else list(PAIRS):
        pk = p
        budget = memory_fraction * available_bytes()
        while pk > 1000 and _extra_bytes(name, k, pk, f) > budget:
            pk //= 2
        x = u if pk == p else u[:, :pk].contiguous()
        try:
            rec = run_case(build_case(name, byz, x, f), x, repeats, budget_s)
        except Exception as e:  # a failing side is reported, the rest goes on
            rec = {
                "name": name,
                "byzfl": PAIRS.get(name),
                "k": k,
                "p": pk,
                "error": f"{type(e).__name__}: {e}",
                "verdict": "ERR",
            }
        if pk != p:
            rec["reduced_from_p"] = p
            rec["reduced_because"] = (
                f"ByzFL needs ~{_extra_bytes(name, k, p, f) / 2**30:.1f} GiB at P = {p}, over "
                f"{memory_fraction:.0%} of the {available_bytes() / 2**30:.1f} GiB available"
            )
        cases.append(rec)
        progress(
            f"rules {name}: "
            + (
                rec["error"]
                if "error" in rec
                else f"robustfl {rec['robustfl_s']:.3g} s, ByzFL {rec['byzfl_s']:.3g} s, "
                f"ratio {rec['ratio']:.3g}, same {rec['same']}"
            )
        )
        del x
        if u.numel() >= BIG:
            gc.collect()
    return {
        "k": k,
        "p": p,
        "f": f,
        "dtype": "float32",
        "threads": torch.get_num_threads(),
        "cases": cases,
        "byzfl_only": byzfl_only(byz),
        "robustfl_only": sorted((set(names_defenses()) | set(pre_registry.names())) - set(PAIRS)),
        "pid": os.getpid(),
    }
