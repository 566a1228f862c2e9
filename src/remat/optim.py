"""Optimizers as pure functions of pytrees: `sgd` (with momentum or Nesterov momentum), `adam`
and `adamw`. Each returns an `Optimizer`, a pair of functions:

    opt = rm.optim.adamw(1e-3, weight_decay=0.01)
    state = opt.init(params)                          # a pytree of tensors
    params, state = opt.update(grads, state, params)  # new parameters, new state

Nothing is updated in place and the state is an ordinary pytree (a NamedTuple of tensors), so
`update` runs eagerly or traced, and a whole training step is one `rm.jit` program on either
backend:

    @rm.jit
    def step(params, state, batch):
        loss, grads = rm.value_and_grad(loss_fn)(params, batch)
        params, state = opt.update(grads, state, params)
        return params, state, loss

The formulas, for a parameter p with gradient g at step t = 1, 2, ... (lr may be a schedule: a
callable of the number of steps taken before this one, 0 at the first, as in optax):

- `sgd(lr, momentum=None, nesterov=False, weight_decay=0.0)`: g <- g + wd p (L2, as PyTorch's
  SGD); with momentum mu: b <- mu b + g (b = 0 before the first step); the step is b, or
  g + mu b with Nesterov (Sutskever et al. 2013, as written by PyTorch and optax); p <- p - lr step.
- `adam(lr, b1=0.9, b2=0.999, eps=1e-8)` (Kingma and Ba 2015): m <- b1 m + (1 - b1) g,
  v <- b2 v + (1 - b2) g^2, p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
- `adamw(lr, b1, b2, eps, weight_decay=1e-4, mask=None)` (Loshchilov and Hutter 2019): Adam's
  step plus the decoupled decay wd p, both scaled by lr (optax's and PyTorch's AdamW); `mask` (a
  pytree of bools like the parameters, or a function of the parameters giving one) limits the
  decay to the parameters it marks True.

Learning-rate schedules are optax's, computed as optax computes them (the same operations in
the same order on the int32 step count): `constant_schedule`, `linear_schedule`,
`polynomial_schedule`, `cosine_decay_schedule`, `exponential_decay`, `join_schedules` and
`warmup_cosine_decay_schedule`. On XLA their values are optax's bit for bit, and so are the
updates (written in optax's operand order, which decides the multiply-adds XLA fuses into one
rounding), but where XLA fuses the updates of several arrays differently in the two programs a
few entries differ in the last bit. NumPy rounds every multiply and add: a few ulp.

The moments are kept in each parameter's dtype; the arithmetic is done in float32 or wider, and
the new parameter is cast back to its dtype. For mixed precision keep float32 master weights
and cast them to bfloat16 inside the loss: their gradients come back in float32.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from remat import dtypes, tree
from remat.argcheck import describe, leaf_paths, short_repr
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError
from remat.ops import astype, clip, cos, floor, maximum, minimum, ones_like, sqrt, where, zeros_like
from remat.tensor import Tensor, is_tensor_like
from remat.trace import asarray


@dataclass(frozen=True)
class Optimizer:
    """`init(params) -> state` and `update(grads, state, params) -> (params, state)`.

    >>> import remat as rm
    >>> opt = rm.optim.sgd(0.1)
    >>> params = {"w": rm.asarray([1.0, 2.0])}
    >>> params, state = opt.update({"w": rm.asarray([1.0, -1.0])}, opt.init(params), params)
    >>> params["w"]
    Tensor([0.9, 2.1], dtype=float32)
    """

    name: str
    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]

    def __repr__(self) -> str:
        return f"<optimizer {self.name}>"


class SgdState(NamedTuple):
    """`count`: steps taken (int32); `momentum`: the momentum buffers (None without momentum)."""

    count: Tensor
    momentum: Any


class AdamState(NamedTuple):
    """`count`: steps taken (int32); `mu`, `nu`: the first and second moments, like the params."""

    count: Tensor
    mu: Any
    nu: Any


# ---------------------------------------------------------------- the optimizers


def sgd(learning_rate, momentum: float | None = None, nesterov: bool = False,
        weight_decay: float = 0.0) -> Optimizer:
    """Stochastic gradient descent, with heavy-ball or Nesterov momentum and L2 weight decay.

    >>> import remat as rm
    >>> opt = rm.optim.sgd(0.1, momentum=0.9, nesterov=True)
    >>> p = rm.asarray([1.0])
    >>> state = opt.init(p)
    >>> for _ in range(2):
    ...     p, state = opt.update(rm.asarray([1.0]), state, p)
    >>> round(float(p[0]), 6)  # 1 - 0.1 (1 + 0.9) - 0.1 (1 + 0.9 * 1.9)
    0.539
    """
    name = "sgd"
    lr = _learning_rate(name, learning_rate)
    if momentum is not None:
        _number(name, "momentum", momentum, 0.0, 1.0, high_open=False)
    if not isinstance(nesterov, bool):
        raise ArgumentTypeError(f"{name}: nesterov must be True or False, got {short_repr(nesterov)}")
    if nesterov and not momentum:
        raise ArgumentValueError(f"{name}: nesterov=True needs a momentum, got momentum={momentum!r}; "
                                 "pass momentum=0.9 (for example)")
    wd = _number(name, "weight_decay", weight_decay, 0.0, math.inf)

    def init(params) -> SgdState:
        leaves = _float_leaves(f"{name}.init", params, "params")
        buffers = None if momentum is None else tree.map(zeros_like, _rebuild(params, leaves))
        return SgdState(_zero_count(), buffers)

    def update(grads, state, params) -> tuple[Any, SgdState]:
        fields = ("momentum",) if momentum is not None else ()
        p, g, buffers = _operands(name, grads, state, params, SgdState, fields)
        buf = buffers[0] if buffers else None
        rate = lr(state.count)
        new_p, new_buf = [], []
        for i, (pi, gi) in enumerate(zip(p, g)):
            dt = _compute_dtype(pi)
            gi = _cast(gi, dt) + wd * _cast(pi, dt) if wd else _cast(gi, dt)
            step = gi
            if momentum is not None:
                b = gi + momentum * _cast(buf[i], dt)  # optax's order (see _adam)
                new_buf.append(astype(b, pi.dtype))
                step = gi + momentum * b if nesterov else b
            new_p.append(astype(_cast(pi, dt) - _rate(rate, dt) * step, pi.dtype))
        buffers = None if momentum is None else _rebuild(params, new_buf)
        return _rebuild(params, new_p), SgdState(state.count + 1, buffers)

    return Optimizer(name, init, update)


def adam(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """Adam: steps scaled by running estimates of the gradient's first two moments.

    >>> import remat as rm
    >>> opt = rm.optim.adam(0.1)
    >>> p = rm.asarray([1.0, 1.0])
    >>> p, state = opt.update(rm.asarray([0.5, -3.0]), opt.init(p), p)
    >>> [round(float(v), 5) for v in p]  # lr * sign(g) first: bias correction undoes the zero start
    [0.9, 1.1]
    """
    return _adam("adam", learning_rate, b1, b2, eps, 0.0, None)


def adamw(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4,
          mask=None) -> Optimizer:
    """Adam with decoupled weight decay: each step also takes lr * weight_decay * p off p, for the
    parameters `mask` marks (all by default; a pytree of bools like the params, or a function
    of the params that returns one — e.g. to spare biases and layer-norm gains).

    >>> import remat as rm
    >>> opt = rm.optim.adamw(0.1, weight_decay=0.5, mask={"w": True, "b": False})
    >>> p = {"w": rm.asarray([2.0]), "b": rm.asarray([2.0])}
    >>> p, state = opt.update({"w": rm.asarray([1.0]), "b": rm.asarray([1.0])}, opt.init(p), p)
    >>> round(float(p["w"][0]), 5), round(float(p["b"][0]), 5)  # 2 - 0.1 (1 + 0.5 * 2), 2 - 0.1
    (1.8, 1.9)
    """
    return _adam("adamw", learning_rate, b1, b2, eps, weight_decay, mask)


def _adam(name, learning_rate, b1, b2, eps, weight_decay, mask) -> Optimizer:
    lr = _learning_rate(name, learning_rate)
    b1 = _number(name, "b1", b1, 0.0, 1.0)
    b2 = _number(name, "b2", b2, 0.0, 1.0)
    eps = _number(name, "eps", eps, 0.0, math.inf)
    wd = _number(name, "weight_decay", weight_decay, 0.0, math.inf)
    if mask is not None and not callable(mask):
        _mask_leaves(name, mask, None)  # its leaves are checked now; its structure at the first update

    def init(params) -> AdamState:
        zeros = tree.map(zeros_like, _rebuild(params, _float_leaves(f"{name}.init", params, "params")))
        return AdamState(_zero_count(), zeros, zeros)

    def update(grads, state, params) -> tuple[Any, AdamState]:
        p, g, (mu, nu) = _operands(name, grads, state, params, AdamState, ("mu", "nu"))
        rate, count = lr(state.count), state.count + 1
        decay = [wd] * len(p) if mask is None else [wd if m else 0.0 for m in _mask_leaves(name, mask, params)]
        new_p, new_mu, new_nu = [], [], []
        for pi, gi, mi, vi, wdi in zip(p, g, mu, nu, decay):
            dt = _compute_dtype(pi)
            gi, pc = _cast(gi, dt), _cast(pi, dt)
            # Sums in optax's operand order: XLA fuses a multiply-add into one rounding, and which
            # product it fuses follows the order, so this order is what gives optax's bits.
            m = (1.0 - b1) * gi + b1 * _cast(mi, dt)
            v = (1.0 - b2) * (gi * gi) + b2 * _cast(vi, dt)
            step = (m / _bias_correction(b1, count, dt)) / (sqrt(v / _bias_correction(b2, count, dt)) + eps)
            if wdi:
                step = step + wdi * pc
            new_p.append(astype(pc - _rate(rate, dt) * step, pi.dtype))
            new_mu.append(astype(m, pi.dtype))
            new_nu.append(astype(v, pi.dtype))
        return _rebuild(params, new_p), AdamState(count, _rebuild(params, new_mu), _rebuild(params, new_nu))

    return Optimizer(name, init, update)


# ---------------------------------------------------------------- learning-rate schedules

# Each is optax's function of the same name (optax/schedules/_schedule.py and _join.py), with
# the same operations in the same order on the int32 step count, promoted as JAX promotes it
# (a Python number meeting it gives float32, float64 in x64 mode): the rates are optax's bit
# for bit. A count that is a Python int is taken as JAX takes one.


def constant_schedule(value) -> Callable:
    """The rate `value` at every step.

    >>> import remat as rm
    >>> rm.optim.constant_schedule(0.1)(rm.asarray(7))
    0.1
    """
    return lambda count: value


def polynomial_schedule(init_value, end_value, power, transition_steps: int, transition_begin: int = 0) -> Callable:
    """From `init_value` to `end_value` over `transition_steps` steps after `transition_begin`:
    `(init - end) (1 - k / transition_steps)^power + end`, k the steps since the beginning,
    clipped to [0, transition_steps]. A non-positive `transition_steps` gives `init_value`.

    >>> import remat as rm
    >>> f = rm.optim.polynomial_schedule(1.0, 0.01, power=2, transition_steps=100, transition_begin=5)
    >>> [round(float(f(rm.asarray(k))), 4) for k in (0, 6, 104, 110)]
    [1.0, 0.9803, 0.0101, 0.01]
    """
    steps = _steps("polynomial_schedule", "transition_steps", transition_steps)
    begin = max(_steps("polynomial_schedule", "transition_begin", transition_begin), 0)  # optax: below 0 is 0
    if steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        k = clip(asarray(count) - begin, 0, steps)
        frac = 1 - _over(k, steps)
        return (init_value - end_value) * _power(frac, power) + end_value

    return schedule


def linear_schedule(init_value, end_value, transition_steps: int, transition_begin: int = 0) -> Callable:
    """From `init_value` to `end_value` linearly over `transition_steps` steps (a polynomial
    schedule of power 1), starting after `transition_begin` steps.

    >>> import remat as rm
    >>> [float(rm.optim.linear_schedule(0.0, 1.0, 4)(rm.asarray(k))) for k in (0, 2, 9)]
    [0.0, 0.5, 1.0]
    """
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def cosine_decay_schedule(init_value, decay_steps: int, alpha=0.0, exponent=1.0) -> Callable:
    """Half a cosine from `init_value` down to `alpha * init_value` over `decay_steps` steps
    (Loshchilov and Hutter 2017), raised to `exponent`, then constant.

    >>> import remat as rm
    >>> [round(float(rm.optim.cosine_decay_schedule(1.0, 4)(rm.asarray(k))), 4) for k in (0, 2, 4, 9)]
    [1.0, 0.5, 0.0, 0.0]
    """
    steps = _steps("cosine_decay_schedule", "decay_steps", decay_steps)
    if steps <= 0:
        raise ArgumentValueError(f"cosine_decay_schedule: decay_steps must be positive, got {decay_steps!r}")
    steps = float(steps)  # optax: a Python int enters as a float (no int32 overflow)

    def schedule(count):
        k = minimum(asarray(float(count) if isinstance(count, int) else count), steps)
        cosine = 0.5 * (1 + cos(math.pi * k / steps))
        return init_value * ((1 - alpha) * _power(cosine, exponent) + alpha)

    return schedule


def exponential_decay(init_value, transition_steps: int, decay_rate: float, transition_begin: int = 0,
                      staircase: bool = False, end_value=None) -> Callable:
    """`init_value * decay_rate^(k / transition_steps)`, k the steps since `transition_begin`
    (the exponent floored with `staircase`), bounded by `end_value` if given; `init_value`
    before the beginning, and throughout if `transition_steps` is not positive or the rate 0.

    >>> import remat as rm
    >>> f = rm.optim.exponential_decay(1.0, transition_steps=2, decay_rate=0.5, staircase=True)
    >>> [float(f(rm.asarray(k))) for k in (0, 1, 2, 5)]
    [1.0, 1.0, 0.5, 0.25]
    """
    steps = _steps("exponential_decay", "transition_steps", transition_steps)
    begin = max(_steps("exponential_decay", "transition_begin", transition_begin), 0)
    if steps <= 0 or decay_rate == 0:
        return constant_schedule(init_value)
    bound = None if end_value is None else (maximum if decay_rate < 1.0 else minimum)

    def schedule(count):
        k = asarray(count) - begin
        p = _over(k, steps)
        if staircase:
            p = floor(p)
        value = where(k <= 0, init_value, init_value * decay_rate**p)
        return value if bound is None else bound(value, end_value)

    return schedule


def join_schedules(schedules, boundaries) -> Callable:
    """`schedules[0]` until `boundaries[0]`, then `schedules[1]` counted from that boundary, and
    so on (one boundary fewer than schedules).

    >>> import remat as rm
    >>> f = rm.optim.join_schedules([rm.optim.constant_schedule(1.0), rm.optim.linear_schedule(1.0, 0.0, 4)], [2])
    >>> [float(f(rm.asarray(k))) for k in (0, 2, 4)]
    [1.0, 1.0, 0.5]
    """
    schedules, boundaries = list(schedules), list(boundaries)
    if len(boundaries) != len(schedules) - 1:
        raise ArgumentValueError(f"join_schedules: {len(schedules)} schedules need {len(schedules) - 1} boundaries, "
                                 f"got {len(boundaries)}")
    for k, fn in enumerate(schedules):
        if not callable(fn):
            raise ArgumentTypeError(f"join_schedules: schedules[{k}] must be a function of the step count, "
                                    f"got {short_repr(fn)}")

    def schedule(count):
        count = asarray(count)
        out = schedules[0](count)
        for boundary, fn in zip(boundaries, schedules[1:]):
            out = where(count < boundary, out, fn(count - boundary))
        return out

    return schedule


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps: int, decay_steps: int, end_value=0.0,
                                 exponent=1.0) -> Callable:
    """A linear warm-up from `init_value` to `peak_value` over `warmup_steps`, then a cosine
    decay to `end_value` at step `decay_steps` (counted from the start, warm-up included).

    >>> import remat as rm
    >>> f = rm.optim.warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=2, decay_steps=6)
    >>> [round(float(f(rm.asarray(k))), 4) for k in (0, 1, 2, 4, 6)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
                          [warmup_steps])


def _steps(name: str, what: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name}: {what} must be an int (a number of steps), got {short_repr(value)}")
    return int(value)


def _over(k: Tensor, steps: int) -> Tensor:
    """`k / steps` as jnp.true_divide divides an integer `k` (an int32 count) by an int: in
    float32, float64 only for int64, in x64 mode too."""
    if not dtypes.is_float(k.dtype):
        k = astype(k, dtypes.float64 if k.dtype.itemsize == 8 else dtypes.float32)
    return k / steps


def _power(x: Tensor, power):
    """`x ** power` as jnp.power computes it: an int power by JAX's binary exponentiation (its
    `integer_pow`: x ** 2 is x * x), another one by `pow`."""
    if isinstance(power, (bool, np.bool_)) or not isinstance(power, numbers.Integral):
        return x**power
    n = int(power)
    if n < 0:
        return 1.0 / _power(x, -n)
    acc = None
    while n:
        if n & 1:
            acc = x if acc is None else acc * x
        n >>= 1
        if n:
            x = x * x
    return ones_like(x) if acc is None else acc


# ---------------------------------------------------------------- hyperparameters


def _number(name: str, what: str, value, low: float, high: float, high_open: bool = True) -> float:
    """`value` as a float in [low, high) (or [low, high] when not `high_open`), else an error
    naming the optimizer, the hyperparameter and the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name}: {what} must be a number, got {short_repr(value)}")
    value = float(value)
    inside = low <= value < high if high_open else low <= value <= high
    if not inside:
        top = ")" if high_open else "]"
        span = f"a finite number >= {low:g}" if math.isinf(high) else f"in [{low:g}, {high:g}{top}"
        raise ArgumentValueError(f"{name}: {what} must be {span}, got {value!r}")
    return value


def _learning_rate(name: str, value) -> Callable:
    """The learning rate as a function of the step count: a schedule as given, a number as a
    constant (checked to be finite and non-negative)."""
    if callable(value):
        return value
    rate = _number(name, "learning_rate", value, 0.0, math.inf)
    return lambda count: rate


# ---------------------------------------------------------------- pytrees


def _float_leaves(where: str, params, what: str) -> list[Tensor]:
    leaves, _ = tree.flatten(params)
    paths = leaf_paths(params, what)
    out = []
    for path, leaf in zip(paths, leaves):
        if not is_tensor_like(leaf):
            raise ArgumentTypeError(f"{where}: {path} is {describe(leaf)}, not an array")
        t = asarray(leaf)
        if not dtypes.is_float(t.dtype):
            raise DTypeError(f"{where}: {path} has dtype {t.dtype}; optimizers update float parameters only "
                             "(keep integer values out of the params tree)")
        out.append(t)
    return out


def _operands(name: str, grads, state, params, state_type, fields: tuple[str, ...]):
    """The leaves of params, grads and the state's per-parameter trees, checked to match."""
    where = f"{name}.update"
    if not isinstance(state, state_type):
        raise ArgumentTypeError(f"{where}: state must be the {state_type.__name__} that {name}.init gives, "
                                f"got {short_repr(state)}; call opt.update(grads, state, params)")
    p = _float_leaves(where, params, "params")
    structure = tree.flatten(params)[1]
    _same_structure(where, "grads", grads, structure)
    g = _float_leaves(where, grads, "grads")
    per_param = []
    for f in fields:
        _same_structure(where, f"state.{f}", getattr(state, f), structure)
        per_param.append([asarray(x) for x in tree.leaves(getattr(state, f))])
    for path, pi, gi in zip(leaf_paths(params, ""), p, g):
        if gi.shape != pi.shape:
            raise ShapeError(f"{where}: grads{path} has shape {gi.shape} but params{path} has shape {pi.shape}")
    return p, g, per_param


def _same_structure(where: str, what: str, value, structure) -> None:
    got = tree.flatten(value)[1]
    if got != structure:
        raise ArgumentValueError(f"{where}: {what} has the structure {got!r} but params have {structure!r}; "
                                 "pass trees of the same shape")


def _mask_leaves(name: str, mask, params) -> list[bool]:
    """The weight-decay mask as one bool per parameter leaf."""
    value = mask(params) if callable(mask) else mask
    leaves = tree.leaves(value)
    bad = [x for x in leaves if not isinstance(x, (bool, np.bool_))]
    if bad:
        raise ArgumentTypeError(f"{name}: mask leaves must be True or False, got {short_repr(bad[0])}")
    if params is not None:
        _same_structure(f"{name}.update", "mask", value, tree.flatten(params)[1])
    return [bool(x) for x in leaves]


def _rebuild(params, leaves: list):
    return tree.unflatten(tree.flatten(params)[1], leaves)


# ---------------------------------------------------------------- arithmetic


def _zero_count() -> Tensor:
    return asarray(0, dtypes.int32)


def _compute_dtype(p: Tensor) -> np.dtype:
    """float32, or float64 for float64 parameters: float16 and bfloat16 steps are worked out in
    float32 (1 - 0.999**t is 0 in bfloat16 until t = 128) and rounded once."""
    return dtypes.result_type(p.dtype, dtypes.float32)


def _cast(x: Tensor, dtype: np.dtype) -> Tensor:
    return x if x.dtype == dtype else astype(x, dtype)


def _bias_correction(decay: float, count: Tensor, dt: np.dtype) -> Tensor:
    """1 - decay^t, as optax computes it: the power of the int32 count in the default float
    (float64 in x64 mode) and only then cast, so that in x64 mode float32 parameters get the
    float64 correction rounded once, as optax gives them; float64 parameters get float64."""
    wide = dtypes.result_type(dt, dtypes.float64 if dtypes.x64_enabled() else dtypes.float32)
    return _cast(1.0 - decay ** astype(count, wide), dt)


def _rate(rate, dt: np.dtype):
    """A schedule's rate in the compute dtype, as optax casts the step size to the update's
    (a float64 rate would otherwise widen a float32 step and round it differently)."""
    return rate if isinstance(rate, numbers.Real) else _cast(asarray(rate), dt)
