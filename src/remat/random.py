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
from remat.ops.axes import axis_index, shape_tuple, static_int
from remat.ops.creation import arange
from remat.ops.division import floor_divide
from remat.ops.elementwise import (
    add,
    astype,
    broadcast_shapes,
    clip,
    less,
    log,
    maximum,
    minimum,
    multiply,
    negative,
    subtract,
    where,
)
from remat.ops.indexing import take
from remat.ops.random_bits import random_fold_in, random_normal, random_uniform
from remat.ops.reduce import argmax
from remat.ops.shape import broadcast_to, expand_dims, stack
from remat.ops.sort import argsort
from remat.ops.special import normal_cdf, normal_quantile
from remat.tensor import Tensor
from remat.trace import asarray

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


def uniform(key: Tensor, shape=(), dtype=float, minval=0.0, maxval=1.0) -> Tensor:
    """Uniform numbers in [minval, maxval) of `shape` and float `dtype`. In [0, 1) they are
    multiples of 2**-24 (float32) or 2**-53 (float64); the scaled ones, `minval + u * (maxval -
    minval)` computed in `dtype` (Python bounds converted to it exactly), may round to `maxval`,
    and are at least `minval`: where `maxval < minval` every number is `minval`, as in JAX.

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
    return maximum(lo, add(multiply(u, subtract(hi, lo)), lo))


def normal(key: Tensor, shape=(), dtype=float) -> Tensor:
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


def randint(key: Tensor, shape, minval, maxval, dtype=dtypes.int32) -> Tensor:
    """Integers uniform in [minval, maxval) of `shape` and integer `dtype`, as
    `jax.random.randint`; the bounds are ints or integer tensors (traced ones too) that
    broadcast to `shape`. Each number is `minval + floor(u * (maxval - minval))` for a float64
    uniform `u`: uniform to within 2**-53 for spans up to 2**53. Bounds known now must satisfy
    minval < maxval; traced ones that do not give minval.

    >>> import numpy as np, remat as rm
    >>> x = np.asarray(rm.random.randint(rm.random.key(0), (1000,), 3, 7))
    >>> sorted(set(x.tolist())), x.dtype
    ([3, 4, 5, 6], dtype('int32'))
    """
    key, shape = _key(key, "randint"), _shape(shape, "randint")
    dtype = dtypes.canonical(dtype, "random.randint")
    if not dtypes.is_int(dtype):
        raise DTypeError(f"random.randint: dtype must be an integer dtype, got {dtype}")
    lo, hi = (_int_bound(b, dtype, name) for b, name in ((minval, "minval"), (maxval, "maxval")))
    if lo.is_concrete and hi.is_concrete and not (np.asarray(lo._value) < np.asarray(hi._value)).all():
        raise ArgumentValueError(f"random.randint: minval {_bound(minval)} must be below maxval {_bound(maxval)} "
                                 "(the range [minval, maxval) is empty)")
    _fits(shape, (lo.shape, hi.shape), "randint", "minval and maxval")
    span = subtract(hi.astype(dtypes.float64), lo.astype(dtypes.float64))
    u = random_uniform(key, shape, dtypes.float64)
    k = minimum(floor_divide(multiply(u, span), 1.0), subtract(span, 1.0))  # below maxval after rounding
    return broadcast_to(where(span > 0, add(lo, k.astype(dtype)), lo), shape)


def categorical(key: Tensor, logits, axis: int = -1, shape=None) -> Tensor:
    """Indices (int32) drawn with probabilities `softmax(logits)` along `axis`, as
    `jax.random.categorical`: by default one per entry of the other axes of `logits`; `shape`,
    if given, must end with those axes (leading ones draw more samples). The Gumbel-max trick:
    the argmax of `logits` plus Gumbel noise.

    >>> import numpy as np, remat as rm
    >>> draws = rm.random.categorical(rm.random.key(0), rm.log(rm.asarray([0.2, 0.8])), shape=(10000,))
    >>> bool(abs(np.mean(np.asarray(draws)) - 0.8) < 0.02)
    True
    """
    key, logits = _key(key, "categorical"), asarray(logits)
    if not dtypes.is_float(logits.dtype):
        logits = logits.astype(dtypes.DEFAULT_FLOAT)
    if logits.ndim == 0:
        raise ShapeError("random.categorical: logits must have at least one axis (the categories), got shape ()")
    axis = axis_index("random.categorical", axis, logits.ndim)
    batch = logits.shape[:axis] + logits.shape[axis + 1 :]
    shape = batch if shape is None else _shape(shape, "categorical")
    if len(shape) < len(batch) or shape[len(shape) - len(batch) :] != batch:
        raise ShapeError(f"random.categorical: shape {shape} must end with the shape {batch} of logits "
                         f"{logits.shape} without axis {axis}")
    prefix = len(shape) - len(batch)
    noise_shape = shape[:prefix] + batch[:axis] + (logits.shape[axis],) + batch[axis:]
    u = maximum(random_uniform(key, noise_shape, logits.dtype), np.finfo(logits.dtype).tiny)
    gumbel = negative(log(negative(log(u))))
    return argmax(add(gumbel, expand_dims(logits, tuple(range(prefix))) if prefix else logits), axis=prefix + axis)


def permutation(key: Tensor, x, axis: int = 0) -> Tensor:
    """A random permutation: of `arange(x)` for an int `x`, else of `x`'s entries along `axis`,
    as `jax.random.permutation`. The order sorts float64 uniforms (one more sort per 2**17-fold
    growth of the length, so that ties stay rarer than one in a million draws).

    >>> import numpy as np, remat as rm
    >>> sorted(np.asarray(rm.random.permutation(rm.random.key(0), 5)).tolist())
    [0, 1, 2, 3, 4]
    """
    key = _key(key, "permutation")
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        n = static_int("random.permutation", x, "x")
        if n < 0:
            raise ArgumentValueError(f"random.permutation: x must be a non-negative int or a tensor, got {n}")
        return _shuffle_order(key, n)
    x = asarray(x)
    if x.ndim == 0:
        raise ShapeError("random.permutation: x must be an int or a tensor of at least one axis, got a 0-d tensor")
    axis = axis_index("random.permutation", axis, x.ndim)
    return take(x, _shuffle_order(key, x.shape[axis]), axis=axis)


def _shuffle_order(key: Tensor, n: int) -> Tensor:
    # Each round sorts by fresh 53-bit keys; ties keep the previous round's (random) order.
    rounds = max(1, -(-3 * max(n - 1, 1).bit_length() // 53))
    order = arange(n, dtype=dtypes.int32)
    for k in range(rounds):
        order = take(order, argsort(random_uniform(fold_in(key, k), (n,), dtypes.float64)))
    return order


def truncated_normal(key: Tensor, lower, upper, shape=None, dtype=float) -> Tensor:
    """Standard normal numbers conditioned on [lower, upper], as `jax.random.truncated_normal`;
    the bounds are numbers or tensors (traced ones too, infinite ones allowed) broadcasting to
    `shape` (by default their broadcast shape). Drawn by inverting the normal CDF in float64
    (Acklam's quantile and an erfc fit, both accurate to about 1e-7 relative), in the lower tail
    for bounds above 0, so far tails keep their precision.

    >>> import numpy as np, remat as rm
    >>> z = np.asarray(rm.random.truncated_normal(rm.random.key(0), -1.0, 2.0, (1000,)))
    >>> bool(z.min() >= -1.0 and z.max() <= 2.0), z.dtype
    (True, dtype('float32'))
    """
    key, dtype = _key(key, "truncated_normal"), _float_dtype(dtype, "truncated_normal")
    lo, hi = (_float_bound(b, name) for b, name in ((lower, "lower"), (upper, "upper")))
    if lo.is_concrete and hi.is_concrete and not (np.asarray(lo._value) < np.asarray(hi._value)).all():
        raise ArgumentValueError(f"random.truncated_normal: lower {_bound(lower)} must be below upper "
                                 f"{_bound(upper)}")
    shape = broadcast_shapes(lo.shape, hi.shape) if shape is None else _shape(shape, "truncated_normal")
    _fits(shape, (lo.shape, hi.shape), "truncated_normal", "lower and upper")
    # Above 0, draw -z from [-upper, -lower]: the CDF is exact in the lower tail, not near 1.
    flip = lo > 0
    a, b = where(flip, negative(hi), lo), where(flip, negative(lo), hi)
    pa, pb = normal_cdf(a), normal_cdf(b)
    u = random_uniform(key, shape, dtypes.float64)
    z = clip(normal_quantile(add(pa, multiply(u, subtract(pb, pa)))), a, b)
    return where(flip, negative(z), z).astype(dtype)


# ---------------------------------------------------------------- helpers


def _int_bound(bound, dtype: np.dtype, name: str) -> Tensor:
    if isinstance(bound, Tensor) and not dtypes.is_int(bound.dtype) or isinstance(bound, (bool, float)):
        raise DTypeError(f"random.randint: {name} must be an int or an integer tensor, got {_bound(bound)}")
    return asarray(bound, dtype)


def _float_bound(bound, name: str) -> Tensor:
    if isinstance(bound, bool) or not isinstance(bound, (int, float, Tensor, np.ndarray, np.number)):
        raise ArgumentTypeError(f"random.truncated_normal: {name} must be a number or a tensor, got {_bound(bound)}")
    return asarray(bound, dtypes.float64)


def _bound(x) -> str:
    if isinstance(x, Tensor):
        return repr(x.item()) if x.is_concrete and x.size == 1 else _describe(x)
    return repr(x)


def _fits(shape: tuple[int, ...], shapes, what: str, names: str) -> None:
    for s in shapes:
        if len(s) > len(shape) or broadcast_or_none(s, shape) != shape:
            raise ShapeError(f"random.{what}: {names} of shapes {tuple(shapes)} do not broadcast to shape {shape}")


def broadcast_or_none(a, b):
    try:
        return broadcast_shapes(a, b)
    except ShapeError:
        return None




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
    if dtype in dtypes.LOW_PRECISION:  # the bit-exact generators make float32 and float64 only
        raise DTypeError(f"random.{what}: dtype {dtype} is not drawn directly; draw float32 and cast "
                         f'the result (.astype("{dtype}"))')
    return dtype


def _is_number(x, value) -> bool:
    return isinstance(x, (int, float)) and x == value


def _shape(shape, what: str) -> tuple[int, ...]:
    return shape_tuple(f"random.{what}", shape)  # ints, never truncated floats: (1.5,) is an error
