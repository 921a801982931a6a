"""Published bounds on the robustness coefficient kappa of (f, kappa)-robust aggregation rules.

Definition (Allouah et al. 2023): a rule F is (f, kappa)-robust if for every input x_1..x_n and every
set S of n - f indices, ``||F(x) - xbar_S||^2 <= (kappa / |S|) sum_{i in S} ||x_i - xbar_S||^2``.

Sources (``Bound.source`` names the one a value rests on):

* ALLOUAH -- Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan, "Fixing by Mixing: A Recipe for
  Optimal Byzantine ML under Heterogeneity", AISTATS 2023 (PMLR 206; arXiv 2302.01772): the
  definition, the lower bound, a table of upper bounds (CWTM, CWMed, GM, Krum, ...) and the NNM
  theorem (kappa of F o NNM from F's kappa).
* BAREILLES -- Bareilles, Bouaziz, Fageot, El Mhamdi, "Byzantine Machine Learning: MultiKrum and an
  optimal notion of robustness", arXiv 2602.03899 (2026): the first Multi-Krum bound and tighter
  Krum bounds.
* YANG -- Yang, Shi, Li, "On the Effect of Batch Size in Byzantine-Robust Distributed Learning",
  ICLR 2024: Appendix C restates Allouah et al.'s lower bound delta / (1 - 2 delta) = f / (n - 2f)
  and the *shapes* of its Krum, CWTM, CWMed and GM bounds without their leading constants.

Verification status (what was read, not what is remembered): only the two papers' abstracts and
YANG's Appendix C could be read; the theorem statements of ALLOUAH and BAREILLES could not. So
:func:`upper_bound` returns a value only where it follows from the definition (the mean: kappa = 0
at f = 0, no finite kappa for f >= 1; no rule at all for n <= 2f) and ``value=None`` with a
``"not verified: ..."`` source for every published rule-specific bound. The constants a third-party
note in the public code index attributes to ALLOUAH's table (Krum 6(1 + r), CWTM 6r(1 + r), CWMed and
GM 4(1 + r)^2 with r = f / (n - 2f)) are kept apart in :func:`reported_unverified`, marked as such:
YANG confirms their shapes, nothing read here confirms the constants or the Krum variant analysed.

Lower bound (:func:`lower_bound`), with an elementary proof: take f copies of a point x != 0 and
n - f zeros. The n - f zeros form an S with zero spread, so a finite kappa forces F = 0. The S made
of the f copies of x and n - 2f zeros has mean xbar_S = f x / (n - f) and spread
(1/|S|) sum ||x_i - xbar_S||^2 = f (n - 2f) ||x||^2 / (n - f)^2, while ||F - xbar_S||^2 =
f^2 ||x||^2 / (n - f)^2: hence kappa >= f / (n - 2f). With n <= 2f (f >= 1) two zero-spread sets S
at different points exist (n - f rows at a, the other f >= n - f rows at b), so no finite kappa does.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import params

ALLOUAH = (
    'Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan, "Fixing by Mixing", AISTATS 2023 '
    "(arXiv 2302.01772)"
)
BAREILLES = (
    'Bareilles, Bouaziz, Fageot, El Mhamdi, "Byzantine Machine Learning: MultiKrum and an optimal notion of '
    'robustness", arXiv 2602.03899 (2026)'
)
YANG = 'Yang, Shi, Li, "On the Effect of Batch Size in Byzantine-Robust Distributed Learning", ICLR 2024'
NOTE = (
    "a third-party derivation note in the public code index (section 14.7.1, a table whose kappa are "
    '"taken from Allouah et al. 2023"; its repository is not identifiable)'
)

#: The rule labels with a dedicated entry; ``"nnm+<rule>"`` composes NNM with any of them.
RULES = (
    "fedavg", "krum", "multi_krum", "median", "trimmed_mean", "geometric_median", "centered_clipping",
    "bulyan",
)
HONEST_MAJORITY = "n > 2f"


@dataclass(frozen=True)
class Bound:
    """An upper bound on kappa: ``value`` None when none is published, verified or applicable."""

    value: float | None
    source: str
    condition: str


def _check(n: int, f: int) -> tuple[int, int]:
    n = params.number("kappa bounds", "n", n, low=1, integer=True)
    f = params.number("kappa bounds", "f", f, low=0, high=n, integer=True)
    return n, f


def _ratio(n: int, f: int) -> float:
    """r = f / (n - 2f), the quantity every bound here is written in (n > 2f)."""
    return f / (n - 2 * f)


def lower_bound(n: int, f: int) -> float | None:
    """f / (n - 2f): no (f, kappa)-robust rule has a smaller kappa; None when n <= 2f (no rule has any).

    Stated in ALLOUAH, restated in YANG Appendix C as delta / (1 - 2 delta), proved in the module
    docstring. 0 at f = 0 (the mean attains it).
    """
    n, f = _check(n, f)
    return None if n <= 2 * f else _ratio(n, f)


_IMPOSSIBLE = Bound(
    None,
    "no rule is (f, kappa)-robust for a finite kappa when n <= 2f (elementary: two disjoint "
    "zero-spread sets S at different points; lower bound of " + ALLOUAH + ")",
    HONEST_MAJORITY,
)

_MEAN_F0 = Bound(
    0.0,
    "elementary: with f = 0 the only S is all n inputs and the mean is xbar_S exactly",
    "f = 0",
)

_MEAN_NOT_ROBUST = Bound(
    None,
    "not (f, kappa)-robust for any finite kappa when f >= 1 (elementary: honest inputs all equal give "
    "a zero right-hand side, while one Byzantine input moves the mean by any amount)",
    "f = 0 (kappa = 0 there)",
)

_NOT_VERIFIED = {
    "krum": Bound(
        None,
        f"not verified: the Krum entry of {ALLOUAH}'s table could not be read; {NOTE} gives "
        f"6 (1 + f/(n - 2f)), {YANG} App. C the shape 1 + f/(n - 2f) without the constant; "
        f"{BAREILLES} improve Krum's best-known bounds for their optimal coefficient kappa* (theorem, and "
        "whether kappa* is the smallest kappa of this definition, not read). See reported_unverified().",
        HONEST_MAJORITY,
    ),
    "multi_krum": Bound(
        None,
        f"not verified: {BAREILLES} prove the first Multi-Krum bound (a function of n, f and the "
        "number m of rows averaged; robustfl averages m = n - f_hat by default), but only the abstract "
        "could be read: no formula transcribed (nor whether their kappa* is this definition's kappa)",
        HONEST_MAJORITY,
    ),
    "median": Bound(
        None,
        f"not verified: the CWMed entry of {ALLOUAH}'s table could not be read; {NOTE} gives "
        f"4 (1 + f/(n - 2f))^2, {YANG} App. C the shape (1 + f/(n - 2f))^2. See reported_unverified().",
        HONEST_MAJORITY,
    ),
    "geometric_median": Bound(
        None,
        f"not verified: the GM entry of {ALLOUAH}'s table could not be read; {NOTE} gives "
        f"4 (1 + f/(n - 2f))^2, {YANG} App. C the shape (1 + f/(n - 2f))^2. See reported_unverified().",
        HONEST_MAJORITY,
    ),
    "trimmed_mean": Bound(
        None,
        f"not verified: the CWTM entry (trimming f per side) of {ALLOUAH}'s table could not be read; "
        f"{NOTE} gives 6f/(n - 2f) (1 + f/(n - 2f)), {YANG} App. C the shape "
        "f/(n - 2f) (1 + f/(n - 2f)). See reported_unverified().",
        HONEST_MAJORITY,
    ),
    "centered_clipping": Bound(
        None,
        "no published bound found: no (f, kappa) bound for centered clipping was found; Karimireddy, "
        "He, Jaggi (ICML 2021) analyse it as a (delta_max, c)-robust aggregator, a different notion "
        f"(in expectation, i.i.d. honest inputs), as {YANG} section 2 recalls",
        HONEST_MAJORITY,
    ),
    "bulyan": Bound(
        None,
        "no published bound found: no (f, kappa) bound for Bulyan (El Mhamdi, Guerraoui, Rouault, "
        "ICML 2018) was found; a bound for MDA (minimum-diameter averaging) is reported in that "
        "literature but was not read either",
        "n >= 4f + 3 (Bulyan's own precondition)",
    ),
}

_REPORTED = {
    "krum": ("6 (1 + f/(n - 2f))", lambda r: 6.0 * (1.0 + r)),
    "trimmed_mean": ("6f/(n - 2f) (1 + f/(n - 2f))", lambda r: 6.0 * r * (1.0 + r)),
    "median": ("4 (1 + f/(n - 2f))^2", lambda r: 4.0 * (1.0 + r) ** 2),
    "geometric_median": ("4 (1 + f/(n - 2f))^2", lambda r: 4.0 * (1.0 + r) ** 2),
}


def upper_bound(rule: str, n: int, f: int) -> Bound:
    """The tightest verified published upper bound on ``rule``'s kappa at (n, f), or why there is none.

    ``rule``: a label of :data:`RULES`, ``"nnm+<rule>"``, or any other label (no published bound).
    """
    n, f = _check(n, f)
    if n <= 2 * f:
        return _IMPOSSIBLE
    if rule.startswith("nnm+"):
        inner = rule[len("nnm+"):]
        inner_bound = upper_bound(inner, n, f)
        return Bound(
            None,
            f"not verified: the NNM theorem of {ALLOUAH} (kappa of F o NNM as a function of F's kappa) "
            "could not be read; the secondary sources read give only the order kappa = O(f/n) for "
            f"F with kappa = O(1), no constant. Inner rule {inner!r}: "
            + ("value None" if inner_bound.value is None else f"kappa <= {inner_bound.value:g}"),
            HONEST_MAJORITY,
        )
    if rule == "fedavg":
        return _MEAN_F0 if f == 0 else _MEAN_NOT_ROBUST
    if rule in _NOT_VERIFIED:
        return _NOT_VERIFIED[rule]
    return Bound(None, "no published bound", "none known")


def reported_unverified(rule: str, n: int, f: int) -> Bound:
    """The constant a secondary source attributes to ALLOUAH's table -- NOT verified against the paper.

    For display beside :func:`upper_bound` (e.g. a "reported, unverified" column) until someone reads
    the paper's table; never a certified bound. None for rules without such a transcription.
    """
    n, f = _check(n, f)
    if n <= 2 * f:
        return _IMPOSSIBLE
    if rule not in _REPORTED:
        return Bound(None, "no secondary transcription found", "none known")
    formula, value = _REPORTED[rule]
    return Bound(
        value(_ratio(n, f)),
        f"UNVERIFIED: kappa <= {formula}, as transcribed by {NOTE}; shape (without the constant) "
        f"restated in {YANG} App. C; attributed to {ALLOUAH}, whose text was not read",
        HONEST_MAJORITY,
    )
