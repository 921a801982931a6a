"""``python -m benchmarks`` (``make bench``): ratios measured side by side in one process.

Groups (``--only NAME`` runs one):

* ``engine`` -- the vectorised engine's round time vs the fastest per-client loop
  (``benchmarks/engine.py``) at K = 100 and K = 1,000 (targets >= 10x and >= 20x);
* ``rules`` -- every rule robustfl shares with ByzFL, at K = 50, P = 1,000,000 float32
  (``benchmarks/rules.py``; ratio = ByzFL time / robustfl time, with an output-agreement check).
  ByzFL is installed into ``runs/bench-deps`` on first use (``benchmarks/byzfl_env.py``); when
  it cannot be installed or imported the group prints ``skipped: <reason>``;
* ``floors`` -- rules vs the memory/compute floor of their maths (``benchmarks/floors.py``);
* ``matrix`` -- the default matrix from the command line, ``--workers 2`` vs ``--workers 1``
  (``benchmarks/matrix.py``; target >= 1.7x), beside this machine's own ceiling for two processes.

Writes ``runs/bench.json`` (``--out``), with the process's peak RSS, and prints a plain-text
table. ``--quick`` uses small sizes (a check that everything runs, not numbers to quote).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import byzfl_env
from .engine import bench_engine, bench_one_step
from .floors import bench_floors
from .rules import bench_rules, progress, verdict

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("engine", "rules", "floors", "matrix")
ENGINE_TARGETS = {100: 10.0, 1000: 20.0}
ONE_STEP_TARGET = 2.0  # the reproduction's CNN round <= 2x one plain batched forward + backward (issue 11)
MATRIX_TARGET = 1.7  # --workers 2 vs --workers 1 on the default matrix (issue 6)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def blas_info() -> list[dict[str, Any]] | str:
    """The BLAS/OpenMP libraries loaded, via threadpoolctl when it is installed."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    keep = ("user_api", "internal_api", "prefix", "version", "architecture", "num_threads", "threading_layer")
    return [{key: lib.get(key) for key in keep if key in lib} for lib in threadpool_info()]


def meta(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv[1:],
        "quick": bool(args.quick),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "loadavg_start": list(os.getloadavg()),
        "env": {v: os.environ.get(v) for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")},
        "blas": blas_info(),
    }


# ------------------------------------------------------------------------------------ the groups


def run_engine(args: argparse.Namespace) -> dict[str, Any]:
    sizes = args.engine_clients or ((20, 100) if args.quick else (100, 1000))
    rows = []
    for k in sizes:
        repeats = args.repeats or (2 if args.quick else 5 if k <= 100 else 3)
        r = bench_engine(clients=k, samples=50, bsz=10, repeats=repeats, threads=None)
        target = ENGINE_TARGETS.get(k)
        r.update(repeats=repeats, target=target, verdict=verdict(r["speedup"], target, higher_is_better=True))
        rows.append(r)
        progress(f"engine K={k}: engine {r['engine_s']:.3g} s, loop {r['loop_s']:.3g} s")
    one = []
    for model in ("cnn",) if args.quick else ("cnn", "fltrust_cnn"):
        k = 10 if args.quick else 100
        r = bench_one_step(clients=k, model=model, repeats=args.repeats or (2 if args.quick else 5))
        target = ONE_STEP_TARGET if model == "cnn" else None
        r.update(target=target, verdict=verdict(r["ratio_floor"], target, higher_is_better=False))
        one.append(r)
        progress(f"{r['name']}: engine {r['engine_s']:.3g} s, floor {r['floor_s']:.3g} s")
    return {"samples": 50, "batch_size": 10, "cases": rows, "one_step": one}


def run_rules(args: argparse.Namespace) -> dict[str, Any]:
    byz, reason = byzfl_env.load(install_missing=not args.no_install)
    if byz is None:
        return {"skipped": reason}
    out = bench_rules(
        byz,
        k=args.clients,
        p=args.params or (100_000 if args.quick else 1_000_000),
        f=args.byzantine,
        repeats=args.repeats or (2 if args.quick else 3),
    )
    out["byzfl_version"] = byzfl_env.version(byz)
    return out


def run_floors(args: argparse.Namespace) -> dict[str, Any]:
    return bench_floors(
        k=args.clients,
        p=args.params or (100_000 if args.quick else 1_000_000),
        f=args.byzantine,
        repeats=args.repeats or (2 if args.quick else 5),
    )


def run_matrix_group(args: argparse.Namespace) -> dict[str, Any]:
    from .matrix import bench_matrix

    small = ["--attacks", "none,sign_flip", "--defenses", "fedavg,median", "--seeds", "0"]
    out = bench_matrix(
        "quick",
        workers=2,
        repeats=args.repeats or (1 if args.quick else 3),
        extra=small if args.quick else (),
        spin_iterations=2_000 if args.quick else 20_000,
    )
    out["target"] = MATRIX_TARGET
    out["verdict"] = verdict(out["ratio_best"], MATRIX_TARGET, higher_is_better=True)
    return out


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "engine": run_engine,
    "rules": run_rules,
    "floors": run_floors,
    "matrix": run_matrix_group,
}


# ---------------------------------------------------------------------------------------- table


def _ms(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s"


def _x(r: float | None) -> str:
    return "-" if r is None or not math.isfinite(r) else f"{r:.2f}x" if r < 10 else f"{r:.1f}x"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*map(str, r)).rstrip() for r in rows)]


def _error(group: str, res: dict[str, Any]) -> list[str] | None:
    if "skipped" in res:
        return [f"{group}: skipped: {res['skipped']}"]
    if "error" in res:
        return [f"{group}: failed: {res['error']}"]
    return None


def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    m = results["meta"]
    load = " ".join(f"{x:.2f}" for x in m["loadavg_start"])
    lines.append(
        f"robustfl benchmarks ({'quick' if m['quick'] else 'full'}): torch {m['torch']} "
        f"({m['torch_threads']} threads, {m['cpu_count']} CPUs), numpy {m['numpy']}, load average {load}"
    )
    if "engine" in results:
        res = results["engine"]
        lines.append("")
        lines += _error("engine", res) or [
            "engine: one round (K clients x 50 samples, 5 SGD steps, digits MLP); ratio = loop / engine",
            *_grid(
                ["case", "engine", "per-client loop", "ratio", "target", ""],
                [
                    [
                        r["name"],
                        _ms(r["engine_s"]),
                        _ms(r["loop_s"]),
                        _x(r["speedup"]),
                        f">= {r['target']:g}x" if r["target"] else "-",
                        r["verdict"],
                    ]
                    for r in res["cases"]
                ],
            ),
        ]
        if res.get("one_step"):
            lines += [
                "",
                "engine: one local step from the shared model (K clients x batch 32, MNIST CNN, 1 thread);",
                "  ratio = engine / floor (one plain batched forward + backward, no per-client gradients);",
                "  speed-up = previous release's path (parameters batched through vmap) / engine",
                *_grid(
                    ["case", "params", "engine", "floor", "ratio", "target", "", "previous", "speed-up",
                     "max rel diff"],
                    [
                        [
                            r["name"],
                            f"{r['params']:,}",
                            _ms(r["engine_s"]),
                            _ms(r["floor_s"]),
                            _x(r["ratio_floor"]),
                            f"<= {r['target']:g}x" if r["target"] else "-",
                            r["verdict"],
                            _ms(r["previous_s"]),
                            _x(r["speedup_previous"]),
                            f"{r['max_rel_diff']:.1e}",
                        ]
                        for r in res["one_step"]
                    ],
                ),
            ]
    if "rules" in results:
        res = results["rules"]
        lines.append("")
        err = _error("rules", res)
        if err:
            lines += err
        else:
            lines.append(
                f"rules vs ByzFL {res.get('byzfl_version')}: K={res['k']}, P={res['p']:,} {res['dtype']}, "
                f"f={res['f']}; ratio = ByzFL / robustfl (higher: robustfl faster); same = outputs allclose"
            )
            rows = []
            for r in res["cases"]:
                if "error" in r:
                    rows.append([r["name"], "-", "-", "-", "-", "ERR", "-", r["error"][:60]])
                    continue
                same = {True: "yes", False: "NO", None: "n/a"}[r["same"]]
                p_note = f"P={r['p']:,}" if r.get("reduced_from_p") else ""
                rows.append(
                    [
                        r["name"],
                        _ms(r["robustfl_s"]),
                        _ms(r["byzfl_s"]),
                        _x(r["ratio"]),
                        f">= {r['target']:g}x",
                        r["verdict"],
                        same,
                        p_note,
                    ]
                )
            lines += _grid(["rule", "robustfl", "ByzFL", "ratio", "target", "", "same", ""], rows)
            lines += _rule_notes(res)
    if "floors" in results:
        res = results["floors"]
        lines.append("")
        lines += _error("floors", res) or [
            f"floors: K={res['k']}, P={res['p']:,} {res['dtype']}, f={res['f']}; "
            "ratio = rule / floor (lower is better)",
            *_grid(
                ["rule", "floor", "rule time", "floor time", "ratio", "target", ""],
                [
                    [
                        r["name"],
                        r["floor"],
                        _ms(r.get("rule_s")),
                        _ms(r.get("floor_s")),
                        _x(r.get("ratio")),
                        f"<= {r['target']:g}x" if r.get("target") else "-",
                        r["verdict"],
                    ]
                    for r in res["cases"]
                ],
            ),
        ]
    if "matrix" in results:
        res = results["matrix"]
        lines.append("")
        lines += _error("matrix", res) or _matrix_lines(res)
    lines.append("")
    lines.append(
        f"peak RSS: {results['peak_rss_bytes'] / 2**30:.2f} GiB; load average at the end: "
        + " ".join(f"{x:.2f}" for x in results["loadavg_end"])
    )
    return "\n".join(lines)


def _matrix_lines(res: dict[str, Any]) -> list[str]:
    w = res["workers"]
    m = res["machine"]
    walls = lambda key: ", ".join(f"{t:.1f}" for t in res[key])  # noqa: E731
    return [
        f"matrix: `robustfl matrix {res['scenario']}` ({res['cells']} cells) from the command line, "
        f"--workers {w} vs --workers 1; cells identical: {'yes' if res['identical'] else 'NO'}",
        f"  wall s, --workers 1: {walls('wall_1_s')}; --workers {w}: {walls(f'wall_{w}_s')}",
        f"  ratio best {_x(res['ratio_best'])} (median {_x(res['ratio_median'])}), target >= "
        f"{res['target']:g}x: {res['verdict']}",
        f"  this machine's ceiling for {w} single-threaded processes: {_x(m['ceiling'])} "
        f"(one alone {m['alone_s']:.2f} s, {w} at once {m['together_s']:.2f} s)",
    ] + (
        [
            "  per pair, speed-up / the ceiling measured just before it: "
            + ", ".join(
                f"{p['speedup']:.2f} / {p['ceiling']:.2f} = {p['efficiency']:.0%}" for p in res["pairs"]
            )
        ]
        if res.get("pairs")
        else []
    ) + (
        [
            "  per pair, against a sample of the matrix's cells run alone and as two copies (the "
            "ceiling for this work): "
            + ", ".join(
                f"{p['speedup']:.2f} / {p['cells_ceiling']:.2f} = {p['cells_efficiency']:.0%}"
                for p in res["pairs"]
            )
        ]
        if res.get("pairs") and all("cells_ceiling" in p for p in res["pairs"])
        else []
    ) + (
        [
            "  per pair, the processes' time spent in cells, --workers 1 / --workers N, and their "
            "ratio (the pool's efficiency, within each run): "
            + ", ".join(
                f"{p['busy_1']:.0%} / {p[f'busy_{w}']:.0%} = {p['pool_efficiency']:.0%}" for p in res["pairs"]
            )
        ]
        if res.get("pairs") and all("pool_efficiency" in p for p in res["pairs"])
        else []
    )


def _rule_notes(res: dict[str, Any]) -> list[str]:
    notes = []
    for r in res["cases"]:
        if "error" in r:
            continue
        if r["name"] in ("krum", "multi_krum"):
            a = r["agreement"]
            notes.append(
                f"{r['name']}: same output as ByzFL at equal neighbour counts (robustfl f_hat = f-1): "
                f"{'yes' if a[0]['allclose'] else 'NO'}; at equal f: {'yes' if a[1]['allclose'] else 'NO'}"
            )
        if r["name"] == "geometric_median":
            a = r["agreement"]
            notes.append(
                f"geometric_median: {r['byzfl_iterations']} iterations each (robustfl ran "
                f"{r['robustfl_iterations']}); relative distance to the converged GM "
                f"({r['reference_iterations']} it): robustfl {a[1]['rel_err']:.1e}, "
                f"ByzFL {a[2]['rel_err']:.1e}; "
                f"robustfl vs ByzFL {a[0]['rel_err']:.1e} (ByzFL starts at 0, robustfl at the mean)"
            )
        if "ratio_fresh" in r:
            notes.append(
                f"{r['name']}: ratio above at equal settings, both in place on a fresh copy (untimed); "
                f"robustfl's default call writes a new matrix: {_ms(r['robustfl_fresh_s'])}, ratio "
                f"{_x(r['ratio_fresh'])} against ByzFL in place, {_x(r['ratio_with_copy'])} with ByzFL "
                f"charged the copy that keeps its input ({_ms(r['byzfl_with_copy_s'])})"
            )
        elif "ratio_with_copy" in r:
            notes.append(
                f"{r['name']}: ByzFL mutates its input (ratio above: copy untimed); charged for the copy "
                f"that keeps the input, as robustfl does: ByzFL {_ms(r['byzfl_with_copy_s'])}, "
                f"ratio {_x(r['ratio_with_copy'])}"
            )
        if r.get("reduced_from_p"):
            notes.append(f"{r['name']}: run at P={r['p']:,}: {r['reduced_because']}")
        if r["same"] is False and r["name"] not in ("krum", "multi_krum"):
            worst = max(r["agreement"], key=lambda c: c["rel_err"])
            notes.append(f"{r['name']}: outputs differ: {worst['check']}: rel err {worst['rel_err']:.1e}")
    if res.get("byzfl_only"):
        notes.append("ByzFL only (no robustfl counterpart): " + ", ".join(res["byzfl_only"]))
    if res.get("robustfl_only"):
        notes.append("robustfl only (no ByzFL counterpart): " + ", ".join(res["robustfl_only"]))
    return ["  " + n for n in notes]


# ----------------------------------------------------------------------------------------- main


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a check that everything runs")
    ap.add_argument("--only", choices=GROUPS, help="run one group")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench.json", help="JSON output path")
    ap.add_argument("--repeats", type=int, default=None, help="best-of-N (default per group)")
    ap.add_argument("--clients", type=int, default=50, help="K for rules and floors (default 50)")
    ap.add_argument("--params", type=int, default=None, help="P for rules and floors (default 1,000,000)")
    ap.add_argument("--byzantine", type=int, default=10, help="f assumed Byzantine (default 10)")
    ap.add_argument(
        "--engine-clients",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=None,
        help="comma-separated K for the engine group (default 100,1000)",
    )
    ap.add_argument(
        "--no-install", action="store_true", help="never pip-install ByzFL (skip rules if missing)"
    )
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    results: dict[str, Any] = {"meta": meta(args), "peak_rss_after": {}}
    failed = False
    for group in [args.only] if args.only else GROUPS:
        progress(f"{group} ...")
        t0 = time.perf_counter()
        try:
            results[group] = RUNNERS[group](args)
        except Exception as e:  # a broken group is reported, the others still run
            failed = True
            results[group] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        results[group]["elapsed_s"] = time.perf_counter() - t0
        results["peak_rss_after"][group] = peak_rss_bytes()
    results["peak_rss_bytes"] = peak_rss_bytes()
    results["loadavg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.replace(args.out)
    print(table(results))
    print(f"\nwrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
