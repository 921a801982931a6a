"""Shared builders for the attack tests: a seeded synthetic round in float64."""

from __future__ import annotations

import numpy as np
import torch

from robustfl.types import AttackContext


def rows(n: int, p: int, seed: int, *, loc: float = 1.0, scale: float = 0.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    direction = loc + 0.3 * torch.randn(p, generator=g, dtype=torch.float64)
    return direction + scale * torch.randn(n, p, generator=g, dtype=torch.float64)


def ctx(f: int = 3, n: int = 7, p: int = 20, seed: int = 0, *, honest: bool | torch.Tensor = True,
        **kw: object) -> AttackContext:
    """f own rows and n honest rows around a common direction (or the given honest rows); K = f + n."""
    u = rows(f + n, p, seed)
    base: dict[str, object] = {"own": u[:f], "num_clients": f + n, "round": 0,
                               "generator": torch.Generator().manual_seed(seed)}
    if isinstance(honest, torch.Tensor):
        base["honest"] = honest
    elif honest:
        base["honest"] = u[f:]
    base.update(kw)
    return AttackContext(**base)  # type: ignore[arg-type]


def np_(t: torch.Tensor | None) -> np.ndarray:
    assert t is not None
    return t.detach().cpu().numpy().astype(np.float64)
