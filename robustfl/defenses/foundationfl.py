"""FoundationFL: the server appends m copies of one received update -- the one farthest from the
per-coordinate extremes -- and applies a foundational rule (trimmed mean or median) to the K + m rows.

Paper: Fang, Nabavirazavi, Liu, Sun, Iyengar, Yang, "Do We Really Need to Design New
Byzantine-robust Aggregation Rules?", NDSS 2025 (arXiv 2501.17381): the construction is Section IV-B,
Eqs. (2)-(7) and Algorithm 1; the defaults are Section VI-A 6 ("Parameter Settings").

Construction (rows u_1 .. u_K, f = f-hat):
1. Extremes, Eqs. (2)-(3): ``g_max_j = max_k u_kj``, ``g_min_j = min_k u_kj``.
2. Score, Eq. (4): ``s_i = min(||u_i - g_max||_2, ||u_i - g_min||_2)``.
3. Chosen row, Eq. (5): ``i* = argmax_i s_i`` -- "the client's local model update that deviates the
   most from these extreme updates". The paper takes any i* with ``s_i* >= s_i``; here ties go to the
   lowest index (stat ``tie_break``). (Section IV-B also says "A higher s_i^t indicates a greater
   likelihood that the update g_i^t is malicious", at odds with copying the argmax; Eq. (5),
   Algorithm 1 and Section I all take the argmax, as here.)
4. Synthetic updates: ``m`` copies of ``u_i*`` (Algorithm 1: "generates each synthetic update as
   g-bar_j = g_i*, for all j in [m]").
5. ``rule`` over the K + m rows, per coordinate: ``"trimmed_mean"`` (Eq. (6)) drops the c = f largest
   and c = f smallest of the K + m values and averages the K + m - 2f others; ``"median"`` (Eq. (7))
   takes their median (the mean of the two middle values when K + m is even).
f = 0 with the trimmed mean is the mean of the K + m rows (the chosen row then weighs m + 1 times).

Defaults and their sources:
- ``synthetic`` (m) = None: ``m = floor(K / 2)``. Section VI-A 6: "the server generates n/2 synthetic
  updates in each training round by default" (MNIST, Fashion-MNIST, HAR, Purchase, CelebA); Section
  VI-B, partial participation: "synthetic updates amounting to half of the received local updates.
  For instance, if the server receives 30 model updates, it generates an additional 15". The paper's
  K are all even; rounding down for odd K is robustfl's choice (not stated). Fig. 3 reports that
  m / n between 10% and 60% defends. An integer sets m directly.
- trim c = f-hat: Section VI-A 6, "Following [8], [16], [42], we set c = f by default" (Table V also
  runs c = 30 > f; here c is always f-hat).
- ``rule`` = "trimmed_mean": robustfl's choice; the paper evaluates both ("FoundationFL + Trim-mean"
  and "FoundationFL + Median", Table I) and names neither as the default.

Precondition: K > 2f (``min_clients`` = 2f + 1; the paper assumes a benign majority, Section III); the
trimmed mean needs K + m > 2f, Theorem 1's ``c / (n + m) <= 1/2 - v`` (refused otherwise: reachable
only with a small explicit ``synthetic``). Theorems 1-2 analyse synthetic updates computed from a
clean server dataset D_0, "strictly for theoretical analysis purposes" (Section V): the paper states
no guarantee for the construction above, which uses only the received rows.

What the score favours: per coordinate ``(g_max_j - u_j)^2 + (u_j - g_min_j)^2 <= R_j^2`` (R the
range), with equality only on the envelope, so ``s_i^2 <= ||R||^2 / 2``, attained by a row that sits
on g_max or g_min in every coordinate with the range split evenly between the two sides. Attacks
whose rows sit on the envelope on opposite sides coordinate by coordinate (sign flipping, IPM with a
large epsilon, Fang et al.'s Trim attack) are what Eq. (5) copies. Measured here (scenarios/
defenses.toml, seed 0: final relative drift; foundationfl / median): none 0.141 / 0.059, sign_flip
10.1 / 0.109, alie 0.160 / 0.268, ipm-100 diverged / 0.150, min_max 0.266 / 0.295, fang_trim
0.903 / 0.150; the copied row was Byzantine in every round under sign_flip, ipm-100 and fang_trim.
The paper reports 0.05 test error for "FoundationFL + Trim-mean" under its Trim attack on MNIST
(Table I(a): CNN, 100 clients, 2,000 rounds); that is not reproduced in this setting, for a reason
not established (the paper's code was not found).

Not in the paper (robustfl's choices): rows with a non-finite entry are left out of the extremes and
the scores and are never chosen (a NaN or inf would otherwise decide g_max / g_min); they still enter
the final rule, which handles them as the built-in rules do. With no finite row, i* = 0.
Weights: None (coordinate-wise). Stats: ``selected_index`` (i*), ``num_synthetic`` (m), ``score_gap``
= ``(s_i* - s_2) / s_i*`` with s_2 the best score of a row that differs from u_i* (0 when there is
none; the property suite's near-tie guard), ``tie_break`` (1 when such a row scores exactly s_i*).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import params
from ..errors import InputError
from ..kernels import check_updates, row_norms
from ..types import Aggregate, DefenseContext
from ._select import Rule, f_hat, mean_of_order_stats, sq_dist_to

RULES = ("trimmed_mean", "median")


@dataclass
class FoundationFL(Rule):
    rule: str = "trimmed_mean"
    synthetic: int | None = None
    name = "foundationfl"
    properties = frozenset(
        {"permutation_invariant", "translation_equivariant", "scale_equivariant", "coordinate_bounded"}
    )

    def __post_init__(self) -> None:
        params.choice(f"defense {self.name}", "rule", self.rule, RULES)
        if self.synthetic is not None:
            params.number(f"defense {self.name}", "synthetic", self.synthetic, low=0, integer=True)

    def min_clients(self, f_hat: int) -> int:
        return 2 * f_hat + 1

    def num_synthetic(self, k: int) -> int:
        """m for K received rows: ``synthetic``, or floor(K / 2) (the paper's n / 2)."""
        return k // 2 if self.synthetic is None else self.synthetic

    @staticmethod
    def scores(updates: Tensor) -> Tensor:
        """float64 Eq. (4) scores ``min(||u_i - g_max||, ||u_i - g_min||)`` over the finite rows (the
        extremes taken over those rows); a row with a non-finite entry scores -inf."""
        finite = torch.isfinite(row_norms(updates))
        out = torch.full((updates.shape[0],), -torch.inf, dtype=torch.float64, device=updates.device)
        if not bool(finite.any()):
            return out
        rows = updates if bool(finite.all()) else updates[finite]
        hi, lo = rows.max(0).values, rows.min(0).values
        out[finite] = torch.minimum(sq_dist_to(rows, hi), sq_dist_to(rows, lo)).sqrt()
        return out

    def choose(self, updates: Tensor) -> tuple[int, float, bool]:
        """(i*, the relative score gap to the best row differing from u_i*, whether that row ties)."""
        s = self.scores(updates)
        i = int(torch.argmax(s))  # the first maximum: ties to the lowest index
        other = (updates != updates[i]).any(1)
        if not bool(other.any()) or not bool(torch.isfinite(s[i])) or float(s[i]) <= 0:
            return i, 0.0, False
        runner = float(s[other].max())
        best = float(s[i])
        return i, max(best - runner, 0.0) / best, runner == best

    def __call__(self, updates: Tensor, ctx: DefenseContext) -> Aggregate:
        check_updates(updates, self.name)
        k, f = updates.shape[0], f_hat(ctx)
        m = self.num_synthetic(k)
        n = k + m
        if self.rule == "trimmed_mean" and n <= 2 * f:
            raise InputError(
                f"{self.name}: the trimmed mean needs K + synthetic > 2 f_hat rows, got K = {k}, "
                f"synthetic = {m}, f_hat = {f}"
            )
        i, gap, tied = self.choose(updates)
        rows = torch.cat([updates, updates[i].expand(m, -1)]) if m else updates
        if self.rule == "trimmed_mean":
            vector = mean_of_order_stats(rows, f, n - f - 1)
        else:
            vector = mean_of_order_stats(rows, (n - 1) // 2, n // 2)
        stats = {
            "selected_index": float(i),
            "num_synthetic": float(m),
            "score_gap": float(gap),
            "tie_break": float(tied),
        }
        return Aggregate(vector.to(updates.dtype), None, stats)
