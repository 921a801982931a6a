"""robustfl vs ByzFL vs ByzPy: every rule at least two of the three share, side by side in one process.

``python -m benchmarks.three_way [--quick] [--json PATH] [--no-install] [--timeout S] [--repeats N]
[--device cuda]``

For each rule and setting, on one float32 (K, P) matrix (``rules.make_updates``: honest rows around
a common mean, the last f sign-flipped; or, for ByzPy's published settings, i.i.d. N(0, 1) rows as
its own benchmarks draw them): each library's call is first run once under a deadline
(``--timeout``, default 60 s; SIGALRM, which interrupts Python-level loops such as ByzFL's subset
enumeration for MDA -- a single long C call would only be interrupted when it returns). A library
that does not finish is reported as "timed out" and not timed further. The others are timed
best-of-N, alternating (the order reversed every repeat, ``rules.alternate``), so the ratios
ByzFL / robustfl and ByzPy / robustfl (> 1: robustfl faster) compare calls made in the same
process under the same load.

Inputs: robustfl and ByzFL take the (K, P) tensor; ByzPy's ``aggregate`` / ``pre_aggregate`` take a
sequence of K row tensors, built outside the timed region (views of the same matrix). ByzPy is
timed through its direct call (``aggregate``), single process: its actor-pool mode (subtasks run in
worker processes) is not used. Pre-aggregators (nnm, clipping, arc, bucketing) return rows; ByzPy
returns a list, stacked for the agreement check only (untimed).

Agreement: every output is compared with robustfl's, as max |a - b| / max |robustfl| (the "max rel.
diff"), at the same inputs and -- where a library's definition differs -- also with the parameters
that align the definitions (the JSON lists every check; ``DEFINITIONS`` says why they differ).

ByzPy runs outside its declared support (torch < 2.6, numpy < 2.1; here robustfl's newer torch and
numpy, see ``benchmarks/byzpy_env.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from robustfl.defenses import create, pre_registry

from . import byzfl_env, byzpy_env
from .rules import BIG, _extra_bytes, alternate, available_bytes, make_updates, progress, row_norm_median

ROOT = Path(__file__).resolve().parents[1]
LIBS = ("robustfl", "byzfl", "byzpy")
LABEL = {"robustfl": "robustfl", "byzfl": "ByzFL", "byzpy": "ByzPy"}
TIMEOUT_S = 60.0

# why outputs differ where they do (printed under the table and stored in the JSON)
DEFINITIONS = {
    "median": "even K: robustfl and ByzFL (torch.quantile) take the midpoint of the two middle values, "
    "ByzPy (torch.median) the lower one; aligned check on the first K-1 rows (odd count)",
    "meamed": "even K: ByzPy centres on the lower middle value (torch.median), robustfl and ByzFL on the "
    "midpoint; aligned check on the first K-1 rows (odd count). A coordinate whose (K-f)-th and (K-f+1)-th "
    "distances to the centre tie to float32 rounding may keep a different value (robustfl: lower row index)",
    "krum": "ByzFL and ByzPy score with the K-f-1 nearest rows, robustfl with the paper's K-f-2; "
    "aligned check: robustfl at f_hat = f-1",
    "multi_krum": "as krum (neighbours K-f-1 vs K-f-2); all three average K-f rows; "
    "aligned: robustfl f_hat = f-1",
    "geometric_median": "3 Weiszfeld iterations each; robustfl and ByzPy (init='mean') start from the mean, "
    "ByzFL from 0, so ByzFL's 3-iteration point differs; all are compared with the converged median too",
    "caf": "robustfl: exact top eigenpair (eigh); ByzFL: one power iteration from a random start (seeded 0 "
    "here); ByzPy: 3 power iterations from numpy's default_rng(0): the filter's weights differ",
    "trimmed_mean": "all three trim f values at each end per coordinate (no beta fraction)",
    "mda": "all three exact (ByzFL enumerates C(K, f) subsets, ByzPy branch-and-bound in Python, robustfl "
    "clique bisection); ByzPy's float32 Gram distances can order near-equal diameters differently",
    "smea": "all three enumerate the C(K, f) subsets; robustfl and ByzPy score each by its exact top "
    "eigenvalue, ByzFL by ONE power iteration from a random vector (seeded 0 here), an estimate that can "
    "rank the subsets differently: ByzFL picks another subset",
    "monna": "the same rule with pivot = row 0 (ByzFL idx=0, ByzPy reference_index=0)",
    "nnm": "the same rule (each row -> mean of its K-f nearest rows, itself included)",
    "clipping": "the same rule; all three given a fresh copy (untimed): ByzFL clips it in place, "
    "robustfl via apply_ (in place), ByzPy returns new rows",
    "arc": "the same rule (clip the floor(2f/K (K-f)) largest rows to the next norm); fresh copies "
    "as for clipping",
    "centered_clipping": "one iteration from v = 0 with the same tau (median row norm)",
    "bucketing": "the same permutation: robustfl's (torch.randperm, generator seeded 0) passed to ByzPy's "
    "perm=, ByzFL's global generator seeded 0",
}


# -------------------------------------------------------------------------------------- deadline


class TimedOut(Exception):
    """A library's call did not finish within the deadline."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`TimedOut` in the block after ``seconds`` (SIGALRM; main thread only, else no limit)."""
    if seconds is None or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise TimedOut(f"did not finish in {seconds:g} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------------------- cases


@dataclass
class Setting:
    name: str
    k: int
    p: int
    f: int
    rules: tuple[str, ...]
    source: str = ""
    data: str = "benchmark"  # "benchmark": rules.make_updates; "iid": i.i.d. N(0, 1) rows (ByzPy's)


@dataclass
class Case:
    """One rule in up to three libraries: ``fns[lib](input) -> output``; ``inputs[lib](u)`` builds the
    call's input (untimed); ``checks(u, outs)`` adds definition-aligned comparisons."""

    name: str
    calls: dict[str, str]
    fns: dict[str, Callable[[Any], Any]]
    inputs: dict[str, Callable[[Tensor], Any]] = field(default_factory=dict)
    mutates: frozenset[str] = frozenset()
    checks: Callable[[Tensor, dict[str, Tensor]], list[tuple[str, str, Tensor, Tensor]]] | None = None
    note: str = ""


def _ctx(f: int, seed: int = 0) -> Any:
    from robustfl.types import DefenseContext

    return DefenseContext(assumed_byzantine=f, generator=torch.Generator().manual_seed(seed))


def _seeded(rule: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``rule`` run with torch's global generator seeded 0 and restored after (ByzFL's CAF and SMEA
    draw their power-iteration starts from it): the same draw every call."""

    def call(x: Tensor) -> Tensor:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return rule(x)

    return call


def _rf(name: str, f: int, **params: Any) -> Callable[[Tensor], Tensor]:
    rule, ctx = create(name, **params), _ctx(f)
    return lambda u: rule(u, ctx).vector


def _rf_pre(name: str, f: int, inplace: bool = False, **params: Any) -> Callable[[Tensor], Tensor]:
    pre, ctx = pre_registry.create(name, **params), _ctx(f)
    if inplace:
        return lambda u: pre.apply_(u, ctx)[0]
    return lambda u: pre(u, ctx)[0]


def as_tensor(out: Any) -> Tensor:
    """A library's output as one float64 CPU tensor ((P,) or (K', P))."""
    if isinstance(out, (list, tuple)):
        return torch.stack([as_tensor(o) for o in out])
    if isinstance(out, np.ndarray):
        return torch.from_numpy(out).to(torch.float64)
    return out.detach().to("cpu", torch.float64)


def max_rel_diff(a: Tensor, ref: Tensor) -> float:
    """max |a - ref| / max |ref| (inf when the shapes differ)."""
    a, ref = as_tensor(a), as_tensor(ref)
    if a.shape != ref.shape:
        return math.inf
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return float((a - ref).abs().max()) / max(scale, 1e-300) if ref.numel() else 0.0


def build(name: str, fl: Any, py: Any, u: Tensor, f: int) -> Case:
    """The three-way pairing for robustfl rule ``name`` (``fl``/``py``: ByzFL / ByzPy, or None)."""
    k = u.shape[0]
    rows: Callable[[Tensor], Any] = lambda x: list(x.unbind(0))  # noqa: E731  (ByzPy's input format)
    calls: dict[str, str] = {}
    fns: dict[str, Callable[[Any], Any]] = {}
    mutates: set[str] = set()
    checks = None

    def add(lib: str, call: str, fn: Callable[[Any], Any]) -> None:
        calls[lib], fns[lib] = call, fn

    def odd_rows(rule_fns: dict[str, Callable[[Any], Any]]) -> Any:
        def chk(x: Tensor, outs: dict[str, Tensor]) -> list[tuple[str, str, Tensor, Tensor]]:
            y = x[: k - 1] if k % 2 == 0 else x
            mine = rule_fns["robustfl"](y)
            return [
                (f"K-1 = {y.shape[0]} rows (odd)", lib, fn(rows(y) if lib == "byzpy" else y), mine)
                for lib, fn in rule_fns.items()
                if lib != "robustfl"
            ]

        return chk

    if name == "fedavg":
        add("robustfl", "fedavg(weighted=False)", _rf("fedavg", f, weighted=False))
        if fl is not None:
            add("byzfl", "Average()", fl.Average())
    elif name == "median":
        add("robustfl", "median", _rf("median", f))
        if fl is not None:
            add("byzfl", "Median()", fl.Median())
        if py is not None:
            add("byzpy", "CoordinateWiseMedian()", py.Median().aggregate)
        checks = odd_rows(dict(fns)) if k % 2 == 0 else None
    elif name == "trimmed_mean":
        add("robustfl", f"trimmed_mean, f_hat={f}", _rf("trimmed_mean", f))
        if fl is not None:
            add("byzfl", f"TrMean(f={f})", fl.TrMean(f=f))
        if py is not None:
            add("byzpy", f"CoordinateWiseTrimmedMean(f={f})", py.TrimmedMean(f=f).aggregate)
    elif name == "meamed":
        add("robustfl", f"meamed, f_hat={f}", _rf("meamed", f))
        if fl is not None:
            add("byzfl", f"Meamed(f={f})", fl.Meamed(f=f))
        if py is not None:
            add("byzpy", f"MeanOfMedians(f={f})", py.MeanOfMedians(f=f).aggregate)
        checks = odd_rows(dict(fns)) if k % 2 == 0 else None
    elif name in ("krum", "multi_krum"):
        params = {"selected": k - f} if name == "multi_krum" else {}
        add("robustfl", f"{name}, f_hat={f}" + (" (m = K-f)" if params else ""), _rf(name, f, **params))
        if fl is not None:
            add(
                "byzfl",
                f"{'MultiKrum' if params else 'Krum'}(f={f})",
                (fl.MultiKrum if params else fl.Krum)(f=f),
            )
        if py is not None:
            obj = py.MultiKrum(f=f, q=k - f) if params else py.Krum(f=f)
            add("byzpy", f"MultiKrum(f={f}, q={k - f})" if params else f"Krum(f={f})", obj.aggregate)
        aligned = _rf(name, max(0, f - 1), **params)
        others = {lib: fn for lib, fn in fns.items() if lib != "robustfl"}

        def checks(x: Tensor, outs: dict[str, Tensor]) -> list[tuple[str, str, Tensor, Tensor]]:
            mine = aligned(x)
            return [
                (f"robustfl f_hat={f - 1} (K-f-1 neighbours)", lib, outs[lib], mine)
                for lib in others
                if lib in outs
            ]
    elif name == "geometric_median":
        iters, nu = 3, 1e-6
        floor = nu * float(torch.linalg.vector_norm(u, dim=1).mean())
        add(
            "robustfl",
            f"geometric_median(max_iter={iters})",
            _rf("geometric_median", f, nu=nu, max_iter=iters),
        )
        if fl is not None:
            add("byzfl", f"GeometricMedian(nu={floor:.3g}, T={iters})", fl.GeometricMedian(nu=floor, T=iters))
        if py is not None:
            obj = py.GeometricMedian(max_iter=iters, init="mean", tol=1e-30)
            add("byzpy", f"GeometricMedian(max_iter={iters}, init='mean')", obj.aggregate)
        converged = _rf("geometric_median", f, nu=nu, max_iter=300)

        def checks(x: Tensor, outs: dict[str, Tensor]) -> list[tuple[str, str, Tensor, Tensor]]:
            ref = converged(x)
            return [(f"{LABEL[lib]} {iters} it vs converged GM", lib, out, ref) for lib, out in outs.items()]
    elif name == "centered_clipping":
        tau = row_norm_median(u)
        rule, ctx = create("centered_clipping", tau=tau, iterations=1), _ctx(f)

        def ours_cc(x: Tensor) -> Tensor:
            rule.reset()
            return rule(x, ctx).vector

        add("robustfl", f"centered_clipping(tau={tau:.4g}, iterations=1)", ours_cc)
        if fl is not None:
            add(
                "byzfl",
                f"CenteredClipping(tau={tau:.4g}, L=1)",
                lambda x: fl.CenteredClipping(tau=tau, L=1)(x),
            )
        if py is not None:
            add(
                "byzpy",
                f"CenteredClipping(c_tau={tau:.4g}, M=1, init='zero')",
                py.CenteredClipping(c_tau=tau, M=1, init="zero").aggregate,
            )
    elif name == "monna":
        add("robustfl", f"monna(pivot=0), f_hat={f}", _rf("monna", f, pivot=0))
        if fl is not None:
            add("byzfl", f"MoNNA(f={f}, idx=0)", fl.MoNNA(f=f, idx=0))
        if py is not None:
            add("byzpy", f"MoNNA(f={f}, reference_index=0)", py.MoNNA(f=f, reference_index=0).aggregate)
    elif name == "caf":
        add("robustfl", f"caf, f_hat={f}", _rf("caf", f))
        if fl is not None:
            add("byzfl", f"CAF(f={f}) (torch seeded 0)", _seeded(fl.CAF(f=f)))
        if py is not None:
            add("byzpy", f"CAF(f={f}) (power_iters=3)", py.CAF(f=f).aggregate)
    elif name == "mda":
        add("robustfl", f"mda, f_hat={f}", _rf("mda", f))
        if fl is not None:
            add("byzfl", f"MDA(f={f})", fl.MDA(f=f))
        if py is not None:
            add("byzpy", f"MinimumDiameterAveraging(f={f})", py.MDA(f=f).aggregate)
    elif name == "smea":
        add("robustfl", f"smea, f_hat={f}", _rf("smea", f, max_subsets=10**8))
        if fl is not None:
            add("byzfl", f"SMEA(f={f}) (torch seeded 0)", _seeded(fl.SMEA(f=f)))
        if py is not None:
            add("byzpy", f"SMEA(f={f})", py.SMEA(f=f).aggregate)
    elif name == "nnm":
        add("robustfl", f"nnm, f_hat={f}", _rf_pre("nnm", f))
        if fl is not None:
            add("byzfl", f"NNM(f={f})", fl.NNM(f=f))
        if py is not None:
            add("byzpy", f"NearestNeighborMixing(f={f})", py.NNM(f=f).pre_aggregate)
    elif name in ("clipping", "arc"):
        # ByzFL clips its input in place: everyone gets a fresh copy (untimed), robustfl via apply_
        tau = row_norm_median(u)
        params = {"tau": tau} if name == "clipping" else {}
        add(
            "robustfl",
            f"{name}.apply_ ({f'tau={tau:.4g}' if params else f'f_hat={f}'})",
            _rf_pre(name, f, inplace=True, **params),
        )
        mutates.add("robustfl")
        if fl is not None:
            add(
                "byzfl",
                f"Clipping(c={tau:.4g})" if params else f"ARC(f={f})",
                fl.Clipping(c=tau) if params else fl.ARC(f=f),
            )
            mutates.add("byzfl")
        if py is not None:
            obj = py.Clipping(threshold=tau) if params else py.ARC(f=f)
            add("byzpy", f"Clipping(threshold={tau:.4g})" if params else f"ARC(f={f})", obj.pre_aggregate)
    elif name == "bucketing":
        s = 2
        perm = torch.randperm(k, generator=torch.Generator().manual_seed(0)).tolist()
        add("robustfl", f"bucketing(size={s})", _rf_pre("bucketing", f, size=s))
        if fl is not None:
            byz_b = fl.Bucketing(s=s)

            def theirs_b(x: Tensor) -> Tensor:
                with torch.random.fork_rng():
                    torch.manual_seed(0)
                    return byz_b(x)

            add("byzfl", f"Bucketing(s={s}) (torch seeded 0)", theirs_b)
        if py is not None:
            add(
                "byzpy",
                f"Bucketing(bucket_size={s}, perm=robustfl's)",
                py.Bucketing(bucket_size=s, perm=perm).pre_aggregate,
            )
    else:
        raise KeyError(f"no three-way pairing for {name!r}")
    inputs: dict[str, Callable[[Tensor], Any]] = {}
    for lib in fns:
        if lib == "byzpy":
            inputs[lib] = rows
        elif lib in mutates:
            inputs[lib] = lambda x: x.clone()
        else:
            inputs[lib] = lambda x: x
    return Case(name, calls, fns, inputs, frozenset(mutates), checks, DEFINITIONS.get(name, ""))


# -------------------------------------------------------------------------------------- running


def synced(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` followed by ``torch.cuda.synchronize()``: a GPU call is timed until its kernels finish."""

    def call(x: Any) -> Any:
        out = fn(x)
        torch.cuda.synchronize()
        return out

    return call


def run_case(
    case: Case,
    u: Tensor,
    repeats: int,
    timeout_s: float,
    budget_s: float,
    on_cpu: Case | None = None,
) -> dict[str, Any]:
    """Time ``case`` on ``u`` (on its device); with ``on_cpu`` (the same pairing built on the CPU
    copy of ``u``) each library's output is also compared with its own output on the CPU."""
    k, p = u.shape
    if u.is_cuda:
        case = dataclasses.replace(case, fns={lib: synced(fn) for lib, fn in case.fns.items()})
    outs: dict[str, Tensor] = {}
    probe: dict[str, float] = {}
    status: dict[str, str] = {}
    for lib, fn in case.fns.items():  # one untimed-for-the-ratio call each, under the deadline
        arg = case.inputs[lib](u)
        gc.collect()
        t0 = time.perf_counter()
        try:
            with deadline(timeout_s):
                out = fn(arg)
        except TimedOut:
            status[lib] = "timed out"
            probe[lib] = time.perf_counter() - t0
            continue
        except Exception as e:  # a failing library is reported, the others go on
            status[lib] = f"error: {type(e).__name__}: {str(e)[:120]}"
            continue
        probe[lib] = time.perf_counter() - t0
        outs[lib] = as_tensor(out)
        status[lib] = "ok"
        del arg, out
    ok = [lib for lib in case.fns if status[lib] == "ok"]
    # repeats: fewer when one call is slow (best of at least 2 where the budget allows)
    slowest = max((probe[lib] for lib in ok), default=0.0)
    reps = max(2, min(repeats, int(budget_s / max(slowest * len(ok), 1e-9))))
    fns = {lib: case.fns[lib] for lib in ok}
    setup = {lib: (lambda lib=lib: (case.inputs[lib](u),)) for lib in ok}
    with deadline(timeout_s * (reps + 1) * max(1, len(ok))):
        best, ran = alternate(fns, reps, setup, budget_s, collect=u.numel() >= BIG)
    agree: list[dict[str, Any]] = []
    if "robustfl" in outs:
        for lib in ("byzfl", "byzpy"):
            if lib in outs:
                agree.append(
                    {
                        "check": "same inputs",
                        "lib": lib,
                        "max_rel_diff": max_rel_diff(outs[lib], outs["robustfl"]),
                    }
                )
    if case.checks is not None:
        for label, lib, a, b in case.checks(u, outs):
            agree.append({"check": label, "lib": lib, "max_rel_diff": max_rel_diff(a, b)})
    if on_cpu is not None:  # the same call on the CPU (untimed): does the device change the output?
        x = u.cpu()
        for lib in ok:
            try:
                with deadline(timeout_s):
                    ref = as_tensor(on_cpu.fns[lib](on_cpu.inputs[lib](x)))
            except Exception as e:
                status[f"{lib}_cpu"] = f"{type(e).__name__}: {str(e)[:80]}"
                continue
            diff = max_rel_diff(outs[lib], ref)
            agree.append({"check": f"{u.device.type} vs cpu", "lib": lib, "max_rel_diff": diff})
    rec: dict[str, Any] = {
        "rule": case.name,
        "k": k,
        "p": p,
        "dtype": str(u.dtype).removeprefix("torch."),
        "calls": case.calls,
        "status": status,
        "probe_s": probe,
        "repeats": ran,
        "agreement": agree,
        "definitions": case.note,
    }
    for lib in LIBS:
        rec[f"{lib}_s"] = best.get(lib)
    for lib in ("byzfl", "byzpy"):
        a, b = best.get(lib), best.get("robustfl")
        rec[f"ratio_{lib}"] = a / b if a is not None and b else None
    return rec


PAIRED_A = (
    "fedavg",
    "median",
    "trimmed_mean",
    "meamed",
    "geometric_median",
    "krum",
    "multi_krum",
    "centered_clipping",
    "monna",
    "caf",
    "nnm",
    "clipping",
    "arc",
    "bucketing",
)


def make_data(st: Setting, seed: int = 0) -> Tensor:
    """The setting's (K, P) float32 matrix: the rules benchmark's rows, or ByzPy's i.i.d. N(0, 1) rows."""
    if st.data == "iid":  # ByzPy's benchmarks/pytorch/*.py: torch.randn(dim) per gradient, seeded
        return torch.randn(st.k, st.p, generator=torch.Generator().manual_seed(seed))
    return make_updates(st.k, st.p, st.f, seed=seed)


def settings(quick: bool, k: int | None = None, p: int | None = None, f: int | None = None) -> list[Setting]:
    """(a) the rules benchmark's setting; (b) ByzPy's published settings (its benchmarks/README.md) on
    its benchmarks' data (i.i.d. N(0, 1) rows); (b') MDA at ByzPy's size on the benchmark's rows."""
    fa = f if f is not None else (2 if quick else 10)
    if quick:
        return [
            Setting("a", k or 12, p or 2_000, fa, PAIRED_A, "benchmark setting (quick)"),
            Setting("b", 16, 4_096, 2, ("fedavg", "median", "trimmed_mean"), "quick", "iid"),
            Setting("b", 12, 256, 3, ("mda",), "quick", "iid"),
        ]
    cw = ("fedavg", "median", "trimmed_mean", "meamed")
    return [
        Setting("a", k or 50, p or 1_000_000, fa, PAIRED_A, "rules benchmark (K=50, P=10^6, f=10)"),
        Setting("b", 64, 65_536, 8, cw, "ByzPy published: median, CwTM f=8, MeaMed f=8", "iid"),
        Setting("b", 30, 2_048, 10, ("mda",), "ByzPy published: MDA n=30, dim 2048, f=10 (353 ms)", "iid"),
        Setting("b", 16, 4_096, 5, ("smea",), "ByzPy published: SMEA n=16, dim 4096, f=5", "iid"),
        Setting("b'", 30, 2_048, 10, ("mda",), "MDA at ByzPy's size on the rules benchmark's rows"),
    ]


def bench_three_way(
    fl: Any,
    py: Any,
    setting_list: Sequence[Setting],
    repeats: int = 3,
    timeout_s: float = TIMEOUT_S,
    budget_s: float = 60.0,
    memory_fraction: float = 0.5,
    device: str = "cpu",
) -> dict[str, Any]:
    """Every setting's rules in every library; on ``device`` (``cuda``: the inputs on the GPU, each
    call timed to its synchronisation, each output also compared with the same call on the CPU)."""
    rows: list[dict[str, Any]] = []
    for st in setting_list:
        u = make_data(st)
        for name in st.rules:
            pk = st.p
            while (
                name == "nnm"
                and pk > 1000
                and _extra_bytes(name, st.k, pk, st.f) > memory_fraction * available_bytes()
            ):
                pk //= 2  # ByzFL's NNM gathers a (K, K-f, P) tensor: all three at the P that fits
            x = u if pk == st.p else u[:, :pk].contiguous()
            try:
                if device == "cpu":
                    rec = run_case(build(name, fl, py, x, st.f), x, repeats, timeout_s, budget_s)
                else:
                    xd = x.to(device)
                    cpu_case = build(name, fl, py, x, st.f)
                    rec = run_case(build(name, fl, py, xd, st.f), xd, repeats, timeout_s, budget_s, cpu_case)
                    del xd
            except Exception as e:  # a broken pairing is reported, the rest goes on
                rec = {"rule": name, "k": st.k, "p": pk, "error": f"{type(e).__name__}: {e}"}
            rec.update(setting=st.name, f=st.f, source=st.source, data=st.data)
            if pk != st.p:
                rec["reduced_from_p"] = st.p
            rows.append(rec)
            progress(f"three-way {st.name} {name}: " + (rec.get("error") or _summary(rec)))
            del x
            gc.collect()
    return {
        "rows": rows,
        "device": device,
        "threads": torch.get_num_threads(),
        "timeout_s": timeout_s,
        "not_run_at_a": {
            "mda": "C(50, 10) = 1.0e10 subsets: robustfl refuses above 10^8 (max_subsets), "
            "ByzFL would enumerate them",
            "smea": "C(50, 10) = 1.0e10 subsets (exhaustive in all three)",
        },
        "byzpy_only": ["CGE (ComparativeGradientElimination)"],
    }


def _summary(rec: dict[str, Any]) -> str:
    parts = []
    for lib in LIBS:
        st = rec["status"].get(lib)
        if st is None:
            continue
        parts.append(f"{LABEL[lib]} " + (f"{rec[f'{lib}_s'] * 1e3:.1f} ms" if st == "ok" else st))
    return ", ".join(parts)


# ----------------------------------------------------------------------------------------- table


def _ms(rec: dict[str, Any], lib: str, timeout_s: float) -> str:
    st = rec.get("status", {}).get(lib)
    if st is None:
        return "-"
    if st == "timed out":
        return f"timed out (> {timeout_s:g} s)"
    if st != "ok":
        return "error"
    s = rec[f"{lib}_s"]
    return f"{s * 1e3:.1f}" if s < 10 else f"{s * 1e3:.0f}"


def _x(r: float | None) -> str:
    return "-" if r is None or not math.isfinite(r) else f"{r:.2f}x"


def _diff(rec: dict[str, Any]) -> str:
    """ByzFL and ByzPy vs robustfl: the same-input diff and, where a check aligns definitions, that one."""
    out = []
    for lib in ("byzfl", "byzpy"):
        same = [a for a in rec.get("agreement", []) if a["lib"] == lib and a["check"] == "same inputs"]
        aligned = [a for a in rec.get("agreement", []) if a["lib"] == lib and a["check"] != "same inputs"]
        if not same:
            continue
        txt = f"{LABEL[lib]} {same[0]['max_rel_diff']:.1e}"
        if aligned:
            tag = "vs converged: " if rec["rule"] == "geometric_median" else "aligned "
            txt += f" ({tag}{aligned[0]['max_rel_diff']:.1e})"
        out.append(txt)
    return "; ".join(out) or "-"


def markdown(res: dict[str, Any]) -> str:
    t = res["timeout_s"]
    lines = [
        "| rule | setting | robustfl ms | ByzFL ms | ByzPy ms | ByzFL/robustfl | ByzPy/robustfl "
        "| max rel. diff vs robustfl |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        data = ", iid" if r.get("data") == "iid" else ""
        size = f"{r['setting']}: {r['k']} x {r['p']:,}, f={r['f']}{data}"
        if "error" in r:
            lines.append(f"| {r['rule']} | {size} | error: {r['error'][:80]} | | | | | |")
            continue
        lines.append(
            f"| {r['rule']} | {size} | {_ms(r, 'robustfl', t)} | {_ms(r, 'byzfl', t)} "
            f"| {_ms(r, 'byzpy', t)} | "
            f"{_x(r['ratio_byzfl'])} | {_x(r['ratio_byzpy'])} | {_diff(r)} |"
        )
    return "\n".join(lines)


def device_table(res: dict[str, Any]) -> str:
    """Per rule and library: max |device output - CPU output| / max |CPU output|."""
    check = f"{res['device']} vs cpu"
    lines = ["| rule | setting | robustfl | ByzFL | ByzPy |", "|---|---|---:|---:|---:|"]
    for r in res["rows"]:
        got = {a["lib"]: a["max_rel_diff"] for a in r.get("agreement", []) if a["check"] == check}
        cells = [f"{got[lib]:.1e}" if lib in got else "-" for lib in LIBS]
        lines.append(f"| {r['rule']} | {r['setting']}: {r['k']} x {r['p']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(res: dict[str, Any]) -> list[str]:
    seen: set[str] = set()
    out = []
    for r in res["rows"]:
        if r.get("definitions") and r["rule"] not in seen:
            seen.add(r["rule"])
            out.append(f"- {r['rule']}: {r['definitions']}")
        for lib, st in r.get("status", {}).items():
            if st.startswith("error"):
                out.append(f"- {r['rule']} ({r['setting']}): {LABEL[lib]} {st}")
        if r.get("reduced_from_p"):
            out.append(f"- {r['rule']} ({r['setting']}): run at P = {r['p']:,} (ByzFL's (K, K-f, P) gather)")
    for rule, why in res.get("not_run_at_a", {}).items():
        out.append(f"- {rule} not run at (a): {why}")
    return out


# ----------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.three_way", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes: checks that everything runs")
    ap.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    ap.add_argument("--repeats", type=int, default=None, help="best of N (default 3; quick 1)")
    ap.add_argument(
        "--timeout", type=float, default=TIMEOUT_S, help="seconds before a call counts as timed out"
    )
    ap.add_argument("--clients", type=int, default=None, help="K of setting (a)")
    ap.add_argument("--params", type=int, default=None, help="P of setting (a)")
    ap.add_argument("--byzantine", type=int, default=None, help="f of setting (a)")
    ap.add_argument("--only", default=None, help="comma-separated rule names")
    ap.add_argument("--no-install", action="store_true", help="never pip-install ByzFL / ByzPy")
    ap.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where the inputs live (cuda: timed to synchronisation; outputs also checked against the CPU's)",
    )
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("three-way: --device cuda: no CUDA device is available", file=sys.stderr)
        return 2
    fl, fl_why = byzfl_env.load(install_missing=not args.no_install)
    py, py_why = byzpy_env.load(install_missing=not args.no_install)
    if fl is None and py is None:
        print(f"three-way: skipped: ByzFL: {fl_why}; ByzPy: {py_why}")
        return 0
    sts = settings(args.quick, args.clients, args.params, args.byzantine)
    if args.only:
        keep = set(args.only.split(","))
        sts = [Setting(s.name, s.k, s.p, s.f, tuple(r for r in s.rules if r in keep), s.source) for s in sts]
        sts = [s for s in sts if s.rules]
    load0 = os.getloadavg()
    res = bench_three_way(
        fl, py, sts, repeats=args.repeats or (1 if args.quick else 3), timeout_s=args.timeout,
        device=args.device,
    )
    res["meta"] = {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "byzfl": byzfl_env.version(fl) if fl is not None else f"missing: {fl_why}",
        "byzpy": byzpy_env.version(py) if py is not None else f"missing: {py_why}",
        "byzpy_declared": byzpy_env.DECLARED,
        "dtype": "float32 (all three libraries called on float32 inputs)",
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "loadavg_start": list(load0),
        "loadavg_end": list(os.getloadavg()),
        "argv": list(argv if argv is not None else sys.argv[1:]),
    }
    m = res["meta"]
    print(
        f"robustfl vs ByzFL {m['byzfl']} vs ByzPy {m['byzpy']} (torch {m['torch']}, numpy {m['numpy']}, "
        f"{m['torch_threads']} threads; float32; ByzPy declares {m['byzpy_declared']}: run outside it)"
    )
    print("times: best of N, the libraries alternating in one process; ratio > 1: robustfl faster\n")
    print(markdown(res))
    if args.device != "cpu":
        print(f"\non {m['device']}: each output against the same library's call on the CPU\n")
        print(device_table(res))
    print("\n" + "\n".join(notes(res)))
    print(
        f"\nload average: start {' '.join(f'{x:.2f}' for x in load0)}, end "
        f"{' '.join(f'{x:.2f}' for x in m['loadavg_end'])}"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
