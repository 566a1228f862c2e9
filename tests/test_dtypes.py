"""dtypes: defaults for Python values, weak Python scalars, promotion between tensors (the
JAX-like lattice documented in remat/dtypes.py), and dtype errors."""

from __future__ import annotations

import numpy as np
import pytest

import remat as rm
from remat import dtypes

F32, F64, I32, I64, BOOL = (np.dtype(d) for d in ("float32", "float64", "int32", "int64", "bool"))
F16, BF16 = np.dtype("float16"), rm.bfloat16
ALL = (BOOL, I32, I64, F16, BF16, F32, F64)


def tensor(dtype, shape=(3,)):
    return rm.asarray(np.ones(shape, dtype))


# ---------------------------------------------------------------- defaults


@pytest.mark.parametrize(
    "value,dtype",
    [
        (1.5, F32), (2, I32), (True, BOOL), ([1.0, 2.0], F32), ([[1, 2], [3, 4]], I32),
        ([True, False], BOOL), ((1, 2.5), F32),
        (np.ones(2, np.float64), F64), (np.ones(2, np.int64), I64), (np.ones(2, np.float32), F32),
        (np.float64(1.0), F64), (np.int64(3), I64), (np.bool_(True), BOOL),
        (np.ones(2, np.float16), F16), (np.ones(2, BF16), BF16), (np.float16(2.5), F16),
    ],
)
def test_asarray_default_dtypes(value, dtype):
    t = rm.asarray(value)
    assert t.dtype == dtype
    np.testing.assert_array_equal(np.asarray(t), np.asarray(value).astype(dtype))


@pytest.mark.parametrize("target", ["float32", "float64", "int32", "int64", "bool", np.float64, F32, "float16",
                                    "bfloat16", np.float16, BF16])
def test_asarray_with_an_explicit_dtype(target):
    t = rm.asarray([0.0, 1.0, 2.0], dtype=target)
    assert t.dtype == np.dtype(target)
    np.testing.assert_array_equal(np.asarray(t), np.array([0.0, 1.0, 2.0]).astype(target))


def test_dtype_is_a_numpy_dtype():
    t = rm.ones((2,))
    assert t.dtype == np.float32
    assert isinstance(t.dtype, np.dtype)
    assert rm.float32 == np.float32 and rm.int64 == np.int64 and rm.bool_ == np.bool_


# ---------------------------------------------------------------- weak Python scalars

WEAK = [
    (F32, 2.0, F32), (F32, 2, F32), (F32, True, F32),
    (F64, 2.0, F64), (F64, 2, F64),
    (I32, 2, I32), (I64, 2, I64), (I32, True, I32),
    (I32, 2.5, F32), (I64, 2.5, F32),  # a float scalar meets ints: the default float, not f64
    (BOOL, 1, I32), (BOOL, 1.5, F32), (BOOL, True, BOOL),
    (F16, 2.0, F16), (F16, 2, F16), (F16, True, F16), (BF16, 2.0, BF16), (BF16, 2, BF16), (BF16, True, BF16),
]


@pytest.mark.parametrize("dtype,scalar,expected", WEAK, ids=lambda v: repr(v))
def test_weak_python_scalars_take_the_tensor_dtype(dtype, scalar, expected):
    x = tensor(dtype)
    want = np.ones(3, expected) + np.array(scalar, expected)
    for out in (x + scalar, scalar + x, rm.add(x, scalar)):
        assert out.dtype == expected
        np.testing.assert_array_equal(np.asarray(out), want)
    assert (x * scalar).dtype == rm.maximum(scalar, x).dtype == expected
    assert rm.where(rm.asarray([True, False, True]), x, scalar).dtype == expected


@pytest.mark.parametrize("dtype,scalar,expected", WEAK, ids=lambda v: repr(v))
def test_weak_python_scalars_inside_jit(dtype, scalar, expected):
    g = rm.make_graph(lambda x: x + scalar)(tensor(dtype))
    assert g.outputs[0].dtype == expected
    out = rm.jit(lambda x: scalar + x)(tensor(dtype))
    assert out.dtype == expected
    np.testing.assert_array_equal(np.asarray(out), np.ones(3, expected) + np.array(scalar, expected))


def test_float32_times_two_stays_float32():
    x = rm.asarray(np.array([1.5, 2.5], np.float32))
    y = x * 2.0
    assert y.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(y), np.array([3.0, 5.0], np.float32))
    assert (2.0 * x).dtype == (x / 2.0).dtype == (x - 2.0).dtype == (x**2.0).dtype == np.float32
    assert rm.jit(lambda v: v * 2.0 + 1)(x).dtype == np.float32


def test_weak_scalar_printed_in_graph_as_a_constant_of_the_tensor_dtype():
    g = rm.make_graph(lambda x: x * 2)(rm.ones((3,)))
    assert str(g) == "graph(a:f32[3]) {\n  b:f32[3] = multiply a 2.0\n  return b\n}"


def test_two_python_scalars_give_default_dtypes():
    assert rm.add(1, 2).dtype == I32
    assert rm.add(1, 2.0).dtype == F32
    assert rm.multiply(True, 2.0).dtype == F32
    assert rm.where(True, 1, 2).dtype == I32
    assert int(rm.add(1, 2)) == 3


# ---------------------------------------------------------------- promotion between tensors

STRONG = [
    (F32, F64, F64), (I32, I64, I64), (I32, F32, F32), (I64, F32, F32), (I32, F64, F64),
    (I64, F64, F64), (BOOL, I32, I32), (BOOL, I64, I64), (BOOL, F32, F32), (BOOL, BOOL, BOOL),
    (F32, F32, F32), (I64, I64, I64),
    (F16, BF16, F32), (F16, F32, F32), (BF16, F32, F32), (F16, F64, F64), (BF16, F64, F64), (I32, F16, F16),
    (I64, F16, F16), (I32, BF16, BF16), (I64, BF16, BF16), (BOOL, F16, F16), (BOOL, BF16, BF16),
    (F16, F16, F16), (BF16, BF16, BF16),
]


@pytest.mark.parametrize("a,b,expected", STRONG, ids=str)
def test_tensor_promotion(a, b, expected):
    x, y = tensor(a), tensor(b)
    for out in (x + y, y + x, rm.maximum(x, y), rm.where(rm.asarray(True), x, y)):
        assert out.dtype == expected
    assert rm.concat([x, y]).dtype == expected
    assert rm.stack([x, y]).dtype == expected
    assert (x == y).dtype == BOOL
    assert dtypes.result_type(a, b) == expected


@pytest.mark.parametrize("a,b,expected", [s for s in STRONG if s[2] != BOOL], ids=str)
def test_tensor_promotion_inside_jit_and_in_matmul(a, b, expected):
    x, y = tensor(a, (2, 2)), tensor(b, (2, 2))
    g = rm.make_graph(lambda p, q: p * q)(x, y)
    assert g.outputs[0].dtype == expected
    out = rm.jit(lambda p, q: p @ q)(x, y)
    assert out.dtype == expected
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), 2))


@pytest.mark.parametrize("b", ALL, ids=str)
@pytest.mark.parametrize("a", ALL, ids=str)
def test_promotion_between_tensors_is_jax_promote_types(a, b):
    """Every pair of the seven dtypes promotes as `jnp.promote_types` says (bf16 + f16 -> f32)."""
    import jax.numpy as jnp

    expected = np.dtype(jnp.promote_types(a, b))
    assert dtypes.result_type(a, b) == expected
    x, y = tensor(a), tensor(b)
    assert rm.where(rm.asarray(True), x, y).dtype == rm.concat([x, y]).dtype == expected
    if expected != BOOL:
        assert (x + y).dtype == rm.jit(lambda p, q: p * q, backend="xla")(x, y).dtype == expected


@pytest.mark.parametrize("scalar", [True, 2, 2.5], ids=repr)
@pytest.mark.parametrize("dtype", [BOOL, I32, F16, BF16, F32], ids=str)
def test_weak_scalars_promote_as_in_jax(dtype, scalar):
    """A Python scalar meeting a tensor gives JAX's dtype (JAX's x64 mode off: its default float
    is then float32, as remat's always is)."""
    import jax.numpy as jnp

    expected = (jnp.ones(3, dtype) + scalar).dtype
    assert (tensor(dtype) + scalar).dtype == expected
    assert rm.jit(lambda x: scalar * x, backend="xla")(tensor(dtype)).dtype == expected


def test_promotion_keeps_values():
    big = rm.asarray(np.array([2**40], np.int64))
    out = big + rm.asarray(np.array([1], np.int32))
    assert out.dtype == I64 and int(out[0]) == 2**40 + 1
    small = rm.asarray(np.array([0.1], np.float32)) + rm.asarray(np.array([0.2], np.float64))
    np.testing.assert_allclose(np.asarray(small), [np.float64(np.float32(0.1)) + 0.2], rtol=1e-15)


@pytest.mark.parametrize(
    "fn,dtype,expected",
    [
        (lambda x: x / x, I32, F32), (lambda x: x / x, I64, F32), (lambda x: x / x, F64, F64),
        (lambda x: x**x, I32, F32), (rm.mean, I64, F32), (rm.exp, I32, F32), (rm.exp, F64, F64),
        (rm.sqrt, BOOL, F32), (rm.sum, BOOL, I32), (rm.sum, I64, I64), (rm.argmax, F64, I32),
        (rm.max, BOOL, BOOL), (rm.abs, I64, I64),
    ],
    ids=lambda v: v.__name__.replace("<lambda>", "expr") if callable(v) else str(v),  # no addresses: stable ids
)
def test_result_dtypes_of_ops_that_change_dtype(fn, dtype, expected):
    assert fn(tensor(dtype)).dtype == expected
    assert rm.jit(fn)(tensor(dtype)).dtype == expected


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint32, np.uint64, np.int8, np.longdouble])
def test_arrays_of_other_dtypes_are_not_converted_silently(dtype):
    """uint8 used to become int32 without a word; now the dtype is named."""
    a = np.ones(2, dtype)
    with pytest.raises(rm.DTypeError, match=rf"asarray: arrays of dtype {np.dtype(dtype)} are not supported"):
        rm.asarray(a)
    target = "float32" if np.dtype(dtype).kind == "f" else "int32"
    t = rm.asarray(a, dtype=target)  # asking is allowed
    assert t.dtype == np.dtype(target)
    np.testing.assert_array_equal(t, [1, 1])


def test_dtype_helpers():
    with pytest.raises(rm.DTypeError, match="astype: dtype uint8 is not supported; use one of bool, int32, "
                       "int64, float16, bfloat16, float32, float64"):
        dtypes.canonical("uint8", "astype")
    with pytest.raises(rm.DTypeError, match=r"'flaot32' is not a dtype"):
        dtypes.canonical("flaot32")
    assert dtypes.canonical(np.int64) == I64 and dtypes.canonical("bool") == BOOL
    assert dtypes.can_hold(I32, I64) and not dtypes.can_hold(I64, I32) and not dtypes.can_hold(F64, F32)
    assert dtypes.can_hold(I64, F32) and not dtypes.can_hold(F32, I64) and dtypes.can_hold(F32, BOOL)
    assert dtypes.short_name(F32) == "f32" and dtypes.short_name(BOOL) == "bool"
    assert dtypes.short_name(F16) == "f16" and dtypes.short_name(BF16) == "bf16"
    assert dtypes.weak_result_type(I64, 1.0) == F32
    assert dtypes.weak_result_type(F64, 1) == F64
    assert dtypes.scalar_dtype(True) == BOOL


# ---------------------------------------------------------------- dtype errors


@pytest.mark.parametrize(
    "fn,words",
    [
        (lambda: -rm.asarray([True]), ["negative", "bool"]),
        (lambda: rm.sign(rm.asarray([True])), ["sign", "bool"]),
        (lambda: rm.asarray([True]) - rm.asarray([False]), ["subtract", "bool"]),
        (lambda: rm.asarray([[True]]) @ rm.asarray([[True]]), ["matmul", "bool"]),
        (lambda: rm.argmax(rm.asarray([True])), ["argmax", "bool"]),
        (lambda: rm.take(rm.ones(3), rm.asarray([0.0])), ["take", "float32"]),
        (lambda: rm.ops.index_add(rm.ones(3), rm.asarray([0.5]), rm.ones(1)), ["index_add", "float32"]),
        (lambda: rm.astype(rm.ones(2), np.complex64), ["complex64", "float32"]),
        (lambda: rm.asarray(["a", "b"]), ["dtype"]),
        (lambda: rm.asarray({"a": 1}), ["dict"]),
        (lambda: rm.zeros((2,), "complex128"), ["complex128"]),
    ],
)
def test_dtype_errors_are_type_errors_naming_op_and_dtype(fn, words):
    with pytest.raises(TypeError) as info:
        fn()
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize(
    "fn,ref",
    [
        (lambda x: -x, np.negative),
        (lambda x: x - x, lambda x: x - x),
        (rm.sign, np.sign),
        (lambda x: x @ x, lambda x: x @ x),
        (rm.argmin, np.argmin),
    ],
)
def test_dtype_errors_inside_jit_then_next_trace_works(fn, ref):
    b = rm.asarray(np.array([[True, False], [False, True]]))
    with pytest.raises(rm.DTypeError, match="bool"):
        rm.jit(fn)(b)
    a = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)
    out = rm.jit(fn)(rm.asarray(a))
    np.testing.assert_allclose(np.asarray(out), ref(a))
