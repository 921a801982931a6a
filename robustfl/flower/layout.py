"""A Flower model as robustfl's rows: the global model's arrays, flattened in its key order.

``ModelLayout.of(arrays)`` reads the global model's ``ArrayRecord``: its keys in order, each
array's shape and dtype. Floating arrays are the model's coordinates: :meth:`flatten` concatenates
them, in that key order, into one float64 vector (P,) -- a reply's update row is
``flatten(reply) - flatten(global)``, exactly as robustfl's engine forms ``w_k - w`` -- and each
is one of the model's layers (:attr:`layers`, the rows' ``DefenseContext.layers``). Integer and
boolean arrays (BatchNorm's ``num_batches_tracked``, masks) are not coordinates: no defense sees
them; they follow :data:`INTEGER_RULES` (the coordinate-wise lower median of the accepted replies
by default, so that a minority cannot move a counter, or the global model's value kept as is).

:meth:`check` says why a reply cannot be one of the rows (missing or extra keys, a shape or dtype
that differs, non-finite values) and :meth:`unflatten` casts a float64 vector back, array by array,
to the global model's dtypes.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..types import layer_ends

INTEGER_RULES = ("median", "keep")


@dataclass(frozen=True)
class ModelLayout:
    """The global model's arrays: ``keys`` in order, their ``shapes`` and ``dtypes`` (numpy names);
    ``floating`` says which are coordinates (P = the sum of their sizes)."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, arrays: Mapping[str, Any]) -> ModelLayout:
        """The layout of an ``ArrayRecord`` (or any mapping of ``flwr.app.Array``)."""
        if not isinstance(arrays, Mapping) or not all(
            hasattr(v, "shape") and hasattr(v, "dtype") for v in arrays.values()
        ):
            got = reprlib.repr(arrays)
            raise InputError(f"ModelLayout.of: arrays must be an ArrayRecord (arrays by key), got {got}")
        keys = tuple(arrays.keys())
        if not keys:
            raise InputError("the global model has no arrays; expected at least one")
        return cls(
            keys,
            tuple(tuple(int(d) for d in arrays[k].shape) for k in keys),
            tuple(str(np.dtype(arrays[k].dtype)) for k in keys),
        )

    @property
    def floating(self) -> tuple[bool, ...]:
        return tuple(np.issubdtype(np.dtype(d), np.floating) for d in self.dtypes)

    @property
    def dim(self) -> int:
        return sum(int(np.prod(s)) for s, fl in zip(self.shapes, self.floating, strict=True) if fl)

    @property
    def layers(self) -> tuple[int, ...]:
        """Where each floating array ends in the rows (``DefenseContext.layers``): one layer per
        array, in key order (empty arrays left out)."""
        sizes = (int(np.prod(s)) for s, fl in zip(self.shapes, self.floating, strict=True) if fl)
        return layer_ends(sizes)

    @property
    def integer_keys(self) -> tuple[str, ...]:
        return tuple(k for k, fl in zip(self.keys, self.floating, strict=True) if not fl)

    # -- checking a reply ------------------------------------------------------------------------
    def check(self, arrays: Mapping[str, Any]) -> str | None:
        """Why ``arrays`` cannot stand for this model (None when it can): keys, shapes, dtypes."""
        missing = [k for k in self.keys if k not in arrays]
        if missing:
            return f"missing arrays {missing}"
        extra = [k for k in arrays if k not in self.keys]
        if extra:
            return f"unexpected arrays {extra}"
        for k, shape, dtype in zip(self.keys, self.shapes, self.dtypes, strict=True):
            got_shape = tuple(int(d) for d in arrays[k].shape)
            if got_shape != shape:
                return f"array {k!r} has shape {got_shape}, expected {shape}"
            got_dtype = str(np.dtype(arrays[k].dtype))
            if got_dtype != dtype:
                return f"array {k!r} has dtype {got_dtype}, expected {dtype}"
        return None

    def numpy(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Each array deserialised once (``Array.numpy()``), in key order."""
        return {k: np.asarray(arrays[k].numpy()) for k in self.keys}

    def nonfinite(self, values: Mapping[str, np.ndarray]) -> str | None:
        """Why the floating arrays are unusable (NaN or infinite entries), or None."""
        for k, fl in zip(self.keys, self.floating, strict=True):
            if fl:
                bad = int(np.size(values[k]) - np.count_nonzero(np.isfinite(values[k])))
                if bad:
                    return f"array {k!r} has {bad} non-finite values"
        return None

    # -- the rows --------------------------------------------------------------------------------
    def flatten(self, values: Mapping[str, np.ndarray]) -> Tensor:
        """The floating arrays in key order, as one float64 vector (P,)."""
        parts = [
            np.asarray(values[k], dtype=np.float64).reshape(-1)
            for k, fl in zip(self.keys, self.floating, strict=True)
            if fl
        ]
        return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0))

    def unflatten(
        self,
        vector: Tensor,
        integers: Mapping[str, np.ndarray],
    ) -> dict[str, np.ndarray]:
        """Arrays from a float64 vector (P,), each cast back to the global model's dtype; integer
        arrays taken from ``integers``."""
        v = vector.detach().to(torch.float64).cpu().numpy()
        if v.shape != (self.dim,):
            raise InputError(f"vector has shape {v.shape}, expected ({self.dim},)")
        out: dict[str, np.ndarray] = {}
        at = 0
        for k, shape, dtype, fl in zip(self.keys, self.shapes, self.dtypes, self.floating, strict=True):
            if fl:
                n = int(np.prod(shape))
                out[k] = v[at : at + n].reshape(shape).astype(np.dtype(dtype))
                at += n
            else:
                out[k] = np.asarray(integers[k]).astype(np.dtype(dtype)).reshape(shape)
        return out


def integer_arrays(
    layout: ModelLayout,
    current: Mapping[str, np.ndarray],
    replies: Sequence[Mapping[str, np.ndarray]],
    rule: str,
) -> dict[str, np.ndarray]:
    """The next value of each integer array: ``"median"``, the coordinate-wise lower median of the
    accepted replies (a minority cannot move it), or ``"keep"``, the global model's own value."""
    out: dict[str, np.ndarray] = {}
    for k in layout.integer_keys:
        if rule == "keep" or not replies:
            out[k] = np.asarray(current[k])
            continue
        stacked = torch.from_numpy(np.stack([np.asarray(r[k]).astype(np.int64) for r in replies]))
        out[k] = stacked.median(dim=0).values.numpy()  # torch's median is the lower one
    return out
