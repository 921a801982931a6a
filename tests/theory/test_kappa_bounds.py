"""kappa bounds (robustfl.theory.kappa_bounds): the lower bound f/(n - 2f) and its construction, the
elementary facts about the mean, the "not verified" / "no published bound" entries, and the
secondary-source transcriptions pinned against hand-written formulas."""

from __future__ import annotations

import pytest

from robustfl.errors import ParameterError
from robustfl.theory import kappa_bounds as KB

TRANSCRIBED = ("krum", "trimmed_mean", "median", "geometric_median")
NOT_VERIFIED = ("krum", "multi_krum", "median", "geometric_median", "trimmed_mean")
N20_FS = (2, 4, 6, 8)


@pytest.mark.parametrize(
    ("n", "f", "expected"),
    [(20, 0, 0.0), (20, 2, 2 / 16), (20, 4, 4 / 12), (20, 6, 6 / 8), (20, 8, 8 / 4), (10, 2, 2 / 6),
     (5, 2, 2.0)],
)
def test_lower_bound_is_f_over_n_minus_2f(n: int, f: int, expected: float) -> None:
    assert KB.lower_bound(n, f) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("n", "f"), [(4, 2), (10, 5), (3, 2), (1, 1), (20, 10), (20, 20)])
def test_lower_bound_none_without_honest_majority(n: int, f: int) -> None:
    assert KB.lower_bound(n, f) is None


def _mean(rows: list[list[float]]) -> list[float]:
    return [sum(col) / len(rows) for col in zip(*rows, strict=True)]


def _sq(v: list[float]) -> float:
    return sum(x * x for x in v)


def _spread(rows: list[list[float]]) -> float:
    m = _mean(rows)
    return sum(_sq([a - b for a, b in zip(r, m, strict=True)]) for r in rows) / len(rows)


@pytest.mark.parametrize(("n", "f"), [(20, 4), (9, 3), (7, 1)])
def test_lower_bound_construction(n: int, f: int) -> None:
    # f copies of x and n - f zeros: the zeros alone (|S| = n - f) have no spread, so F = 0; the S of
    # the copies and n - 2f zeros then forces kappa >= ||0 - xbar_S||^2 / spread(S) = f / (n - 2f).
    x, zero = [1.5, -2.0, 0.25], [0.0, 0.0, 0.0]
    assert _spread([zero] * (n - f)) == 0.0
    s = [x] * f + [zero] * (n - 2 * f)
    assert len(s) == n - f
    assert _sq(_mean(s)) / _spread(s) == pytest.approx(KB.lower_bound(n, f), rel=1e-12)


@pytest.mark.parametrize(("n", "f"), [(0, 0), (5, -1), (5, 6), (True, 0), (5.0, 1), (5, 1.0)])
def test_bad_arguments(n: object, f: object) -> None:
    with pytest.raises(ParameterError):
        KB.lower_bound(n, f)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        KB.upper_bound("krum", n, f)  # type: ignore[arg-type]


def test_mean_kappa_zero_without_byzantine() -> None:
    b = KB.upper_bound("fedavg", 20, 0)
    assert b.value == 0.0 and b.condition == "f = 0"


@pytest.mark.parametrize("f", [1, 2, 4, 8])
def test_mean_not_robust_with_byzantine(f: int) -> None:
    b = KB.upper_bound("fedavg", 20, f)
    assert b.value is None
    assert b.source.startswith("not (f, kappa)-robust for any finite kappa")


@pytest.mark.parametrize("rule", [*KB.RULES, "nnm+krum", "nnm+trimmed_mean", "flame", "arc+krum"])
@pytest.mark.parametrize(("n", "f"), [(4, 2), (7, 4), (2, 2)])
def test_no_bound_without_honest_majority(rule: str, n: int, f: int) -> None:
    for b in (KB.upper_bound(rule, n, f), KB.reported_unverified(rule, n, f)):
        assert b.value is None
        assert b.condition == "n > 2f"
        assert b.source.startswith("no rule is (f, kappa)-robust")


@pytest.mark.parametrize("rule", NOT_VERIFIED)
@pytest.mark.parametrize(("n", "f"), [(20, 4), (11, 3)])
def test_unread_published_bounds_are_not_verified(rule: str, n: int, f: int) -> None:
    b = KB.upper_bound(rule, n, f)
    assert b.value is None
    assert b.source.startswith("not verified: ")
    assert b.condition == "n > 2f"
    assert (KB.BAREILLES if rule == "multi_krum" else KB.ALLOUAH) in b.source


@pytest.mark.parametrize("inner", [*KB.RULES, "nnm+krum", "whatever"])
def test_nnm_composition_not_verified(inner: str) -> None:
    b = KB.upper_bound("nnm+" + inner, 20, 4)
    assert b.value is None
    assert b.source.startswith("not verified: the NNM theorem of " + KB.ALLOUAH)
    assert repr(inner) in b.source


@pytest.mark.parametrize("rule", ["centered_clipping", "bulyan"])
def test_no_published_bound_found(rule: str) -> None:
    b = KB.upper_bound(rule, 20, 4)
    assert b.value is None and b.source.startswith("no published bound found: ")


@pytest.mark.parametrize("rule", ["flame", "foolsgold", "fltrust", "arc+krum", "krum+nnm", "Krum", ""])
def test_other_labels_have_no_published_bound(rule: str) -> None:
    assert KB.upper_bound(rule, 20, 4) == KB.Bound(None, "no published bound", "none known")


# Hand-written transcriptions of the secondary source's formulas (r = f / (n - 2f)):
#   Krum 6 (1 + r);  CWTM 6 r (1 + r);  CWMed and GM 4 (1 + r)^2.
def _transcription(rule: str, n: int, f: int) -> float:
    r = f / (n - 2 * f)
    return {
        "krum": 6 * (1 + r),
        "trimmed_mean": 6 * f / (n - 2 * f) * (1 + f / (n - 2 * f)),
        "median": 4 * (1 + r) ** 2,
        "geometric_median": 4 * (1 + r) ** 2,
    }[rule]


# The same at n = 20, f = 4 (r = 1/3) and n = 11, f = 3 (r = 3/5), worked by hand.
PINNED = {
    ("krum", 20, 4): 8.0, ("krum", 11, 3): 9.6,
    ("trimmed_mean", 20, 4): 8 / 3, ("trimmed_mean", 11, 3): 5.76,
    ("median", 20, 4): 64 / 9, ("median", 11, 3): 10.24,
    ("geometric_median", 20, 4): 64 / 9, ("geometric_median", 11, 3): 10.24,
}


@pytest.mark.parametrize(("rule", "n", "f"), sorted(PINNED))
def test_reported_unverified_pinned(rule: str, n: int, f: int) -> None:
    b = KB.reported_unverified(rule, n, f)
    assert b.value == pytest.approx(PINNED[rule, n, f], rel=1e-12)
    assert b.value == pytest.approx(_transcription(rule, n, f), rel=1e-12)
    assert b.source.startswith("UNVERIFIED: ")
    assert KB.ALLOUAH in b.source and KB.YANG in b.source
    assert b.condition == "n > 2f"


@pytest.mark.parametrize("rule", ["multi_krum", "bulyan", "centered_clipping", "fedavg", "nnm+krum", "x"])
def test_reported_unverified_absent(rule: str) -> None:
    assert KB.reported_unverified(rule, 20, 4).value is None


def test_every_bound_is_at_least_the_lower_bound() -> None:
    # A value below f/(n - 2f) would be a transcription error (no rule can beat the lower bound).
    checked = 0
    labels = [*KB.RULES, *("nnm+" + r for r in KB.RULES)]
    for f in (0, *N20_FS):
        low = KB.lower_bound(20, f)
        assert low is not None
        for rule in labels:
            for b in (KB.upper_bound(rule, 20, f), KB.reported_unverified(rule, 20, f)):
                if b.value is not None:
                    assert b.value >= low, (rule, f, b)
                    checked += 1
    assert checked == 1 + len(TRANSCRIBED) * (1 + len(N20_FS))  # the mean at f = 0, and the transcriptions
