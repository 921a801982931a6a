"""The worst-case search behind ``worst_case`` and ``robustfl kappa`` (private to robustfl.attacks).

Objective: for Byzantine rows B (f, P) next to the honest rows H (h, P),

    kappa_hat(B) = || F(H, B) - mean(H) ||^2 / s^2,   s^2 = (1/h) sum_i || H_i - mean(H) ||^2,

the kappa the rule F exhibits on the honest set (Allouah et al., AISTATS 2023, Definition 1; the
square of robustfl's ``aggregation_error``). Maximised in five stages, each from the best so far,
every rule call counted against ``budget``:

1. every attack of the catalogue with its defaults (``AttackContext`` with the honest rows, the
   oracle and the reference where there is one); attacks that cannot run here are skipped;
2. copies of single honest rows (the one farthest from the mean, the nearest, and seeded picks):
   the lower-bound construction's attack (f copies of an honest point);
3. directions: B = f copies of mean(H) + a s u for u among +-mean(H), +-the coordinate-wise std,
   +-the top principal directions of H and seeded random directions, a on a log grid from 0.1 to
   1e4, then a log-space refinement around the best a of the best directions;
4. gradient ascent on B through the rule (Adam, step 0.1 s) where the rule is differentiable;
5. whatever budget is left: a (1+1) evolution strategy around the best rows (each Byzantine row
   perturbed on its own, seeded Gaussian steps, the step grown by 1.5 on success and shrunk by
   0.9 on failure; the 1/5th-success rule), for the rules without a useful gradient.

Deterministic for a given generator state. Returns the best value, its rows, what found it, the
evaluations used and the value every fixed attack reached.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..errors import RobustFLError
from ..types import Aggregate, AttackContext

Rule = Callable[[Tensor], Tensor]  # Byzantine rows (f, P) -> the rule's output vector (P,)

GRID = tuple(10.0 ** (k / 2) for k in range(-2, 9))  # 0.1 .. 1e4, half-decades
REFINE = 6  # log-space refinement steps around the best grid point
TOP_DIRECTIONS = 3  # directions refined, and starts of the gradient ascent
PCS = 3
RANDOM_DIRECTIONS = 4
COPIES = 4  # single honest rows tried as the Byzantine rows' copy
SKIP = frozenset({"worst_case"})


class _Budget(Exception):
    """The evaluation budget is spent."""


@dataclass
class Found:
    """The largest kappa_hat found: its value, Byzantine rows, what found it and with which
    parameters, the evaluations spent and each fixed attack's own value (label -> kappa_hat)."""

    kappa: float
    rows: Tensor
    attack: str
    params: dict[str, Any] = field(default_factory=dict)
    evaluations: int = 0
    fixed: dict[str, float] = field(default_factory=dict)


class _Search:
    def __init__(self, rule: Rule, honest: Tensor, f: int, budget: int) -> None:
        self.rule, self.h, self.f, self.budget = rule, honest, f, budget
        self.mean = honest.mean(0)
        self.s2 = float(((honest - self.mean) ** 2).sum(1).mean())
        self.used = 0
        self.best: Found | None = None

    def value(self, out: Tensor) -> float:
        dev = float(((out.detach().to(self.mean) - self.mean) ** 2).sum())
        if not math.isfinite(dev):
            return math.inf
        return dev / self.s2 if self.s2 > 0 else (math.inf if dev > 0 else 0.0)

    def spend(self) -> None:
        if self.used >= self.budget:
            raise _Budget
        self.used += 1

    def consider(self, rows: Tensor, out: Tensor, attack: str, params: dict[str, Any]) -> float:
        v = self.value(out)
        if self.best is None or v > self.best.kappa:
            self.best = Found(v, rows.detach().clone(), attack, dict(params))
        return v

    def score(self, rows: Tensor, attack: str, params: dict[str, Any]) -> float:
        self.spend()
        return self.consider(rows, self.rule(rows), attack, params)


def _unit(v: Tensor) -> Tensor:
    n = float(torch.linalg.vector_norm(v))
    return v / n if n > 0 and math.isfinite(n) else torch.zeros_like(v)


def _directions(h: Tensor, g: torch.Generator) -> list[tuple[str, Tensor]]:
    mean = h.mean(0)
    std = h.std(0, unbiased=False)
    out = [("mean", _unit(mean)), ("std", _unit(std)), ("sign-std", _unit(-torch.sign(mean) * std))]
    centred = h - mean
    if h.shape[0] > 1 and float(centred.abs().max()) > 0:
        _, _, vt = torch.linalg.svd(centred, full_matrices=False)
        out += [(f"pc{i + 1}", vt[i]) for i in range(min(PCS, vt.shape[0]))]
    for i in range(RANDOM_DIRECTIONS):
        out.append((f"random{i + 1}", _unit(torch.randn(h.shape[1], generator=g, dtype=torch.float64).to(h))))
    signed: list[tuple[str, Tensor]] = []
    for name, u in out:
        if float(u.abs().sum()) > 0:
            signed += [(f"+{name}", u), (f"-{name}", -u)]
    return signed


def _fixed(
    st: _Search,
    own: Tensor,
    oracle: Callable[[Tensor], Aggregate],
    ctx_extra: dict[str, Any],
    attacks: Sequence[str],
    seed_of: Callable[[str], torch.Generator],
) -> dict[str, float]:
    from . import registry  # the catalogue (lazy: this module belongs to it)

    values: dict[str, float] = {}
    for name in attacks:
        if name in SKIP:
            continue
        try:
            attack = registry.create(name)
            ctx = AttackContext(
                own=own.clone(), honest=st.h.clone(), oracle=oracle, generator=seed_of(name), **ctx_extra
            )
            rows = attack(ctx)
        except (RobustFLError, ValueError, NotImplementedError, RuntimeError, TypeError):
            continue  # needs what this search cannot give it (a reference, a task): skipped
        if not isinstance(rows, Tensor) or rows.shape != own.shape:
            continue
        values[name] = st.score(rows.to(own), name, {})
    return values


def search(
    rule: Rule,
    honest: Tensor,
    own: Tensor,
    *,
    budget: int,
    generator: torch.Generator,
    attacks: Sequence[str] = (),
    num_clients: int | None = None,
    reference: Tensor | None = None,
    global_model: Tensor | None = None,
    differentiable: bool = True,
) -> Found:
    """Maximise kappa_hat over the Byzantine rows (see the module's docstring). ``own`` (f, P):
    what the Byzantine clients would send honestly (the fixed attacks' ``own``)."""
    f = own.shape[0]
    st = _Search(rule, honest, f, budget)
    state = generator.get_state()

    def seed_of(label: str) -> torch.Generator:
        g = torch.Generator()
        g.set_state(state)
        return g

    def oracle(rows: Tensor) -> Aggregate:
        st.spend()
        return Aggregate(rule(rows.to(own)))

    extra = {
        "num_clients": num_clients or honest.shape[0] + f,
        "round": 0,
        "reference": reference,
        "global_model": global_model,
    }
    fixed: dict[str, float] = {}
    try:
        fixed = _fixed(st, own, oracle, extra, attacks, seed_of)
        _copies(st, generator)
        _lines(st, generator)
        if differentiable:
            _ascent(st)
        _local(st, generator)
    except _Budget:
        pass
    if st.best is None:  # not one evaluation: the honest rows themselves
        st.best = Found(st.value(rule(own)), own.clone(), "own", {})
    st.best.evaluations, st.best.fixed = st.used, fixed
    return st.best


def _copies(st: _Search, g: torch.Generator) -> None:
    dist = ((st.h - st.mean) ** 2).sum(1)
    picks = [int(dist.argmax()), int(dist.argmin())]
    picks += torch.randperm(st.h.shape[0], generator=g)[:COPIES].tolist()
    for j in dict.fromkeys(picks):
        st.score(st.h[j].expand(st.f, -1).clone(), "copy", {"honest_row": j})


def _line(st: _Search, name: str, u: Tensor, scale: float) -> tuple[float, float]:
    best_a, best_v = GRID[0], -1.0
    for a in GRID:
        rows = (st.mean + a * scale * u).expand(st.f, -1).clone()
        v = st.score(rows, "direction", {"direction": name, "a": a})
        if v > best_v:
            best_a, best_v = a, v
    return best_a, best_v


def _lines(st: _Search, g: torch.Generator) -> None:
    scale = math.sqrt(st.s2) if st.s2 > 0 else max(float(torch.linalg.vector_norm(st.mean)), 1.0)
    results = []
    for name, u in _directions(st.h, g):
        a, v = _line(st, name, u, scale)
        results.append((v, name, u, a))
    results.sort(key=lambda r: -r[0])
    for best_v, name, u, a in results[:TOP_DIRECTIONS]:  # refine around the best step, in log space
        step = math.sqrt(10.0)
        for _ in range(REFINE):
            step = math.sqrt(step)
            for cand in (a / step, a * step):
                rows = (st.mean + cand * scale * u).expand(st.f, -1).clone()
                v = st.score(rows, "direction", {"direction": name, "a": cand})
                if v > best_v:
                    best_v, a = v, cand
                    break


def _ascent(st: _Search) -> None:
    """Adam on B through the rule, from the best rows so far; stops where the rule has no gradient."""
    with warnings.catch_warnings():  # rules that read a scalar off the graph (stats) warn: harmless
        warnings.simplefilter("ignore", UserWarning)
        _adam(st)


def _adam(st: _Search) -> None:
    assert st.best is not None
    scale = math.sqrt(st.s2) if st.s2 > 0 else 1.0
    b = st.best.rows.clone().requires_grad_(True)
    opt = torch.optim.Adam([b], lr=0.1 * scale)
    start = st.best.attack
    while True:
        st.spend()
        with torch.enable_grad():
            opt.zero_grad()
            try:
                out = st.rule(b)
            except RuntimeError:
                return
            st.consider(b, out, "gradient", {"from": start})
            if not out.requires_grad:
                return  # not differentiable here: nothing to ascend
            (-((out - st.mean) ** 2).sum()).backward()
        if b.grad is None or not bool(torch.isfinite(b.grad).all()) or float(b.grad.abs().max()) == 0:
            return
        opt.step()


def _local(st: _Search, g: torch.Generator) -> None:
    """(1+1)-ES on the best rows until the budget is spent (or the step vanishes)."""
    assert st.best is not None
    sigma = 0.5 * (math.sqrt(st.s2) if st.s2 > 0 else 1.0)
    floor = 1e-9 * sigma
    while sigma > floor:
        best = st.best
        noise = torch.randn(best.rows.shape, generator=g, dtype=torch.float64).to(best.rows)
        before = best.kappa
        st.score(
            best.rows + sigma * noise,
            "local",
            {"from": best.attack if best.attack != "local" else best.params.get("from", "local")},
        )
        sigma = sigma * 1.5 if st.best.kappa > before else sigma * 0.9
