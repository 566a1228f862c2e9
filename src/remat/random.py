"""Stateless random numbers: a key is an int32[2] tensor, and the same key always gives the same
numbers — eagerly, inside `jit` on either backend, and when a checkpoint recomputes its body, so
a recomputed dropout mask equals the original.

Numbers are computed inside the graph by a counter-based hash (Threefry-2x32, the generator of
JAX and Random123), so keys are ordinary tensors: pass them to `jit` and `grad` as arguments,
split and index them inside traced code. Uniform numbers in [0, 1) (and so `bernoulli` and
`dropout`) and normal numbers are identical to the bit on both backends: `normal` computes its
logarithm and cosine in exact integer arithmetic (remat/backends/box_muller.py), as no float
formula can promise that (XLA fuses multiplications into additions, NumPy does not). Uniform
numbers scaled to other bounds are `minval + u * (maxval - minval)`, which XLA may compute with
one rounding where NumPy takes two: they can differ in the last bit unless the product is exact
(as it is when `maxval - minval` is a power of two).

>>> import numpy as np, remat as rm
>>> step = rm.jit(lambda k: rm.random.uniform(k, (3,)))
>>> a, b = rm.random.split(rm.random.key(0))
>>> np.array_equal(step(a), rm.random.uniform(a, (3,)))
True
"""

from __future__ import annotations

import numpy as np

from remat import dtypes
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError
from remat.ops.axes import shape_tuple
from remat.ops.creation import arange
from remat.ops.elementwise import add, astype, less, multiply, negative, subtract
from remat.ops.random_bits import random_fold_in, random_normal, random_uniform
from remat.ops.shape import stack
from remat.trace import Tensor, asarray

_KEY_SHAPE = (2,)


def key(seed) -> Tensor:
    """A key from an integer seed: int32[2], the high and low words of the seed modulo 2**64.
    The seed is a Python or NumPy int, or an integer tensor of shape () (an int32 one may be
    traced).

    >>> import remat as rm
    >>> rm.random.key(1)
    Tensor([0, 1], dtype=int32)
    """
    if isinstance(seed, Tensor) and not seed.is_concrete:
        return _traced_key(seed)
    if isinstance(seed, Tensor) and seed.shape == () and dtypes.is_int(seed.dtype):
        seed = seed.item()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ArgumentTypeError(f"random.key: the seed must be an int, got {_describe(seed)}")
    seed = int(seed) % 2**64
    words = np.array([seed >> 32, seed & 0xFFFFFFFF], np.uint32)
    return asarray(words.view(np.int32))


def split(key: Tensor, n: int = 2) -> Tensor:
    """`n` new keys as an int32 tensor of shape (n, 2); index it (or unpack it) to pick one,
    traced or not. Row i equals `fold_in(key, i)`.

    >>> import remat as rm
    >>> keys = rm.random.split(rm.random.key(0), 3)
    >>> keys.shape, keys[0].shape
    ((3, 2), (2,))
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(f"random.split: n must be a non-negative int, got {n!r} ({type(n).__name__})")
    if n < 0:
        raise ArgumentValueError(f"random.split: n must be a non-negative int, got {n!r}")
    return random_fold_in(_key(key, "split"), arange(int(n), dtype=dtypes.int32))


def fold_in(key: Tensor, data) -> Tensor:
    """A new key that mixes `data` into `key`: an int (taken modulo 2**32) or an integer tensor,
    which may be traced (a step counter, say). Data of shape S gives keys of shape S + (2,).

    >>> import numpy as np, remat as rm
    >>> k = rm.random.key(0)
    >>> np.array_equal(rm.random.fold_in(k, 1), rm.random.split(k, 2)[1])
    True
    """
    key = _key(key, "fold_in")
    if isinstance(data, (int, np.integer)) and not isinstance(data, bool):
        data = np.array(int(data) % 2**32, np.uint32).view(np.int32)
    data = asarray(data)
    if not dtypes.is_int(data.dtype):
        raise DTypeError(f"random.fold_in: data must be an int or an integer tensor, got {data.dtype}")
    return random_fold_in(key, data if data.dtype == dtypes.int32 else astype(data, dtypes.int32))


def uniform(key: Tensor, shape=(), dtype=dtypes.float32, minval=0.0, maxval=1.0) -> Tensor:
    """Uniform numbers in [minval, maxval) of `shape` and float `dtype`. In [0, 1) they are
    multiples of 2**-24 (float32) or 2**-53 (float64); the scaled ones, `minval + u * (maxval -
    minval)` computed in `dtype` (Python bounds converted to it exactly), may round to `maxval`.

    >>> import numpy as np, remat as rm
    >>> u = np.asarray(rm.random.uniform(rm.random.key(0), (1000,), minval=-2.0, maxval=2.0))
    >>> bool(u.min() >= -2.0 and u.max() < 2.0)
    True
    """
    dtype = _float_dtype(dtype, "uniform")
    u = random_uniform(_key(key, "uniform"), _shape(shape, "uniform"), dtype)
    if _is_number(minval, 0) and _is_number(maxval, 1):
        return u
    lo, hi = asarray(minval, dtype), asarray(maxval, dtype)
    return add(multiply(u, subtract(hi, lo)), lo)


def normal(key: Tensor, shape=(), dtype=dtypes.float32) -> Tensor:
    """Standard normal numbers of `shape` and float `dtype`: Box–Muller,
    `sqrt(-2 ln(1 - u1)) cos(2π u2)` on the two uniforms `uniform(key, (2,) + shape, dtype)`
    would draw, within 2 ulp of that formula and the same to the bit on both backends. The
    uniforms are multiples of 2**-24 (float32) or 2**-53 (float64), so |z| <= 5.8 (float32) or
    8.6 (float64).

    >>> import remat as rm
    >>> rm.random.normal(rm.random.key(0), (2, 3), "float64").dtype
    dtype('float64')
    """
    dtype = _float_dtype(dtype, "normal")
    return random_normal(_key(key, "normal"), _shape(shape, "normal"), dtype)


def bernoulli(key: Tensor, p=0.5, shape=None) -> Tensor:
    """Booleans that are True with probability `p` (which may be a tensor, even a traced one);
    `shape` defaults to the shape of `p`.

    >>> import remat as rm
    >>> rm.random.bernoulli(rm.random.key(0), 0.5, (4,)).dtype
    dtype('bool')
    """
    key, p = _key(key, "bernoulli"), asarray(p)
    if not dtypes.is_float(p.dtype):
        p = p.astype(dtypes.float32)
    shape = p.shape if shape is None else _shape(shape, "bernoulli")
    return less(random_uniform(key, shape, p.dtype), p)


# ---------------------------------------------------------------- helpers


def _key(key, what: str) -> Tensor:
    key = asarray(key)
    if not dtypes.is_int(key.dtype):
        raise DTypeError(f"random.{what}: a key is an int32 tensor of shape (2,), got {key.dtype}; "
                         "make one with rm.random.key(seed)")
    if key.shape != _KEY_SHAPE:
        raise ShapeError(
            f"random.{what}: a key is an int32 tensor of shape (2,), got {key.shape}; make one with "
            "rm.random.key(seed), or pick one of rm.random.split(key, n) by indexing it"
        )
    return key if key.dtype == dtypes.int32 else astype(key, dtypes.int32)


def _traced_key(seed: Tensor) -> Tensor:
    if seed.shape != () or seed.dtype != dtypes.int32:
        raise DTypeError(
            f"random.key: a traced seed must be an int32 tensor of shape (), got {seed.shape} "
            f"{seed.dtype}; pass a Python int, or an int32 scalar"
        )
    high = negative(astype(less(seed, 0), dtypes.int32))  # the sign, as in seed % 2**64
    return stack([high, seed])


def _describe(x) -> str:
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor of shape {x.shape}"
    return type(x).__name__


def _float_dtype(dtype, what: str) -> np.dtype:
    dtype = dtypes.canonical(dtype, f"random.{what}")
    if not dtypes.is_float(dtype):
        raise DTypeError(f"random.{what}: dtype must be a float dtype, got {dtype}")
    return dtype


def _is_number(x, value) -> bool:
    return isinstance(x, (int, float)) and x == value


def _shape(shape, what: str) -> tuple[int, ...]:
    return shape_tuple(f"random.{what}", shape)  # ints, never truncated floats: (1.5,) is an error
