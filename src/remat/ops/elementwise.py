"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons, where, astype.

Each VJP carries its derivation in one line. Binary rules un-broadcast their cotangents back to
the operand shapes.
"""

from __future__ import annotations

import builtins

import numpy as np

from remat import dtypes, values
from remat.core import NOT_DIFFERENTIABLE, Aval, declare
from remat.errors import ArgumentTypeError, DTypeError, ShapeError
from remat.ops import reduce as _reduce  # modules, not names: an import cycle (ops/__init__.py)
from remat.ops import shape as _shape
from remat.tensor import Tensor, is_weak
from remat.trace import asarray, bind

# ---------------------------------------------------------------- shape/dtype rules


def _float_unary(x: Aval) -> Aval:
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"expects a float operand, got {x.dtype}")
    return x


def _same_unary(x: Aval) -> Aval:
    return x


def _numeric_unary(x: Aval) -> Aval:
    if x.dtype == dtypes.bool_:
        raise DTypeError("expects a numeric operand, got bool")
    return x


def _bool_unary(x: Aval) -> Aval:
    if x.dtype != dtypes.bool_:
        raise DTypeError(f"expects a bool operand, got {x.dtype}")
    return x


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of shapes; a ShapeError names them when they don't broadcast."""
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes[1:]):  # most operands of a traced step
        return first
    ndim = builtins.max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded):
        big = {n for n in sizes if n != 1}
        if len(big) > 1:
            raise ShapeError(f"shapes {' and '.join(map(str, map(tuple, shapes)))} do not broadcast")
        out.append(big.pop() if big else 1)
    return tuple(out)


def broadcast_shapes_for(what: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """`broadcast_shapes` for the function `what`, whose name its ShapeError starts with."""
    try:
        return broadcast_shapes(*shapes)
    except ShapeError as e:
        raise ShapeError(f"{what}: {e.message}") from None


def _binary_rule(result: str):
    def rule(x: Aval, y: Aval) -> Aval:
        if x.dtype != y.dtype:
            raise DTypeError(f"operands must share a dtype, got {x.dtype} and {y.dtype}")
        if result == "float" and not dtypes.is_float(x.dtype):
            raise DTypeError(f"expects float operands, got {x.dtype}")
        if result == "numeric" and x.dtype == dtypes.bool_:
            raise DTypeError("expects numeric operands, got bool")
        if result == "bool_in" and x.dtype != dtypes.bool_:
            raise DTypeError(f"expects bool operands, got {x.dtype}")
        dtype = dtypes.bool_ if result in ("bool", "bool_in") else x.dtype
        return Aval(broadcast_shapes(x.shape, y.shape), dtype)

    return rule


def _where_rule(c: Aval, x: Aval, y: Aval) -> Aval:
    if c.dtype != dtypes.bool_:
        raise DTypeError(f"condition must be bool, got {c.dtype}")
    if x.dtype != y.dtype:
        raise DTypeError(f"branches must share a dtype, got {x.dtype} and {y.dtype}")
    return Aval(broadcast_shapes(c.shape, x.shape, y.shape), x.dtype)


def _convert_rule(x: Aval, *, dtype: np.dtype) -> Aval:
    return Aval(x.shape, dtype)


# ---------------------------------------------------------------- helpers for VJP rules


def unbroadcast(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum `g` over the axes broadcasting added or stretched, so it has `shape` again."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1
    )
    return _shape.reshape(_reduce.sum(g, axis=axes), shape)


def _ub(rule):
    """Wrap a binary VJP so each cotangent is un-broadcast to its operand's shape."""

    def vjp(g, x, y, out):
        gx, gy = rule(g, x, y, out)
        return (
            None if gx is None else unbroadcast(gx, x.shape),
            None if gy is None else unbroadcast(gy, y.shape),
        )

    return vjp


# ---------------------------------------------------------------- helpers for JVP rules


def _unary_jvp(d):
    """A unary JVP from `d(t, x, out)`, the tangent of the output for a tangent t of x."""
    return lambda ts, x, out: d(ts[0], x, out)


def _plus(a, b):
    """The sum of two tangents, None standing for a zero one."""
    return b if a is None else a if b is None else a + b


def _binary_jvp(dx, dy):
    """A binary JVP from each operand's share `d(t, x, y, out)`, broadcast to the output."""

    def jvp(ts, x, y, out):
        parts = [None if t is None else _shape.broadcast_to(d(t, x, y, out), out.shape) for t, d in zip(ts, (dx, dy))]
        return _plus(*parts)

    return jvp


def _first(t, x, y, out):
    return t


# ---------------------------------------------------------------- declarations

_neg = declare("negative", _numeric_unary, lambda g, x, out: (negative(g),),  # d(-x) = -dx
               jvp=_unary_jvp(lambda t, x, out: negative(t)))
# d|x| = sign(x) dx. NOTE: at x = 0 the subgradient taken is +1 (as in JAX), not sign(0) = 0.
_abs = declare("abs", _same_unary, lambda g, x, out: (where(x >= 0, g, -g),),
               jvp=_unary_jvp(lambda t, x, out: where(x >= 0, t, -t)))
_sign = declare("sign", _numeric_unary, NOT_DIFFERENTIABLE)  # zero almost everywhere
_exp = declare("exp", _float_unary, lambda g, x, out: (g * out,),  # d e^x = e^x dx
               jvp=_unary_jvp(lambda t, x, out: t * out), traits={"transcendental"})
_log = declare("log", _float_unary, lambda g, x, out: (g / x,),  # d log x = dx / x
               jvp=_unary_jvp(lambda t, x, out: t / x), traits={"transcendental"})
_log1p = declare("log1p", _float_unary, lambda g, x, out: (g / (1.0 + x),),  # dx / (1 + x)
                 jvp=_unary_jvp(lambda t, x, out: t / (1.0 + x)), traits={"transcendental"})
_sqrt = declare("sqrt", _float_unary, lambda g, x, out: (g * 0.5 / out,),  # dx / (2 sqrt x)
                jvp=_unary_jvp(lambda t, x, out: t * 0.5 / out), traits={"transcendental"})
_sin = declare("sin", _float_unary, lambda g, x, out: (g * cos(x),),  # d sin x = cos x dx
               jvp=_unary_jvp(lambda t, x, out: t * cos(x)), traits={"transcendental"})
_cos = declare("cos", _float_unary, lambda g, x, out: (-g * sin(x),),  # d cos x = -sin x dx
               jvp=_unary_jvp(lambda t, x, out: -t * sin(x)), traits={"transcendental"})
_tanh = declare("tanh", _float_unary, lambda g, x, out: (g * (1.0 - out * out),),  # (1 - tanh²) dx
                jvp=_unary_jvp(lambda t, x, out: t * (1.0 - out * out)), traits={"transcendental"})
_not = declare("logical_not", _bool_unary, NOT_DIFFERENTIABLE)

_add = declare("add", _binary_rule("same"), _ub(lambda g, x, y, out: (g, g)), jvp=_binary_jvp(_first, _first))
_sub = declare("subtract", _binary_rule("numeric"), _ub(lambda g, x, y, out: (g, -g)),
               jvp=_binary_jvp(_first, lambda t, x, y, out: -t))
# d(xy) = y dx + x dy
_mul = declare("multiply", _binary_rule("same"), _ub(lambda g, x, y, out: (g * y, g * x)),
               jvp=_binary_jvp(lambda t, x, y, out: t * y, lambda t, x, y, out: x * t))
# d(x/y) = dx / y - x dy / y²
_div = declare("divide", _binary_rule("same"), _ub(lambda g, x, y, out: (g / y, -g * out / y)),
               jvp=_binary_jvp(lambda t, x, y, out: t / y, lambda t, x, y, out: -t * out / y))


def _pow_vjp(g, x, y, out):
    # d(x^y) = y x^(y-1) dx + log(x) x^y dy; the dy term is taken as 0 where x <= 0.
    gx = g * y * pow(x, y - 1.0)
    safe_log = log(where(x > 0, x, 1.0))
    gy = where(x > 0, g * out * safe_log, 0.0)
    return gx, gy


_pow = declare("pow", _binary_rule("float"), _ub(_pow_vjp), jvp=_binary_jvp(
    lambda t, x, y, out: t * y * pow(x, y - 1.0),
    lambda t, x, y, out: where(x > 0, t * out * log(where(x > 0, x, 1.0)), 0.0)),  # as the VJP
               traits={"transcendental"})


def _max_min_vjp(pick):
    # The winner takes the gradient; ties split it evenly (as in JAX).
    def rule(g, x, y, out):
        share = where(x == y, 0.5, where(pick(x, y), 1.0, 0.0)).astype(g.dtype)
        return g * share, g * (1.0 - share)

    return _ub(rule)


def _max_min_jvp(pick):
    # The winner's tangent; at a tie the mean of both, the transpose of the VJP's even split.
    def share(x, y, t):
        return where(x == y, 0.5, where(pick(x, y), 1.0, 0.0)).astype(t.dtype)

    return _binary_jvp(lambda t, x, y, out: t * share(x, y, t), lambda t, x, y, out: t * (1.0 - share(x, y, t)))


_maximum = declare("maximum", _binary_rule("same"), _max_min_vjp(lambda x, y: x > y),
                   jvp=_max_min_jvp(lambda x, y: x > y))
_minimum = declare("minimum", _binary_rule("same"), _max_min_vjp(lambda x, y: x < y),
                   jvp=_max_min_jvp(lambda x, y: x < y))

_COMPARISONS = {
    name: declare(name, _binary_rule("bool"), NOT_DIFFERENTIABLE)
    for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
}
_and = declare("logical_and", _binary_rule("bool_in"), NOT_DIFFERENTIABLE)
_or = declare("logical_or", _binary_rule("bool_in"), NOT_DIFFERENTIABLE)


def _where_vjp(g, c, x, y, out):
    # The cotangent goes to the branch that was chosen.
    zero = zeros_scalar(g.dtype)
    return None, unbroadcast(where(c, g, zero), x.shape), unbroadcast(where(c, zero, g), y.shape)


def _where_jvp(ts, c, x, y, out):
    # The tangent of the branch chosen.
    zero = zeros_scalar(out.dtype)
    tx, ty = (zero if t is None else t for t in ts[1:])
    return _shape.broadcast_to(where(c, tx, ty), out.shape)


_where = declare("where", _where_rule, _where_vjp, jvp=_where_jvp)


def _convert_vjp(g, x, out, *, dtype):
    # Casting is linear: the cotangent is cast back (integers take no gradient).
    return (g.astype(x.dtype) if dtypes.is_float(x.dtype) else None,)


_convert = declare("convert", _convert_rule, _convert_vjp,  # linear: the tangent is cast too
                   jvp=lambda ts, x, out, *, dtype: ts[0].astype(dtype) if dtypes.is_float(dtype) else None,
                   traits={"layout"})


# ---------------------------------------------------------------- front end


def zeros_scalar(dtype) -> Tensor:
    return asarray(np.zeros((), dtype))


def _operand(x) -> Tensor | object:
    """A tensor, or a Python scalar left weak until it meets the other operand."""
    return x if dtypes.is_weak(x) else asarray(x)


def promote(*args, what: str = "promote") -> list[Tensor]:
    """Bring tensors and weak operands (Python scalars, weakly typed tensors) to one dtype. A
    scalar that dtype cannot hold (`int32_tensor + 2**40`, `float32_tensor * 1e300`) is a
    ValueOverflow of the op `what`, as in JAX: the tensor is not widened to fit it. Weak
    operands alone give weak tensors."""
    ops = [_operand(a) for a in args]
    strong = [o.dtype for o in ops if not is_weak(o)]
    if strong:
        dtype = dtypes.result_type(*strong)
        for o in ops:
            if is_weak(o):
                dtype = dtypes.weak_result_type(dtype, o)
        fix = values.CAST_OPERAND
    else:
        dtype = dtypes.result_type(*(dtypes.scalar_dtype(o) for o in ops))
        fix = 'make it a tensor first: rm.asarray(..., dtype="{dtype}")'
    weak = not strong and any(isinstance(o, Tensor) for o in ops)  # a weak tensor's kind stays weak
    return [_weak(o, dtype, what, fix, weak) if is_weak(o) else asarray(o, dtype) for o in ops]


def _weak(operand, dtype: np.dtype, what: str, fix: str, weak: bool) -> Tensor:
    if isinstance(operand, Tensor):
        return (operand if operand.dtype == dtype else operand.astype(dtype))._weakly_typed(weak)
    t = Tensor._concrete(values.convert(np.asarray(operand), dtype, what, fix, python=True))
    return t._weakly_typed(weak)


def _to_float(x) -> Tensor:
    x = asarray(x)
    return x if dtypes.is_float(x.dtype) else x.astype(dtypes.DEFAULT_FLOAT)._weakly_typed(x.weak_type)


def _float_fn(op, name):
    def fn(x) -> Tensor:
        return bind(op, _to_float(x))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise `{name}` (integer inputs are promoted to float32)."
    return fn


def _binary_fn(op, name, to_float=False):
    def fn(x, y) -> Tensor:
        a, b = promote(x, y, what=name)
        if to_float and not dtypes.is_float(a.dtype):
            a, b = a.astype(dtypes.DEFAULT_FLOAT), b.astype(dtypes.DEFAULT_FLOAT)
        return bind(op, a, b)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise `{name}` with NumPy broadcasting and dtype promotion."
    return fn


exp = _float_fn(_exp, "exp")
log = _float_fn(_log, "log")
log1p = _float_fn(_log1p, "log1p")
sqrt = _float_fn(_sqrt, "sqrt")
sin = _float_fn(_sin, "sin")
cos = _float_fn(_cos, "cos")
tanh = _float_fn(_tanh, "tanh")

add = _binary_fn(_add, "add")
subtract = _binary_fn(_sub, "subtract")
multiply = _binary_fn(_mul, "multiply")
divide = _binary_fn(_div, "divide", to_float=True)
pow = _binary_fn(_pow, "pow", to_float=True)
maximum = _binary_fn(_maximum, "maximum")
minimum = _binary_fn(_minimum, "minimum")
equal = _binary_fn(_COMPARISONS["equal"], "equal")
not_equal = _binary_fn(_COMPARISONS["not_equal"], "not_equal")
less = _binary_fn(_COMPARISONS["less"], "less")
less_equal = _binary_fn(_COMPARISONS["less_equal"], "less_equal")
greater = _binary_fn(_COMPARISONS["greater"], "greater")
greater_equal = _binary_fn(_COMPARISONS["greater_equal"], "greater_equal")


def negative(x) -> Tensor:
    """Elementwise `-x`."""
    return bind(_neg, asarray(x))


def abs(x) -> Tensor:
    """Elementwise absolute value."""
    return bind(_abs, asarray(x))


def sign(x) -> Tensor:
    """Elementwise sign (-1, 0 or 1); its gradient is zero."""
    return bind(_sign, asarray(x))


def square(x) -> Tensor:
    """Elementwise `x * x`."""
    return multiply(x, x)


def clip(x, min=None, max=None, *, a_min=None, a_max=None) -> Tensor:
    """Limit `x` to [min, max]; either bound may be None. `a_min` and `a_max` are NumPy's older
    names for them, accepted as jnp.clip accepts them.

    >>> import remat as rm
    >>> rm.clip(rm.asarray([-2.0, 0.5, 3.0]), a_min=0.0, max=1.0)
    Tensor([0. , 0.5, 1. ], dtype=float32)
    """
    min, max = _bound("min", min, a_min), _bound("max", max, a_max)
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return asarray(x)


def _bound(name: str, value, alias):
    if alias is None:
        return value
    if value is not None:
        raise ArgumentTypeError(f"clip: got both {name}= and a_{name}=, which are two names for one bound; pass one")
    return alias


def logical_not(x) -> Tensor:
    """Elementwise `not` (operands are cast to bool)."""
    return bind(_not, astype(x, dtypes.bool_))


def logical_and(x, y) -> Tensor:
    """Elementwise `and` (operands are cast to bool)."""
    return bind(_and, astype(x, dtypes.bool_), astype(y, dtypes.bool_))


def logical_or(x, y) -> Tensor:
    """Elementwise `or` (operands are cast to bool)."""
    return bind(_or, astype(x, dtypes.bool_), astype(y, dtypes.bool_))


def where(condition, x, y) -> Tensor:
    """`x` where `condition` holds, else `y`, broadcasting all three.

    >>> import remat as rm
    >>> rm.where(rm.asarray([True, False]), 1.0, 0.0)
    Tensor([1., 0.], dtype=float32)
    """
    c = astype(condition, dtypes.bool_)
    a, b = promote(x, y, what="where")
    return bind(_where, c, a, b)


def astype(x, dtype) -> Tensor:
    """`x` converted to `dtype`, as a cast: floats truncate toward zero when made integers, and
    values out of the target's range are not checked (they cannot be when `x` is traced).
    `rm.asarray(x, dtype)` checks a concrete `x`'s values."""
    x = asarray(x)
    dtype = dtypes.canonical(dtype, "astype")
    if x.dtype == dtype:
        return x._weakly_typed(False)  # a dtype asked for is strong, as in JAX
    return bind(_convert, x, dtype=dtype)
