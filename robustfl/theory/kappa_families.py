"""The honest rows ``robustfl kappa`` measures rules on: four documented families, or a task's rounds.

A family gives, for n clients of which f are Byzantine and P coordinates, the n - f honest rows H
and the f rows the Byzantine clients would send honestly (``own``: what the fixed attacks start
from), drawn from one seeded generator (float64):

* ``isotropic`` -- H_i = mu + xi_i, mu ~ N(0, I), xi_i ~ N(0, I): homogeneous clients.
* ``anisotropic`` -- as isotropic with xi_i ~ N(0, diag(lambda)), lambda_j spaced geometrically
  from 1 to 1e-3 over the coordinates: one direction of spread dominates.
* ``clustered`` -- non-IID: three centres c_k ~ N(0, 4 I); client i belongs to cluster i mod 3 and
  H_i = c_k + 0.1 xi_i (a little spread within, much between).
* ``lower_bound`` -- the construction behind kappa >= f / (n - 2f) (Allouah et al., AISTATS 2023,
  Proposition 1): the honest rows are f copies of a point x ~ N(0, I) and n - 2f zeros, the
  Byzantine clients' own rows zeros. A rule that cannot tell which f rows are Byzantine must answer
  the same whether x's or zeros' holders lie; with B = f zeros, kappa_hat(F) >= f / (n - 2f) for
  every rule with finite kappa (the zeros alone would force F = 0).

:func:`task_rounds` records the rows of a scenario's clean run instead (attack ``none``, defense
``fedavg``): the participants' updates and the server's reference update at chosen rounds, the
first n - f clients honest and the last f the Byzantine clients' own rows (FLTrust is measured
there, with the server's real reference).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError

FAMILIES = ("isotropic", "anisotropic", "clustered", "lower_bound")
CLUSTERS = 3


@dataclass(frozen=True)
class Rows:
    """One input set: ``honest`` (n - f, P), ``own`` (f, P), the server's ``reference`` (P,) or None,
    and where they come from (``family``, a family name or ``"task:<scenario> round <t>"``)."""

    honest: Tensor
    own: Tensor
    family: str
    reference: Tensor | None = None


def family_rows(family: str, n: int, f: int, p: int, generator: torch.Generator) -> Rows:
    """The family's rows for n clients, f Byzantine, P coordinates."""
    if family not in FAMILIES:
        raise ConfigError(f"family {family!r}: expected one of {', '.join(FAMILIES)}")
    if not 0 <= f < n:
        raise ConfigError(f"f = {f}: expected 0 <= f < n = {n}")
    g, h = generator, n - f
    if family == "lower_bound":
        if n - 2 * f < 1:
            raise ConfigError(f"family lower_bound needs n - 2f >= 1, got n = {n}, f = {f}")
        x = torch.randn(p, generator=g, dtype=torch.float64)
        honest = torch.cat([x.expand(f, -1), torch.zeros(h - f, p, dtype=torch.float64)])
        return Rows(honest, torch.zeros(f, p, dtype=torch.float64), family)
    if family == "clustered":
        centres = 2.0 * torch.randn(CLUSTERS, p, generator=g, dtype=torch.float64)
        rows = centres[torch.arange(n) % CLUSTERS] + 0.1 * torch.randn(n, p, generator=g, dtype=torch.float64)
        return Rows(rows[:h], rows[h:], family)
    mu = torch.randn(p, generator=g, dtype=torch.float64)
    xi = torch.randn(n, p, generator=g, dtype=torch.float64)
    if family == "anisotropic":
        xi = xi * torch.logspace(0, -1.5, p, dtype=torch.float64)  # std 1 .. 10^-1.5: variance 1 .. 1e-3
    rows = mu + xi
    return Rows(rows[:h], rows[h:], family)


def task_rounds(scenario: object, seed: int, rounds: Sequence[int], f: int) -> list[Rows]:
    """The clean run's rows at ``rounds`` (1-based) of ``scenario``: the first n - f participants
    honest, the last f the Byzantine clients' own rows, with the server's reference update."""
    from ..scenario import Scenario
    from ..simulation.round import Round
    from ..simulation.runner import Simulation

    if not isinstance(scenario, Scenario):
        raise ConfigError("task rounds need a scenario")
    k = scenario.section("federation")["clients"]
    if not 0 <= f < k:
        raise ConfigError(f"f = {f}: expected 0 <= f < {k} (the scenario's clients)")
    wanted = set(rounds)
    kept: list[Rows] = []
    name = scenario.name

    def observe(r: Round) -> None:
        if r.t + 1 in wanted and r.rows is not None:
            rows = r.rows.detach().double().clone()
            ref = r.reference.detach().double().clone() if r.reference is not None else None
            kept.append(Rows(rows[: k - f], rows[k - f :], f"task:{name} round {r.t + 1}", ref))

    Simulation(scenario, "none", "fedavg", seed).run(observe=observe)
    return kept
