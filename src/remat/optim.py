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
from remat.ops import astype, sqrt, zeros_like
from remat.trace import Tensor, asarray, is_tensor_like


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
                b = momentum * _cast(buf[i], dt) + gi
                new_buf.append(astype(b, pi.dtype))
                step = gi + momentum * b if nesterov else b
            new_p.append(astype(_cast(pi, dt) - rate * step, pi.dtype))
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
            t = astype(count, dt)
            gi, pc = _cast(gi, dt), _cast(pi, dt)
            m = b1 * _cast(mi, dt) + (1.0 - b1) * gi
            v = b2 * _cast(vi, dt) + (1.0 - b2) * (gi * gi)
            step = (m / (1.0 - b1**t)) / (sqrt(v / (1.0 - b2**t)) + eps)
            if wdi:
                step = step + wdi * pc
            new_p.append(astype(pc - rate * step, pi.dtype))
            new_mu.append(astype(m, pi.dtype))
            new_nu.append(astype(v, pi.dtype))
        return _rebuild(params, new_p), AdamState(count, _rebuild(params, new_mu), _rebuild(params, new_nu))

    return Optimizer(name, init, update)


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
