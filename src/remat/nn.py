"""Neural-network helpers composed from remat ops: they need no lowering of their own. Those
whose composed gradient would keep several intermediates (softmax, log_softmax, layer_norm,
gelu) give their VJP with `custom_vjp`, keeping one tensor as a framework's fused op would.

Reductions that exponentiate subtract a `stop_gradient`-ed maximum first, so they neither
overflow nor change the gradient (the functions are shift-invariant).
"""

from __future__ import annotations

import functools
import math

from remat import dtypes
from remat import random as _random
from remat.custom_vjp import custom_vjp
from remat.errors import ArgumentValueError, DTypeError, ShapeError
from remat.ops import (
    abs,
    arange,
    broadcast_to,
    equal,
    exp,
    expand_dims,
    expm1,
    log,
    log1p,
    max,
    maximum,
    mean,
    minimum,
    multiply,
    reshape,
    sqrt,
    stop_gradient,
    sum,
    tanh,
    where,
    zeros_like,
)
from remat.ops import mean as _mean
from remat.ops import sign as _sign
from remat.ops.elementwise import broadcast_shapes_for, promote
from remat.ops.reduce import normalize_axes
from remat.ops.special import normal_cdf as _normal_cdf
from remat.tensor import Tensor
from remat.trace import asarray


def relu(x) -> Tensor:
    """`max(x, 0)` elementwise.

    >>> import remat as rm
    >>> rm.nn.relu(rm.asarray([-1.0, 0.0, 2.0]))
    Tensor([0., 0., 2.], dtype=float32)
    """
    x = asarray(x)
    # NOTE: written as where(x > 0, x, 0) rather than maximum(x, 0), whose VJP splits a tie
    # evenly: this way the gradient at the kink x == 0 is 0, as in JAX.
    return where(x > 0, x, 0)


def sigmoid(x) -> Tensor:
    """The logistic function `1 / (1 + exp(-x))`, without overflow for any `x`.

    >>> import remat as rm
    >>> rm.nn.sigmoid(rm.asarray([-1000.0, 0.0, 1000.0]))
    Tensor([0. , 0.5, 1. ], dtype=float32)
    """
    x = _float(x)
    # e = exp(-|x|) <= 1 in both branches, so neither can overflow (a where over an overflowing
    # branch gives nan gradients). NOTE: -|x| is written with where, not abs, whose gradient at
    # 0 is sign(0) = 0 and would make the gradient at x == 0 wrong.
    nonneg = x >= 0
    e = exp(where(nonneg, -x, x))
    return where(nonneg, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x) -> Tensor:
    """`x * sigmoid(x)` (also called swish), as `jax.nn.silu`.

    >>> import remat as rm
    >>> rm.nn.silu(rm.asarray([0.0, 1.0]))
    Tensor([0.       , 0.7310586], dtype=float32)
    """
    x = _float(x)
    return x * sigmoid(x)


swish = silu  # jax.nn.swish is silu too


def relu6(x) -> Tensor:
    """`min(max(x, 0), 6)`, with gradient 0 at both kinks, as `jax.nn.relu6`.

    >>> import remat as rm
    >>> rm.nn.relu6(rm.asarray([-1.0, 3.0, 8.0]))
    Tensor([0., 3., 6.], dtype=float32)
    """
    x = _float(x)
    # The clipped value carries no gradient: 1 strictly inside (0, 6), 0 elsewhere (JAX's rule).
    return where((x > 0) & (x < 6), x, stop_gradient(minimum(maximum(x, 0.0), 6.0)))


def leaky_relu(x, negative_slope: float = 1e-2) -> Tensor:
    """`x` where `x >= 0`, else `negative_slope * x`, as `jax.nn.leaky_relu`."""
    x = _float(x)
    return where(x >= 0, x, negative_slope * x)


def elu(x, alpha: float = 1.0) -> Tensor:
    """`x` where `x > 0`, else `alpha * (exp(x) - 1)`, as `jax.nn.elu`."""
    x = _float(x)
    positive = x > 0
    return where(positive, x, alpha * expm1(where(positive, 0.0, x)))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x) -> Tensor:
    """Scaled elu with the self-normalizing constants, as `jax.nn.selu`."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def celu(x, alpha: float = 1.0) -> Tensor:
    """`max(x, 0) + alpha * expm1(min(x, 0) / alpha)`, as `jax.nn.celu`."""
    x = _float(x)
    return maximum(x, 0.0) + alpha * expm1(minimum(x, 0.0) / alpha)


def soft_sign(x) -> Tensor:
    """`x / (|x| + 1)`, as `jax.nn.soft_sign` (also named `softsign`)."""
    x = _float(x)
    return x / (abs(x) + 1.0)


softsign = soft_sign


def hard_sigmoid(x) -> Tensor:
    """`relu6(x + 3) / 6`, a piecewise-linear sigmoid, as `jax.nn.hard_sigmoid`."""
    return relu6(_float(x) + 3.0) / 6.0


def hard_silu(x) -> Tensor:
    """`x * hard_sigmoid(x)`, as `jax.nn.hard_silu` (also named `hard_swish`)."""
    x = _float(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def hard_tanh(x) -> Tensor:
    """`x` clipped to [-1, 1] (slope 1 at the ends), as `jax.nn.hard_tanh`; integers stay integers."""
    x = asarray(x)
    return where(x > 1, 1, where(x < -1, -1, x))


def log_sigmoid(x) -> Tensor:
    """`log(sigmoid(x))` without overflow, `-softplus(-x)`, as `jax.nn.log_sigmoid`.

    >>> import remat as rm
    >>> float(rm.nn.log_sigmoid(rm.asarray(-1000.0)))
    -1000.0
    """
    return -softplus(-_float(x))


def softplus(x) -> Tensor:
    """`log(1 + exp(x))`, a smooth relu, without overflow for any `x`, as `jax.nn.softplus`; its
    gradient is `sigmoid(x)`.

    >>> import remat as rm
    >>> rm.nn.softplus(rm.asarray(0.0))
    Tensor(0.6931472, dtype=float32)
    >>> float(rm.nn.softplus(rm.asarray(1000.0)))
    1000.0
    """
    x = _float(x)
    # max(x, 0) + log1p(exp(-|x|)): exp never overflows. NOTE: both kinks are taken on the same
    # side (x >= 0), so their slopes at 0 add up to sigmoid(0) = 1/2, as they must.
    nonneg = x >= 0
    return where(nonneg, x, 0.0) + log1p(exp(where(nonneg, -x, x)))


def gelu(x, approximate: bool = True) -> Tensor:
    """Gaussian error linear unit `x * Phi(x)`, as `jax.nn.gelu`: `approximate=True` (the
    default, as in JAX) is the tanh form `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`,
    `approximate=False` the exact one (PyTorch's default). Its gradient keeps only `x`.

    NOTE: exact gelu uses a fit of erfc (remat/ops/special.py), not the erf primitive, so it
    and its gradient agree with the true ones to float32 precision, not float64's.

    >>> import remat as rm
    >>> rm.nn.gelu(rm.asarray([0.0, 1.0]), approximate=False)
    Tensor([0.       , 0.8413447], dtype=float32)
    """
    return (_gelu_tanh if approximate else _gelu_exact)(_float(x))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh_value(x: Tensor) -> Tensor:
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1.0 + tanh(inner))


def _gelu_tanh_bwd(x: Tensor, g: Tensor) -> tuple:
    # t = tanh(c (x + a x^3)):  d/dx [x/2 (1 + t)] = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 a x^2)
    t = tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x)))
    slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * (x * x)))
    return (g * slope,)


def _gelu_exact_bwd(x: Tensor, g: Tensor) -> tuple:
    # d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    return (g * (_normal_cdf(x) + x * (exp(-0.5 * (x * x)) * (1.0 / math.sqrt(2.0 * math.pi)))),)


_gelu_tanh = custom_vjp(_gelu_tanh_value)
_gelu_tanh.defvjp(lambda x: (_gelu_tanh_value(x), x), _gelu_tanh_bwd)
_gelu_exact = custom_vjp(lambda x: x * _normal_cdf(x))
_gelu_exact.defvjp(lambda x: (x * _normal_cdf(x), x), _gelu_exact_bwd)


def _max_shift(x: Tensor, axis) -> Tensor:
    """The maximum over `axis` (kept), with no gradient and 0 where it is infinite, so that
    `x - shift` is finite wherever `x` is."""
    m = max(x, axis=axis, keepdims=True)
    return stop_gradient(where(abs(m) < math.inf, m, 0.0))


def logsumexp(x, axis=None, b=None, keepdims: bool = False, return_sign: bool = False):
    """`log(sum(b * exp(x), axis))`, computed without overflow, as `jax.nn.logsumexp` (and
    `scipy.special.logsumexp`): `b` (weights broadcasting against `x`) may be negative, and
    then the result is nan where the sum is; `return_sign=True` gives `(log|sum|, sign(sum))`.

    >>> import remat as rm
    >>> rm.nn.logsumexp(rm.asarray([1000.0, 1000.0]))
    Tensor(1000.6932, dtype=float32)
    >>> rm.nn.logsumexp(rm.asarray([0.0, 0.0]), b=rm.asarray([2.0, -1.0]))
    Tensor(0., dtype=float32)
    """
    if b is None:
        x = _float(x)
    else:
        x, b = _float_pair("logsumexp", x, b)
        shape = broadcast_shapes_for("logsumexp", x.shape, b.shape)
        x, b = broadcast_to(x, shape), broadcast_to(b, shape)
        x = where(b != 0, x, -math.inf)  # a zero weight drops its term, even an infinite one
    axes = normalize_axes(axis, x.ndim, "logsumexp")
    shift = _max_shift(x, axes)
    terms = exp(x - shift)
    total = sum(terms if b is None else terms * b, axis=axes, keepdims=True)
    if b is None and not return_sign:
        out = log(total) + shift
        return out if keepdims else _drop(out, axes)
    sign = _sign(total)
    out = log(abs(total)) + shift
    out, sign = (out, sign) if keepdims else (_drop(out, axes), _drop(sign, axes))
    if return_sign:
        return out, sign
    return where(sign < 0, math.nan, out)


def log_softmax(x, axis: int = -1) -> Tensor:
    """`x - logsumexp(x, axis)`: log-probabilities along `axis`. Its gradient keeps only the
    result.

    >>> import remat as rm
    >>> rm.nn.log_softmax(rm.asarray([0.0, 0.0]))
    Tensor([-0.6931472, -0.6931472], dtype=float32)
    """
    x = _float(x)
    return _log_softmax(normalize_axes(axis, x.ndim))(x)


def softmax(x, axis: int = -1) -> Tensor:
    """`exp(x) / sum(exp(x), axis)`: probabilities along `axis`. Its gradient keeps only the
    result.

    >>> import remat as rm
    >>> rm.nn.softmax(rm.asarray([0.0, 0.0, -float("inf")]))
    Tensor([0.5, 0.5, 0. ], dtype=float32)
    """
    x = _float(x)
    return _softmax(normalize_axes(axis, x.ndim))(x)


def layer_norm(x, gamma=None, beta=None, axis=-1, eps: float = 1e-5) -> Tensor:
    """`(x - mean) / sqrt(var + eps) * gamma + beta`, the statistics taken over `axis` (an int
    or a tuple); `gamma` and `beta` broadcast against `x` and may be None. Its gradient keeps
    the normalized value and `1 / sqrt(var + eps)`.

    >>> import remat as rm
    >>> rm.nn.layer_norm(rm.asarray([1.0, 3.0]), eps=0.0)
    Tensor([-1.,  1.], dtype=float32)
    """
    x = _float(x)
    out = _normalize(normalize_axes(axis, x.ndim), float(eps))(x)
    if gamma is not None:
        out = out * gamma
    if beta is not None:
        out = out + beta
    return out


def standardize(x, axis=-1, mean=None, variance=None, epsilon: float = 1e-5, algorithm: str = "fast") -> Tensor:
    """`(x - mean) / sqrt(variance + epsilon)`, the statistics over `axis` unless given, as
    `jax.nn.standardize`: `algorithm="fast"` (JAX's default) takes the variance as
    `mean(x²) - mean(x)²` clipped at 0, `"stable"` as `mean((x - mean)²)`.

    >>> import remat as rm
    >>> rm.nn.standardize(rm.asarray([1.0, 3.0]), epsilon=0.0)
    Tensor([-1.,  1.], dtype=float32)
    """
    if algorithm not in ("fast", "stable"):
        raise ArgumentValueError(f"standardize: algorithm must be 'fast' or 'stable', got {algorithm!r}")
    x = _float(x)
    axes = normalize_axes(axis, x.ndim, "standardize")
    if mean is None:
        mean = _mean(x, axis=axes, keepdims=True)
    if variance is None:
        if algorithm == "fast":
            variance = maximum(_mean(x * x, axis=axes, keepdims=True) - mean * mean, 0.0)
        else:
            variance = _mean((x - mean) * (x - mean), axis=axes, keepdims=True)
    return (x - mean) * (1.0 / sqrt(variance + epsilon))


# The custom VJPs are made once per (axes, eps): identical layers then share one rule, and so
# give identical graphs.


@functools.cache
def _softmax(axes: tuple[int, ...]) -> custom_vjp:
    def softmax(x):
        e = exp(x - _max_shift(x, axes))
        return e / sum(e, axis=axes, keepdims=True)

    def softmax_bwd(y, g):
        # x' = (diag(y) - y y^T) g = y * (g - sum(g * y))
        return (y * (g - sum(g * y, axis=axes, keepdims=True)),)

    f = custom_vjp(softmax)
    f.defvjp(lambda x: (y := softmax(x), y), softmax_bwd)
    return f


@functools.cache
def _log_softmax(axes: tuple[int, ...]) -> custom_vjp:
    def log_softmax(x):
        shifted = x - _max_shift(x, axes)
        return shifted - log(sum(exp(shifted), axis=axes, keepdims=True))

    def log_softmax_bwd(y, g):
        # x' = g - softmax(x) * sum(g), softmax(x) = exp(y)
        return (g - exp(y) * sum(g, axis=axes, keepdims=True),)

    f = custom_vjp(log_softmax)
    f.defvjp(lambda x: (y := log_softmax(x), y), log_softmax_bwd)
    return f


@functools.cache
def _normalize(axes: tuple[int, ...], eps: float) -> custom_vjp:
    def normalize_fwd(x):
        centered = x - mean(x, axis=axes, keepdims=True)
        var = mean(centered * centered, axis=axes, keepdims=True)
        n = centered / sqrt(var + eps)
        return n, (n, 1.0 / sqrt(var + eps))

    def normalize_bwd(res, g):
        # n = (x - mean) r, r = 1/sqrt(var + eps):  x' = r (g - mean(g) - n mean(g n))
        n, r = res
        return (r * (g - mean(g, axis=axes, keepdims=True) - n * mean(g * n, axis=axes, keepdims=True)),)

    f = custom_vjp(lambda x: normalize_fwd(x)[0])
    f.__name__ = "layer_norm"
    f.defvjp(normalize_fwd, normalize_bwd)
    return f


def rms_norm(x, gamma=None, axis=-1, eps: float = 1e-6) -> Tensor:
    """`x / sqrt(mean(x**2) + eps) * gamma`, the mean taken over `axis` (an int or a tuple), as
    PyTorch's `RMSNorm` and Flax's; `gamma` broadcasts against `x` and may be None. Its gradient
    keeps the normalized value and `1 / sqrt(mean(x**2) + eps)`.

    >>> import remat as rm
    >>> rm.nn.rms_norm(rm.asarray([3.0, 4.0]), eps=0.0)
    Tensor([0.84852815, 1.1313709 ], dtype=float32)
    """
    x = _float(x)
    out = _rms_normalize(normalize_axes(axis, x.ndim, "rms_norm"), float(eps))(x)
    return out if gamma is None else out * gamma


@functools.cache
def _rms_normalize(axes: tuple[int, ...], eps: float) -> custom_vjp:
    def rms_fwd(x):
        r = 1.0 / sqrt(mean(x * x, axis=axes, keepdims=True) + eps)
        n = x * r
        return n, (n, r)

    def rms_bwd(res, g):
        # n = x r, r = 1/sqrt(mean(x^2) + eps):  x' = r (g - n mean(g n))
        n, r = res
        return (r * (g - n * mean(g * n, axis=axes, keepdims=True)),)

    f = custom_vjp(lambda x: rms_fwd(x)[0])
    f.__name__ = "rms_norm"
    f.defvjp(rms_fwd, rms_bwd)
    return f


def one_hot(labels, num_classes: int, dtype=float) -> Tensor:
    """`labels` (integers) as one-hot vectors along a new last axis; out-of-range labels give
    all zeros.

    >>> import remat as rm
    >>> rm.nn.one_hot(rm.asarray([2, 0]), 3)
    Tensor([[0., 0., 1.],
            [1., 0., 0.]], dtype=float32)
    """
    labels = _int_labels(labels, "one_hot")
    hit = equal(expand_dims(labels, -1), arange(int(num_classes), dtype=labels.dtype))
    return hit.astype(dtype)


def cross_entropy(logits, labels) -> Tensor:
    """The mean over the batch (all leading axes) of `-log_softmax(logits)[..., label]`.
    `logits` has shape `labels.shape + (num_classes,)`.

    >>> import remat as rm
    >>> rm.nn.cross_entropy(rm.zeros((2, 4)), rm.asarray([1, 3]))
    Tensor(1.3862944, dtype=float32)
    """
    logits = _float(logits)
    labels = _int_labels(labels, "cross_entropy")
    if logits.ndim < 1 or logits.shape[:-1] != labels.shape:
        raise ShapeError(
            f"cross_entropy: logits {logits.shape} must be labels {labels.shape} + (num_classes,)"
        )
    picked = multiply(one_hot(labels, logits.shape[-1], logits.dtype), log_softmax(logits))
    return -mean(sum(picked, axis=-1))


def dropout(key, x, rate: float, deterministic: bool = False) -> Tensor:
    """`x` with each element zeroed with probability `rate` and the rest scaled by
    `1 / (1 - rate)`. The mask is a function of `key` (which may be traced, e.g. an argument of
    `rm.jit`), so a checkpoint's recomputation draws the same mask as the forward pass.

    >>> import remat as rm
    >>> y = rm.nn.dropout(rm.random.key(0), rm.ones((1000,)), 0.5)
    >>> sorted(set(y.__array__().tolist()))
    [0.0, 2.0]
    """
    x = _float(x)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1], got {rate}")
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return zeros_like(x)
    keep = _random.bernoulli(key, 1.0 - rate, x.shape)  # the same mask whatever x's dtype
    return where(keep, x * (1.0 / (1.0 - rate)), 0.0)


# ---------------------------------------------------------------- helpers


def _float(x) -> Tensor:
    x = asarray(x)
    return x if dtypes.is_float(x.dtype) else x.astype(dtypes.DEFAULT_FLOAT)


def _float_pair(what: str, x, y) -> list[Tensor]:
    a, b = promote(x, y, what=what)
    return [_float(a), _float(b)]


def _drop(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def _int_labels(labels, what: str) -> Tensor:
    labels = asarray(labels)
    if not dtypes.is_int(labels.dtype):
        raise DTypeError(f"{what}: labels must be integers, got {labels.dtype}")
    return labels
