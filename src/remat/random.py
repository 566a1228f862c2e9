"""Stateless random numbers: a key is a small concrete int32[2] tensor, and the same key always
gives the same numbers — eagerly, inside a trace, and when a checkpoint recomputes its body.

Numbers are drawn on the host with NumPy's Philox generator seeded from the key and enter a
traced program as constants. So keys must be *concrete*: create them outside the traced function
and close over them (`rm.grad(lambda p: loss(p, key))(params)`) rather than passing them as
arguments to `grad` or `jit`, which would turn them into traced values.

>>> import numpy as np, remat as rm
>>> a, b = rm.random.split(rm.random.key(0))
>>> np.array_equal(rm.random.normal(a, (3,)), rm.random.normal(a, (3,)))
True
"""

from __future__ import annotations

import numpy as np

from remat import dtypes
from remat.errors import DTypeError, ShapeError, TracerError, at_source, user_source
from remat.ops.elementwise import add, less, multiply, subtract
from remat.trace import Tensor, asarray

_KEY_SHAPE = (2,)
_SPLIT, _DRAW = 0, 1  # stream tags: a key's children never coincide with its own numbers


def key(seed: int) -> Tensor:
    """A key from an integer seed (up to 64 bits): int32[2], the seed's high and low words.

    >>> import remat as rm
    >>> rm.random.key(1)
    Tensor([0, 1], dtype=int32)
    """
    if isinstance(seed, Tensor):
        seed = _concrete(seed, "key").item()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"random.key: the seed must be an int, got {type(seed).__name__}")
    seed = int(seed) % 2**64
    words = np.array([seed >> 32, seed & 0xFFFFFFFF], np.uint32)
    return asarray(words.view(np.int32))


def split(key: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    """`n` new independent keys. They come as a tuple rather than one stacked tensor so that
    picking one (`keys[i]`, unpacking, iterating) stays concrete inside traced code.

    >>> import remat as rm
    >>> keys = rm.random.split(rm.random.key(0), 3)
    >>> len(keys), keys[0].shape
    (3, (2,))
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"random.split: n must be a non-negative int, got {n!r}")
    words = _generator(key, _SPLIT, "split").integers(0, 2**32, size=(int(n), 2), dtype=np.uint32)
    return tuple(asarray(w) for w in words.view(np.int32))


def uniform(key: Tensor, shape=(), dtype=dtypes.float32, minval=0.0, maxval=1.0) -> Tensor:
    """Uniform numbers in [minval, maxval) of `shape` and float `dtype`.

    >>> import numpy as np, remat as rm
    >>> u = np.asarray(rm.random.uniform(rm.random.key(0), (1000,), minval=-2.0, maxval=2.0))
    >>> bool(u.min() >= -2.0 and u.max() < 2.0)
    True
    """
    dtype = _float_dtype(dtype, "uniform")
    u = asarray(_generator(key, _DRAW, "uniform").random(_shape(shape), dtype=dtype))
    if _is_number(minval, 0) and _is_number(maxval, 1):
        return u
    lo, hi = asarray(minval, dtype), asarray(maxval, dtype)
    return add(multiply(u, subtract(hi, lo)), lo)


def normal(key: Tensor, shape=(), dtype=dtypes.float32) -> Tensor:
    """Standard normal numbers of `shape` and float `dtype`.

    >>> import remat as rm
    >>> rm.random.normal(rm.random.key(0), (2, 3), "float64").dtype
    dtype('float64')
    """
    dtype = _float_dtype(dtype, "normal")
    return asarray(_generator(key, _DRAW, "normal").standard_normal(_shape(shape), dtype=dtype))


def bernoulli(key: Tensor, p=0.5, shape=None) -> Tensor:
    """Booleans that are True with probability `p` (which may be a tensor, even a traced one);
    `shape` defaults to the shape of `p`.

    >>> import remat as rm
    >>> rm.random.bernoulli(rm.random.key(0), 0.5, (4,)).dtype
    dtype('bool')
    """
    p = asarray(p)
    if not dtypes.is_float(p.dtype):
        p = p.astype(dtypes.float32)
    shape = p.shape if shape is None else _shape(shape)
    return less(uniform(key, shape, p.dtype), p)


# ---------------------------------------------------------------- helpers


def _concrete(key, what: str) -> Tensor:
    key = asarray(key)
    if not key.is_concrete:
        raise TracerError(
            f"random.{what}: the key must be concrete, but it is traced inside `{key._trace.name}`"
            f"{at_source(user_source())}; create the key outside and close over it "
            "(rm.grad(lambda p: loss(p, key))) instead of passing it as an argument to grad or jit"
        )
    return key


def _generator(key, stream: int, what: str) -> np.random.Generator:
    key = _concrete(key, what)
    if key.shape != _KEY_SHAPE or not dtypes.is_int(key.dtype):
        raise ShapeError(
            f"random.{what}: a key is an int32 tensor of shape (2,), got {key.shape} {key.dtype}; "
            "make one with rm.random.key(seed) or rm.random.split"
        )
    hi, lo = (int(w) for w in np.asarray(key).astype(np.int64) % 2**32)
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([hi, lo, stream])))


def _float_dtype(dtype, what: str) -> np.dtype:
    dtype = dtypes.canonical(dtype)
    if not dtypes.is_float(dtype):
        raise DTypeError(f"random.{what}: dtype must be a float dtype, got {dtype}")
    return dtype


def _is_number(x, value) -> bool:
    return isinstance(x, (int, float)) and x == value


def _shape(shape) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
