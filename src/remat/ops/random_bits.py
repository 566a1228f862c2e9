"""The random primitives. Numbers are a pure function of a key (an int32[2] tensor holding a
Threefry-2x32 key), computed inside the graph, so a key may be traced like any other tensor and
a recomputation (a checkpoint's) draws exactly what the forward pass drew. `rm.random` is the
user API; the hash is in remat/backends/threefry.py, shared by both backends.

The ops take keys with leading batch axes (`int32[*b, 2]`): that is what a vectorized key lays
out to, and each key of the batch draws its own numbers.
"""

from __future__ import annotations

import math

import numpy as np

from remat import dtypes
from remat.core import NOT_DIFFERENTIABLE, Aval, declare
from remat.errors import DTypeError, ShapeError
from remat.ops.elementwise import broadcast_shapes
from remat.tensor import Tensor
from remat.trace import bind
from remat.vaxes import lay_out, single, wrap

_COUNTER_BITS = 32  # one counter word numbers the draws


def _check_key(key: Aval) -> None:
    if key.dtype != dtypes.int32:
        raise DTypeError(f"a key is int32, got {key.dtype}")
    if key.ndim < 1 or key.shape[-1] != 2:
        raise ShapeError(f"a key has shape (2,) (or (..., 2) for a batch of keys), got {key.shape}")


def _draw_rule(limit_bits: int):
    """The shape rule of an op drawing numbers from fewer than 2**limit_bits counters."""

    def rule(key: Aval, *, shape: tuple[int, ...], dtype: np.dtype) -> Aval:
        _check_key(key)
        if dtype not in (dtypes.float32, dtypes.float64):
            raise DTypeError(f"dtype must be a float dtype, got {dtype}")
        if any(n < 0 for n in shape) or math.prod(shape) >= 2**limit_bits:
            raise ShapeError(f"shape {shape} must have non-negative sizes and fewer than 2**{limit_bits} elements")
        return Aval(key.shape[:-1] + tuple(shape), dtype)

    return rule


def _fold_in_rule(key: Aval, data: Aval) -> Aval:
    _check_key(key)
    if data.dtype != dtypes.int32:
        raise DTypeError(f"data must be int32, got {data.dtype}")
    return Aval(broadcast_shapes(key.shape[:-1], data.shape) + (2,), dtypes.int32)


def _fold_in_batch(op, tensors, params, names):
    """The key's vectorized axes lead its batch axes, laid out against the data's so that one
    key meets each data entry of its own row."""
    key, data = tensors
    raw_key = lay_out(key, names, data.ndim + 1, False)  # (*names, 1 per data axis, 2)
    return wrap(bind(op, raw_key, lay_out(data, names, data.ndim, False)), names)


# A batch of keys draws a batch of arrays: a vectorized key is one.
_draw_batch = single(lambda p, names: p)

# Floats in [0, 1) of shape `key.shape[:-1] + shape`: exact multiples of 2**-24 (float32) or
# 2**-53 (float64). Numbers, not functions of anything differentiable: no gradient.
_uniform = declare("random_uniform", _draw_rule(_COUNTER_BITS), NOT_DIFFERENTIABLE, batch=_draw_batch)

# Standard normals of shape `key.shape[:-1] + shape`: Box–Muller on the uniforms' integers of
# shape (2,) + shape, in exact integer arithmetic, so that both backends give the same bits.
_normal = declare("random_normal", _draw_rule(_COUNTER_BITS - 1), NOT_DIFFERENTIABLE,  # two words a number
                  batch=_draw_batch, traits={"transcendental"})

# New keys `[broadcast(key.shape[:-1], data.shape), 2]`, one per data entry.
_fold_in = declare("random_fold_in", _fold_in_rule, NOT_DIFFERENTIABLE, batch=_fold_in_batch)


def random_uniform(key: Tensor, shape: tuple[int, ...], dtype) -> Tensor:
    """Uniform floats in [0, 1) of `shape` from an int32 key (see rm.random.uniform)."""
    return bind(_uniform, key, shape=tuple(int(n) for n in shape), dtype=np.dtype(dtype))


def random_normal(key: Tensor, shape: tuple[int, ...], dtype) -> Tensor:
    """Standard normal floats of `shape` from an int32 key (see rm.random.normal)."""
    return bind(_normal, key, shape=tuple(int(n) for n in shape), dtype=np.dtype(dtype))


def random_fold_in(key: Tensor, data: Tensor) -> Tensor:
    """A new key per int32 entry of `data` (see rm.random.fold_in)."""
    return bind(_fold_in, key, data)
