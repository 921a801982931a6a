"""The constants of FLTrust's Theorem 1 (Cao, Fang, Liu, Gong, NDSS 2021) for a ridge scenario.

The theorem (one local step, beta = 1, server step alpha) claims, with probability >= 1 - delta,
``||w^t - w*|| <= (1 - rho)^t ||w^0 - w*|| + 12 alpha Delta1 / rho`` with

* ``rho_literal = 1 - (sqrt(1 - mu^2/(4L^2)) + 24 alpha Delta2 + 2 alpha L)`` -- the printed formula;
* ``Delta1 = sigma1 sqrt(2/|D0|) sqrt(d log 6 + log(3/delta))``.

The proof establishes Lemma 2's factor ``sqrt(1 - mu^2/(4L^2))`` only at alpha = mu/(2L^2); at any
other alpha its own route (strong convexity + smoothness) gives ``sqrt(1 - alpha mu + alpha^2 L^2)``
(equal to Lemma 2's at mu/(2L^2), larger elsewhere). :func:`rho` is therefore the proof-supported
value ``1 - (sqrt(1 - alpha mu + alpha^2 L^2) + 2 alpha L)`` with Delta2 = 0: an upper bound on
the true rho (Delta2 >= 0 only lowers it). It is negative for every alpha > 0 and 0 < mu <= L:

* 2 alpha L >= 1: the bracket exceeds 1 outright;
* 2 alpha L < 1: ``(1 - 2 alpha L)^2 < 1 - alpha mu + alpha^2 L^2`` reduces to
  ``alpha < (4L - mu)/(3L^2)``, implied by alpha < 1/(2L) <= (4L - mu)/(3L^2).

So the theorem, as proved, promises nothing; :func:`rho_literal` can be positive at a small alpha
(the term 2 alpha L is then small), but the proof does not cover that alpha.

sigma1 (Assumption 2: the sub-exponential parameter of ``<grad f(X, w*) - grad F(w*), v>`` over
unit v) is estimated on ridge with Gaussian design in closed form: with ``c = w* - w_true`` and
``s`` the noise level, the per-sample gradient at w* is ``x (x^T c - eps) + l2 w*`` and by
Isserlis' theorem its covariance is ``(c^T Sigma c + s^2) Sigma + Sigma c c^T Sigma``; sigma1 is
the square root of its largest eigenvalue (the worst unit direction's standard deviation). That
is the smallest sigma1 the assumption can hold with (a sub-exponential parameter is at least the
standard deviation), so Delta1 here is, if anything, optimistic. :func:`sigma1_monte_carlo`
estimates the same quantity from fresh samples (the tests compare the two).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from .. import params
from ..errors import ParameterError

DELTA = 0.05  # the theorem's failure probability delta used for Delta1


def _positive(name: str, value: float) -> float:
    return params.number("bound", name, value, low=0, strict_low=True)


def _check_mu_l(mu: float, lip: float) -> tuple[float, float]:
    mu, lip = _positive("mu", mu), _positive("L", lip)
    if mu > lip:
        raise ParameterError(f"bound: parameter mu must be <= L = {lip}, got {mu}")
    return mu, lip


def lemma_alpha(mu: float, lip: float) -> float:
    """Lemma 2's server step alpha = mu / (2 L^2)."""
    mu, lip = _check_mu_l(mu, lip)
    return mu / (2 * lip * lip)


def lemma2_factor(mu: float, lip: float) -> float:
    """Lemma 2's contraction factor sqrt(1 - mu^2 / (4 L^2)), valid at alpha = mu/(2L^2)."""
    mu, lip = _check_mu_l(mu, lip)
    return math.sqrt(1.0 - mu * mu / (4 * lip * lip))


def proof_factor(mu: float, lip: float, alpha: float) -> float:
    """The proof's own contraction factor at any alpha: sqrt(1 - alpha mu + alpha^2 L^2)."""
    mu, lip = _check_mu_l(mu, lip)
    alpha = _positive("alpha", alpha)
    return math.sqrt(1.0 - alpha * mu + alpha * alpha * lip * lip)


def gradient_descent_factor(eigenvalues: Tensor, alpha: float) -> float:
    """The exact per-round factor of gradient descent on the quadratic F: max_i |1 - alpha lambda_i|."""
    return float((1.0 - alpha * eigenvalues.to(torch.float64)).abs().max())


def rho(mu: float, lip: float, alpha: float, delta2: float = 0.0) -> float:
    """Proof-supported rho: 1 - (sqrt(1 - alpha mu + alpha^2 L^2) + 24 alpha Delta2 + 2 alpha L)."""
    delta2 = params.number("bound", "delta2", delta2, low=0)  # a negative one read as a guarantee
    return 1.0 - (proof_factor(mu, lip, alpha) + 24 * alpha * delta2 + 2 * alpha * lip)


def rho_literal(mu: float, lip: float, alpha: float, delta2: float = 0.0) -> float:
    """The printed formula at ``alpha``: 1 - (sqrt(1 - mu^2/(4L^2)) + 24 alpha Delta2 + 2 alpha L)."""
    alpha = _positive("alpha", alpha)
    delta2 = params.number("bound", "delta2", delta2, low=0)
    return 1.0 - (lemma2_factor(mu, lip) + 24 * alpha * delta2 + 2 * alpha * lip)


def delta1(sigma1: float, root_size: int, dim: int, delta: float = DELTA) -> float:
    """Delta1 = sigma1 sqrt(2/|D0|) sqrt(d log 6 + log(3/delta))."""
    if not 0 < delta < 1:
        raise ParameterError(f"bound: parameter delta must be in (0, 1), got {delta!r}")
    sigma1 = params.number("bound", "sigma1", sigma1, low=0)  # a negative one gave a negative Delta1
    root_size = params.number("bound", "root_size", root_size, low=1, integer=True)
    dim = params.number("bound", "dim", dim, low=1, integer=True)
    return sigma1 * math.sqrt(2.0 / root_size) * math.sqrt(dim * math.log(6) + math.log(3 / delta))


def gradient_covariance(sigma: Tensor, w_true: Tensor, w_star: Tensor, noise: float) -> Tensor:
    """Covariance of the per-sample ridge gradient at w* (x ~ N(0, Sigma), y = <w_true, x> + N(0, s^2))."""
    c = w_star - w_true
    sc = sigma @ c
    return (c @ sc + noise * noise) * sigma + torch.outer(sc, sc)


def sigma1_ridge(sigma: Tensor, w_true: Tensor, w_star: Tensor, noise: float) -> float:
    """sigma1 = sqrt(largest eigenvalue of the per-sample gradient covariance at w*)."""
    noise = params.number("bound", "noise", noise, low=0)
    cov = gradient_covariance(sigma, w_true, w_star, noise)
    return math.sqrt(float(torch.linalg.eigvalsh(0.5 * (cov + cov.T))[-1]))


def sigma1_monte_carlo(
    sample: Callable[[int, torch.Generator], tuple[Tensor, Tensor]],
    w_star: Tensor,
    l2: float,
    n: int,
    generator: torch.Generator,
) -> float:
    """The same sigma1 from ``n`` fresh samples: sqrt of the top eigenvalue of the gradients' covariance."""
    x, y = sample(n, generator)
    grads = x * (x @ w_star - y)[:, None] + l2 * w_star
    cov = torch.cov(grads.T, correction=1)
    return math.sqrt(float(torch.linalg.eigvalsh(cov)[-1]))


@dataclass(frozen=True)
class Constants:
    """Theorem 1's constants for one scenario and seed (``rho`` <= 0: no guarantee)."""

    mu: float
    L: float
    cond: float  # L / mu
    alpha: float  # the server step used
    alpha_lemma: float  # mu / (2 L^2)
    lemma2_factor: float
    proof_factor: float  # sqrt(1 - alpha mu + alpha^2 L^2)
    gradient_descent_factor: float  # max_i |1 - alpha lambda_i| on the population F
    rho: float
    rho_literal: float
    sigma1: float
    delta: float
    delta1: float
    root_size: int
    dim: int
    theorem_floor: float | None  # 12 alpha Delta1 / rho when rho > 0, else None (no bound)
    theorem_floor_literal: float | None  # the same with rho_literal

    @property
    def theorem_vacuous(self) -> bool:
        return self.rho <= 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def theorem_constants(
    hessian: Tensor,
    sigma: Tensor,
    w_true: Tensor,
    w_star: Tensor,
    noise: float,
    root_size: int,
    alpha: float | None = None,
    delta: float = DELTA,
) -> Constants:
    """All constants for a ridge problem with population Hessian ``hessian`` = Sigma + l2 I."""
    evals = torch.linalg.eigvalsh(0.5 * (hessian + hessian.T).to(torch.float64))
    mu, lip = float(evals[0]), float(evals[-1])
    a_lemma = lemma_alpha(mu, lip)
    a = a_lemma if alpha is None else _positive("alpha", alpha)
    r, r_lit = rho(mu, lip, a), rho_literal(mu, lip, a)
    s1 = sigma1_ridge(sigma, w_true, w_star, noise)
    d1 = delta1(s1, root_size, int(hessian.shape[0]), delta)
    return Constants(
        mu=mu,
        L=lip,
        cond=lip / mu,
        alpha=a,
        alpha_lemma=a_lemma,
        lemma2_factor=lemma2_factor(mu, lip),
        proof_factor=proof_factor(mu, lip, a),
        gradient_descent_factor=gradient_descent_factor(evals, a),
        rho=r,
        rho_literal=r_lit,
        sigma1=s1,
        delta=delta,
        delta1=d1,
        root_size=root_size,
        dim=int(hessian.shape[0]),
        theorem_floor=12 * a * d1 / r if r > 0 else None,
        theorem_floor_literal=12 * a * d1 / r_lit if r_lit > 0 else None,
    )
