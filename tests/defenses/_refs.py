"""Independent slow references: literal transcriptions of the papers' formulas in float64 numpy,
with Python loops over rows (deliberately not vectorised, so they share no code with the rules).
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.cluster import HDBSCAN


def sqdist(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum((a - b) ** 2))


def krum_scores(rows: list[np.ndarray], f: int) -> list[float]:
    n = max(0, len(rows) - f - 2)
    out = []
    for i, u in enumerate(rows):
        d = sorted(sqdist(u, v) for j, v in enumerate(rows) if j != i)
        out.append(sum(d[:n]))
    return out


def krum(u: np.ndarray, f: int) -> tuple[np.ndarray, int]:
    rows = list(u)
    s = krum_scores(rows, f)
    best = min(range(len(rows)), key=lambda i: (s[i], i))
    return u[best], best


def multi_krum(u: np.ndarray, f: int, m: int) -> tuple[np.ndarray, list[int]]:
    s = krum_scores(list(u), f)
    chosen = sorted(range(len(u)), key=lambda i: (s[i], i))[:m]
    return np.mean([u[i] for i in sorted(chosen)], axis=0), chosen


def bulyan(u: np.ndarray, f: int) -> np.ndarray:
    k, p = u.shape
    theta, beta = k - 2 * f, k - 4 * f
    pool = list(range(k))
    picks = []
    for _ in range(theta):
        s = krum_scores([u[i] for i in pool], f)
        best = min(range(len(pool)), key=lambda j: (s[j], pool[j]))
        picks.append(pool.pop(best))
    picks.sort()
    out = np.empty(p)
    for j in range(p):
        vals = [u[i, j] for i in picks]
        med = float(np.median(vals))
        closest = sorted(range(theta), key=lambda r: (abs(vals[r] - med), picks[r]))[:beta]
        out[j] = sum(vals[r] for r in closest) / beta
    return out


def trimmed_mean(u: np.ndarray, f: int) -> np.ndarray:
    k, p = u.shape
    out = np.empty(p)
    for j in range(p):
        col = sorted(u[:, j])
        kept = col[f : k - f]
        out[j] = sum(kept) / len(kept)
    return out


def centered_clipping(rounds: list[np.ndarray], tau: float | None, iterations: int) -> list[np.ndarray]:
    v = np.zeros(rounds[0].shape[1])
    outs = []
    for u in rounds:
        k = len(u)
        t = tau if tau is not None else float(np.median([np.linalg.norm(row - v) for row in u]))
        for _ in range(iterations):
            acc = np.zeros_like(v)
            for row in u:
                x = row - v
                nx = float(np.linalg.norm(x))
                acc += x * (min(1.0, t / nx) if nx > 0 else 1.0)
            v = v + acc / k
        outs.append(v.copy())
    return outs


def foolsgold_round(
    history: dict[int, np.ndarray], ids: list[int], u: np.ndarray, kappa: float
) -> np.ndarray:
    """One round of Fung et al.'s Algorithm 1 (self-similarity 0), updating ``history``."""
    for i, row in zip(ids, u, strict=True):
        history[i] = history.get(i, np.zeros_like(row)) + row
    hist = [history[i] for i in ids]
    n = len(ids)
    cs = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            ni, nj = np.linalg.norm(hist[i]), np.linalg.norm(hist[j])
            if i != j and ni > 0 and nj > 0:
                cs[i][j] = float(np.dot(hist[i], hist[j]) / (ni * nj))
    v = [max(cs[i]) for i in range(n)]
    for i in range(n):
        for j in range(n):
            if v[j] > v[i]:
                cs[i][j] *= v[i] / v[j]
    alpha = [min(1.0, max(0.0, 1 - max(cs[i]))) for i in range(n)]
    top = max(alpha)
    alpha = [a / top if top > 0 else 0.0 for a in alpha]
    wv = []
    for a in alpha:
        if a >= 1:
            wv.append(1.0)
        elif a <= 0:
            wv.append(0.0)
        else:
            wv.append(min(1.0, max(0.0, kappa * (math.log(a / (1 - a)) + 0.5))))
    total = sum(wv)
    if total == 0:
        return np.zeros(u.shape[1])
    return sum(w * row for w, row in zip(wv, u, strict=True)) / total


def dnc(u: np.ndarray, f: int, c: float, subsets: list[np.ndarray]) -> np.ndarray:
    k = len(u)
    good = set(range(k))
    keep_n = max(1, k - math.floor(c * f + 1e-9))
    for r in subsets:
        sub = u[:, r]
        centred = sub - sub.mean(axis=0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        scores = [float(np.dot(centred[i], vt[0]) ** 2) for i in range(k)]
        good &= set(sorted(range(k), key=lambda i: (scores[i], i))[:keep_n])
    if not good:
        return np.zeros(u.shape[1])
    return np.mean([u[i] for i in sorted(good)], axis=0)


def flame_hdbscan_labels(dist: np.ndarray) -> np.ndarray:
    """scikit-learn's HDBSCAN labels at FLAME's settings on precomputed distances."""
    labels: np.ndarray = HDBSCAN(
        min_cluster_size=max(2, len(dist) // 2 + 1),
        min_samples=1,
        metric="precomputed",
        allow_single_cluster=True,
        copy=True,
    ).fit_predict(dist)
    return labels


def flame(u: np.ndarray) -> tuple[np.ndarray, list[int]]:
    k = len(u)
    dist = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if i != j:
                c = np.dot(u[i], u[j]) / (np.linalg.norm(u[i]) * np.linalg.norm(u[j]))
                dist[i, j] = min(2.0, max(0.0, 1 - c))
    labels = flame_hdbscan_labels(dist)
    clusters = [lab for lab in labels if lab >= 0]
    if clusters:
        best = max(set(clusters), key=lambda lab: (clusters.count(lab), -lab))
        kept = [i for i in range(k) if labels[i] == best]
    else:
        kept = list(range(k))
    norms = [float(np.linalg.norm(row)) for row in u]
    s = float(np.median(norms))
    clipped = [u[i] * min(1.0, s / norms[i]) for i in kept]
    return np.mean(clipped, axis=0), kept


def nnm(u: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    k = len(u)
    m = max(1, k - f)
    mix = np.zeros((k, k))
    out = np.empty_like(u)
    for i in range(k):
        others = sorted((j for j in range(k) if j != i), key=lambda j: (sqdist(u[i], u[j]), j))
        nbrs = [i, *others[: m - 1]]
        out[i] = np.mean([u[j] for j in nbrs], axis=0)
        mix[i, nbrs] = 1.0 / m
    return out, mix


def arc(u: np.ndarray, f: int) -> np.ndarray:
    k = len(u)
    n = math.floor(2 * (f / k) * (k - f) + 1e-9)
    norms = [float(np.linalg.norm(row)) for row in u]
    if n == 0:
        return u.copy()
    order = sorted(range(k), key=lambda i: -norms[i])
    thr = norms[order[n]]
    out = u.copy()
    for i in order[:n]:
        if norms[i] > thr:
            out[i] = u[i] * thr / norms[i]
    return out
