"""robustfl's robust rules beside Flower's Message-API strategies, on the same client replies.

``python -m benchmarks.flower_rules [--json PATH] [--params P]`` (docs/flower-rules.md).

For K = 20 replies with f = 4 assumed Byzantine, and several reply sets (honest; sign-flipped;
ALIE; unequal num-examples; a large model with tiny updates), each in float64 and float32 models:

* Flower 1.42 (``flwr.serverapp.strategy``): ``Krum``, ``MultiKrum`` (``num_nodes_to_select =
  K - f``), ``Bulyan``, ``FedMedian`` and ``FedTrimmedAvg`` (``beta = f / K``), each given reply
  ``Message``s whose ``"arrays"`` hold the client's whole model w_k (two arrays, P entries in all)
  and whose ``"metrics"`` hold ``num-examples``; Flower's aggregated update = its model - w.
* robustfl: ``krum``, ``multi_krum`` (``selected = K - f``), ``bulyan``, ``median``,
  ``trimmed_mean`` on the (K, P) update rows w_k - w in the models' dtype.
* the paper's rule in exact float64 arithmetic on the same update rows (direct-difference
  distances, no Gram formula): the reference both are measured against.

For each pair: whether the selected sets agree with the paper's (Krum, Multi-Krum, Bulyan;
identical rows count as one), the largest absolute and the relative difference of the two
aggregated updates, each one's relative error against the exact rule, and the cause of a
difference, diagnosed from the measurements: a selection that equals Flower's own rule computed
exactly is a rule difference; one that does not is lost precision (Flower's distances are taken
between whole models with ``|x|^2 + |y|^2 - 2 x.y`` in the models' dtype, see the distance check).
Everything is seeded (numpy Generators); Flower's log output is silenced below WARNING.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robustfl.defenses._select import Distances, select_lowest
from robustfl.kernels import krum_neighbours
from robustfl.simulation.components import build_defense
from robustfl.types import DefenseContext

K, F = 20, 4
SHAPES_100K = ((330, 300), (1000,))  # two arrays, as a model's weight and bias: P = 100,000
RULES = (("Krum", "krum"), ("MultiKrum", "multi_krum"), ("Bulyan", "bulyan"),
         ("FedMedian", "median"), ("FedTrimmedAvg", "trimmed_mean"))
SELECTION = {"krum", "multi_krum", "bulyan"}


@dataclass(frozen=True)
class Case:
    """One reply set: honest rows g + xi_k (|g| = drift, |xi_k| from noise, geometric), f of them
    replaced by the attack at seeded positions; w ~ N(0, 1) scaled to ``model_norm``."""

    name: str
    dtype: str  # the models' dtype: "float64" | "float32"
    attack: str = "sign_flip"  # none | sign_flip (-own update) | alie (mu + z sigma)
    model_norm: float = 1e2
    noise: tuple[float, float] = (1.0, 1.0)
    drift: float = 1.0
    weighted: bool = False  # num-examples drawn from 10..200 (else 100 each)
    replies: str = "models"  # what the ArrayRecords carry: "models" w_k | "updates" w_k - w
    k: int = K
    f: int = F
    rules: tuple[str, ...] = tuple(r for _, r in RULES)
    seed: int = 0


CASES = [
    *(Case("honest", dt, attack="none") for dt in ("float64", "float32")),
    *(Case("sign_flip", dt, seed=1) for dt in ("float64", "float32")),
    *(Case("alie", dt, attack="alie", seed=2) for dt in ("float64", "float32")),
    Case("num_examples", "float64", weighted=True, seed=3),
    *(Case("precision", dt, model_norm=1e3, noise=(1e-3, 1e-2), drift=3e-3, seed=4)
      for dt in ("float64", "float32")),
    Case("precision_updates", "float32", model_norm=1e3, noise=(1e-3, 1e-2), drift=3e-3, seed=4,
         replies="updates"),
    Case("trim_edge", "float64", attack="none", k=49, f=1, rules=("trimmed_mean",), seed=5),
]


def flwr_modules() -> Any:
    """Flower's strategy package, imported with telemetry and the update check off; None if absent."""
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
    os.environ["FLWR_DISABLE_UPDATE_CHECK"] = "1"
    try:
        import flwr.serverapp.strategy as strategy
    except ImportError:
        return None
    logging.getLogger("flwr").setLevel(logging.WARNING)
    return strategy


# --------------------------------------------------------------------------- the reply set


@dataclass
class Replies:
    case: Case
    w: np.ndarray  # (P,) global model in the case's dtype
    models: np.ndarray  # (K, P) what the replies carry (models or updates), the case's dtype
    rows: np.ndarray  # (K, P) update rows robustfl is given, the case's dtype
    exact: np.ndarray  # (K, P) float64 updates exactly as carried (models - w in float64)
    num_examples: list[int]
    byzantine: list[int]
    shapes: tuple[tuple[int, ...], ...]


def make_replies(case: Case, p: int) -> Replies:
    rng = np.random.default_rng(case.seed)
    shapes = SHAPES_100K if p == 100_000 else ((p,),)
    dt = np.dtype(case.dtype)
    w64 = rng.standard_normal(p)
    w64 *= case.model_norm / np.linalg.norm(w64)
    g = rng.standard_normal(p)
    g *= case.drift / np.linalg.norm(g)
    xi = rng.standard_normal((case.k, p))
    xi *= (np.geomspace(*case.noise, case.k) / np.linalg.norm(xi, axis=1))[:, None]
    u = g + xi[rng.permutation(case.k)]
    byz = sorted(rng.choice(case.k, case.f, replace=False).tolist()) if case.attack != "none" else []
    honest = [i for i in range(case.k) if i not in byz]
    if case.attack == "sign_flip":
        u[byz] = -u[byz]
    elif case.attack == "alie":
        s = math.floor(case.k / 2 + 1) - case.f
        z = statistics.NormalDist().inv_cdf((case.k - s) / case.k)
        u[byz] = u[honest].mean(0) + z * u[honest].std(0)
    w = w64.astype(dt)
    if case.replies == "updates":
        carried, rows = u.astype(dt), u.astype(dt)
        exact = carried.astype(np.float64)
    else:
        carried = (w64 + u).astype(dt)
        rows = carried - w  # what a server computes from the replies, in their dtype
        exact = carried.astype(np.float64) - w.astype(np.float64)
    n = rng.integers(10, 201, case.k).tolist() if case.weighted else [100] * case.k
    return Replies(case, w, carried, rows, exact, n, byz, shapes)


def messages(r: Replies) -> list[Any]:
    """Fresh reply Messages (FedMedian and FedTrimmedAvg pop the arrays they read)."""
    from flwr.app import Array, ArrayRecord, Message, Metadata, MetricRecord, RecordDict

    out = []
    for i, flat in enumerate(r.models):
        parts, start = {}, 0
        for j, shape in enumerate(r.shapes):
            size = math.prod(shape)
            parts[f"layer{j}"] = Array(np.ascontiguousarray(flat[start : start + size].reshape(shape)))
            start += size
        content = RecordDict({"arrays": ArrayRecord(parts),
                              "metrics": MetricRecord({"num-examples": int(r.num_examples[i])})})
        # A reply from node i + 1 to the server (node 0). Flower's public constructors need a
        # running app (TaskIdentity) or an instruction created within one; outside a run the
        # constructor's prepared-Metadata form builds the same reply, deterministically.
        meta = Metadata(run_id=1, message_id=f"reply-{i}", src_node_id=i + 1, dst_node_id=0,
                        reply_to_message_id=f"train-{i}", group_id="1", created_at=0.0,
                        ttl=3600.0, message_type="train")
        out.append(Message(content=content, metadata=meta))  # type: ignore[call-overload]
    return out


# ------------------------------------------------------------- exact references (float64)


def exact_sq_distances(u: np.ndarray) -> np.ndarray:
    """(K, K) squared distances by direct differences in float64 (no Gram cancellation)."""
    return np.stack([np.square(u - u[i]).sum(1) for i in range(len(u))])


def lowest_scores(d: np.ndarray, pool: Sequence[int], n: int, m: int) -> list[int]:
    """The m rows of ``pool`` with the smallest sum of squared distances to their n nearest others
    in the pool (ties: lower index)."""
    sub = d[np.ix_(pool, pool)].copy()
    np.fill_diagonal(sub, np.inf)
    scores = np.sort(sub, axis=1)[:, :n].sum(1) if n > 0 else np.zeros(len(pool))
    return [int(pool[i]) for i in np.argsort(scores, kind="stable")[:m]]


def paper_set(rule: str, d: np.ndarray, f: int) -> list[int]:
    """Krum / Multi-Krum (m = K - f): one scoring with max(0, K - f - 2) neighbours; Bulyan:
    K - 2f rounds of Krum on the shrinking pool, max(0, n' - f - 2) neighbours each."""
    k = len(d)
    if rule != "bulyan":
        return lowest_scores(d, list(range(k)), max(0, k - f - 2), 1 if rule == "krum" else k - f)
    pool, picks = list(range(k)), []
    for _ in range(k - 2 * f):
        i = lowest_scores(d, pool, max(0, len(pool) - f - 2), 1)[0]
        picks.append(i)
        pool.remove(i)
    return picks


def flower_rule_set(rule: str, d: np.ndarray, f: int) -> list[int]:
    """Flower's selection rule in exact arithmetic: one scoring with max(1, K - f - 2)
    neighbours, the m lowest (m = 1, K - f, or K - 2f for Bulyan)."""
    k = len(d)
    m = {"krum": 1, "multi_krum": k - f, "bulyan": k - 2 * f}[rule]
    return lowest_scores(d, list(range(k)), max(1, k - f - 2), m)


def closest_to_median_mean(rows: np.ndarray, beta: int) -> np.ndarray:
    dev = np.abs(rows - np.median(rows, axis=0))
    take = np.argsort(dev, axis=0, kind="stable")[:beta]
    return np.take_along_axis(rows, take, axis=0).mean(0)


def paper_vector(rule: str, u: np.ndarray, f: int, sel: list[int]) -> np.ndarray:
    k = len(u)
    if rule in ("krum", "multi_krum"):
        return u[sel].mean(0)
    if rule == "bulyan":
        return closest_to_median_mean(u[sorted(sel)], k - 4 * f)
    if rule == "median":
        return np.median(u, axis=0)
    return np.sort(u, axis=0)[f : k - f].mean(0)


# --------------------------------------------------------------------------- the two sides


def flower_run(strategy: Any, flower_name: str, r: Replies) -> tuple[np.ndarray, list[int] | None]:
    """Flower's aggregated update (float64) and, for selection rules, the rows it selected
    (read from ``select_multikrum``, the selection its aggregate_train calls)."""
    k, f = r.case.k, r.case.f
    settings: dict[str, dict[str, Any]] = {
        "Krum": {"num_malicious_nodes": f},
        "MultiKrum": {"num_malicious_nodes": f, "num_nodes_to_select": k - f},
        "Bulyan": {"num_malicious_nodes": f},
        "FedMedian": {},
        "FedTrimmedAvg": {"beta": f / k},
    }
    arrays, _ = getattr(strategy, flower_name)(**settings[flower_name]).aggregate_train(1, messages(r))
    flat = np.concatenate([arrays[key].numpy().ravel() for key in arrays]).astype(np.float64)
    agg = flat if r.case.replies == "updates" else flat - r.w.astype(np.float64)
    m = {"Krum": 1, "MultiKrum": k - f, "Bulyan": k - 2 * f}.get(flower_name)
    if m is None:
        return agg, None
    contents = [msg.content for msg in messages(r)]
    chosen = strategy.multikrum.select_multikrum(contents, num_malicious_nodes=f, num_nodes_to_select=m)
    return agg, [next(i for i, c in enumerate(contents) if c is x) for x in chosen]


def robustfl_bulyan_set(rows: torch.Tensor, f: int) -> list[int]:
    """robustfl's Bulyan picks, by the calls robustfl.defenses.bulyan makes (its Aggregate
    carries no selection); checked against its vector in ``compare``."""
    dist, pool, picks = Distances.of(rows), torch.arange(rows.shape[0]), []
    for _ in range(rows.shape[0] - 2 * f):
        sel, _, _ = select_lowest(dist, pool, krum_neighbours(len(pool), f), 1)
        picks.append(int(sel[0]))
        pool = pool[pool != sel[0]]
    return picks


def robustfl_run(rule: str, r: Replies) -> tuple[np.ndarray, list[int] | None]:
    k, f = r.case.k, r.case.f
    rows = torch.from_numpy(np.ascontiguousarray(r.rows))
    ctx = DefenseContext(assumed_byzantine=f, global_model=torch.from_numpy(r.w),
                         num_samples=torch.tensor(r.num_examples, dtype=torch.float64))
    spec: Any = {"name": "multi_krum", "selected": k - f} if rule == "multi_krum" else rule
    agg = build_defense(spec)(rows, ctx)
    vec = agg.vector.to(torch.float64).numpy()
    if rule == "krum":
        return vec, [int(agg.stats["selected_index"])]
    if rule == "multi_krum":
        assert agg.weights is not None
        return vec, torch.nonzero(agg.weights).flatten().tolist()
    if rule == "bulyan":
        return vec, robustfl_bulyan_set(rows, f)
    return vec, None


# --------------------------------------------------------------------------- comparison


def canonical(sel: list[int] | None, u: np.ndarray) -> list[int] | None:
    """Selected rows as a sorted list, each replaced by the first row identical to it."""
    if sel is None:
        return None
    return sorted({next(j for j in range(len(u)) if np.array_equal(u[j], u[i])) for i in sel})


def rel(a: np.ndarray, b: np.ndarray) -> float:
    nb = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / nb if nb > 0 else float(np.linalg.norm(a - b))


def distance_check(strategy: Any, r: Replies, d: np.ndarray) -> dict[str, Any]:
    """Flower's ``compute_distances`` on these replies against the exact update distances, over
    pairs of distinct rows (identical rows, as ALIE sends, have exact distance 0)."""
    records = [msg.content["arrays"] for msg in messages(r)]
    fd = np.asarray(strategy.multikrum.compute_distances(records), dtype=np.float64)
    distinct = d > 0
    err = np.abs(fd - d)[distinct]
    # a row whose Gram "distance" to itself is not below every distinct row's: Flower's
    # argsort(...)[1:n+1] then drops a real neighbour instead of the row itself
    self_not_first = [i for i in range(len(d)) if (fd[i][distinct[i]] <= fd[i, i]).any()]
    return {
        "max_abs_error": float(err.max()),
        "min_exact_distance": float(d[distinct].min()),
        "error_over_min_distance": float(err.max() / d[distinct].min()),
        "negative_distances": int((fd[distinct] < 0).sum()),
        "rows_self_not_nearest": len(self_not_first),
    }


def diagnose(rule: str, r: Replies, fl: dict[str, Any], d: np.ndarray, bound: float) -> str:
    k, f = r.case.k, r.case.f
    if fl["robustfl_set"] is not None and fl["robustfl_set"] != fl["paper_set"]:
        return "robustfl's selection differs from the paper's"
    if fl["flower_set"] is not None and fl["flower_set"] != fl["paper_set"]:
        own = canonical(flower_rule_set(rule, d, f), r.exact)
        rule_why = {"bulyan": "selection rule: one Multi-Krum pass of K-2f (paper: K-2f rounds of Krum)",
                    }.get(rule, "selection rule: max(1, K-f-2) neighbours")
        if fl["flower_set"] == own:
            return rule_why
        why = f"precision: squared distances between whole {r.case.dtype} models"
        return why if own == fl["paper_set"] else f"{why}; and {rule_why}"
    if rule == "multi_krum" and len(set(r.num_examples)) > 1:
        return "weights: num-examples (paper, robustfl: 1/m)"
    if rule == "trimmed_mean" and int(f / k * k) != f:
        return f"beta = f/K as a fraction: int(beta*K) = {int(f / k * k)} trimmed per side (paper: f = {f})"
    if fl["max_abs"] <= bound:
        return "agree up to rounding (Flower aggregates w_k, then - w)" if r.case.replies == "models" \
            else "agree up to rounding"
    return "unexplained"


def compare(strategy: Any, r: Replies) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    d = exact_sq_distances(r.exact)
    eps = float(np.finfo(r.models.dtype).eps)
    bound = 16 * eps * float(np.abs(r.models).max())
    out = []
    for flower_name, rule in RULES:
        if rule not in r.case.rules:
            continue
        f_vec, f_sel = flower_run(strategy, flower_name, r)
        r_vec, r_sel = robustfl_run(rule, r)
        p_sel = paper_set(rule, d, r.case.f) if rule in SELECTION else []
        exact = paper_vector(rule, r.exact, r.case.f, p_sel)
        row: dict[str, Any] = {
            "case": r.case.name, "dtype": r.case.dtype, "replies": r.case.replies,
            "flower": flower_name, "robustfl": rule,
            "flower_set": canonical(f_sel, r.exact), "robustfl_set": canonical(r_sel, r.exact),
            "paper_set": canonical(p_sel, r.exact) if rule in SELECTION else None,
            "byzantine_picked": [None if s is None else len(set(s) & set(r.byzantine))
                                 for s in (f_sel, r_sel, p_sel if rule in SELECTION else None)],
            "max_abs": float(np.abs(f_vec - r_vec).max()), "rel": rel(f_vec, r_vec),
            "flower_err": rel(f_vec, exact), "robustfl_err": rel(r_vec, exact),
            "rounding_bound": bound,
        }
        if rule == "bulyan":  # robustfl's vector must be the second stage on the picks reported
            row["robustfl_set_check"] = rel(r_vec, closest_to_median_mean(r.exact[sorted(r_sel or [])],
                                                                            r.case.k - 4 * r.case.f))
        row["why"] = diagnose(rule, r, row, d, bound)
        out.append(row)
    return out, {"case": r.case.name, "dtype": r.case.dtype, "replies": r.case.replies,
                 "byzantine": r.byzantine, **distance_check(strategy, r, d)}


# --------------------------------------------------------------------------- output


def _set(row: dict[str, Any], key: str) -> str:
    a, p = row[key], row["paper_set"]
    if a is None:
        return "-"
    if a == p:
        return "yes"
    if len(p) == 1:
        return f"no ({a[0]} vs {p[0]})"
    return f"no ({len(set(a) - set(p))} of {len(p)} differ)"


def table(rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> str:
    head = ["case", "models", "Flower / robustfl", "Flower set = paper", "robustfl set = paper",
            "Byzantine picked F/r/p", "max abs diff", "rel diff", "Flower rel err", "robustfl rel err", "why"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        models = r["dtype"] + (" (updates)" if r["replies"] == "updates" else "")
        byz = "/".join("-" if b is None else str(b) for b in r["byzantine_picked"])
        cells = [r["case"], models, f"{r['flower']} / {r['robustfl']}", _set(r, "flower_set"),
                 _set(r, "robustfl_set"), byz,
                 f"{r['max_abs']:.2e}", f"{r['rel']:.2e}",
                 f"{r['flower_err']:.2e}", f"{r['robustfl_err']:.2e}", r["why"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Flower's compute_distances (Gram formula on what the replies carry) vs the exact "
              "update distances:",
              "", "| case | models | max abs error | smallest exact distance | error / smallest | "
              "negative | rows not nearest to themselves |", "|---|---|---|---|---|---|---|"]
    for c in checks:
        models = c["dtype"] + (" (updates)" if c["replies"] == "updates" else "")
        lines.append(f"| {c['case']} | {models} | {c['max_abs_error']:.2e} | {c['min_exact_distance']:.2e} | "
                     f"{c['error_over_min_distance']:.2e} | {c['negative_distances']} | "
                     f"{c['rows_self_not_nearest']} |")
    return "\n".join(lines)


def run(p: int = 100_000, cases: Sequence[Case] = tuple(CASES)) -> dict[str, Any]:
    strategy = flwr_modules()
    if strategy is None:
        return {"skipped": "flwr is not installed"}
    from importlib.metadata import version

    rows, checks = [], []
    for case in cases:
        res, chk = compare(strategy, make_replies(case, p))
        rows += res
        checks.append(chk)
    meta = {"flwr": version("flwr"), "numpy": np.__version__, "torch": torch.__version__, "params": p,
            "cases": [asdict(c) for c in cases]}
    return {"meta": meta, "rows": rows, "distance_checks": checks}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.flower_rules",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--params", type=int, default=100_000, help="P, entries per model (default 100,000)")
    args = ap.parse_args(argv)
    res = run(args.params)
    if "skipped" in res:
        print(f"skipped: {res['skipped']}")
        return 0
    m = res["meta"]
    print(f"flwr {m['flwr']}, numpy {m['numpy']}, torch {m['torch']}; P = {m['params']:,}\n")
    print(table(res["rows"], res["distance_checks"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
