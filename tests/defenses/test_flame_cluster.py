"""FLAME's clustering: the closed form of HDBSCAN at FLAME's settings against scikit-learn's labels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from robustfl.defenses.flame import majority_cluster

from ._refs import flame_hdbscan_labels


def sklearn_mask(dist: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        labels = flame_hdbscan_labels(dist.copy())
    found = labels[labels >= 0]
    assert found.size > 0  # at these settings HDBSCAN always finds its one cluster
    out: np.ndarray = labels == int(np.argmax(np.bincount(found)))
    return out


def cosine_distances(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1)
    norms[norms == 0] = 1.0
    g = x @ x.T
    g = (g + g.T) / 2
    d = np.clip(1 - np.nan_to_num(g / (norms[:, None] * norms[None, :])), 0.0, 2.0)
    np.fill_diagonal(d, 0.0)
    return d


def case(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "gaussian":
        return cosine_distances(rng.normal(size=(n, 5)))
    if kind == "copies":  # a third of the rows identical: distance 0
        x = rng.normal(size=(n, 3))
        x[: n // 3] = x[0]
        return cosine_distances(x)
    if kind == "rounded":  # many tied distances
        return cosine_distances(np.round(rng.normal(size=(n, 2)), 1))
    if kind == "lattice":
        return cosine_distances(rng.integers(0, 3, size=(n, 2)).astype(float))
    if kind == "opposed":  # half the rows point against the first one
        x = rng.normal(size=(n, 4))
        x[n // 2 :] = -x[0] * rng.uniform(1, 3, size=(n - n // 2, 1))
        return cosine_distances(x)
    if kind == "quarters":  # arbitrary symmetric distances on a coarse grid
        d = rng.integers(0, 4, size=(n, n)) / 4.0
        d = (d + d.T) / 2
        np.fill_diagonal(d, 0.0)
        return d
    assert kind == "asymmetric"  # rounding-level asymmetry, as a non-symmetrised Gram gives
    x = np.round(rng.normal(size=(n, 2)), 1)
    d = np.linalg.norm(x[:, None] - x[None], axis=2) * (1 + 1e-12 * rng.normal(size=(n, n)))
    np.fill_diagonal(d, 0.0)
    return d


KINDS = ("gaussian", "copies", "rounded", "lattice", "opposed", "quarters", "asymmetric")


@pytest.mark.parametrize("kind", KINDS)
def test_same_labels_as_scikit_learn(kind: str) -> None:
    rng = np.random.default_rng(KINDS.index(kind))
    for _ in range(150):
        n = int(rng.integers(2, 41))
        dist = case(kind, n, rng)
        assert np.array_equal(majority_cluster(dist), sklearn_mask(dist)), (kind, n)


def test_distances_with_equal_reciprocals() -> None:
    """Two distances a < b with 1/a == 1/b in float64: HDBSCAN compares lambdas (1/distance), so
    the point joining at b is in the cluster; with b's lambda below a's, it is not."""
    rng = np.random.default_rng(7)
    a = next(x for x in rng.uniform(0.2, 1.5, 100_000) if 1 / x == 1 / np.nextafter(x, 2.0))
    for b, inside in ((np.nextafter(a, 2.0), True), (a * 1.01, False)):
        d = np.full((5, 5), 1.9)
        for i, j, w in ((0, 1, a), (1, 2, a), (0, 2, a), (2, 3, b), (3, 4, 1.0)):
            d[i, j] = d[j, i] = w
        np.fill_diagonal(d, 0.0)
        got = majority_cluster(d)
        assert np.array_equal(got, sklearn_mask(d))
        assert got.tolist() == [True, True, True, inside, False]


def test_hand_computed() -> None:
    """Five points: {0, 1, 2} within 0.1 of each other, 3 at 0.5 from 2, 4 far. m = 3: the cluster
    is {0, 1, 2}, complete at 0.1; 3 and 4 leave the root at smaller lambdas."""
    d = np.full((5, 5), 1.5)
    for i, j, w in ((0, 1, 0.1), (1, 2, 0.05), (0, 2, 0.1), (2, 3, 0.5)):
        d[i, j] = d[j, i] = w
    np.fill_diagonal(d, 0.0)
    assert majority_cluster(d).tolist() == [True, True, True, False, False]
    assert majority_cluster(d[:1, :1]).tolist() == [True]
