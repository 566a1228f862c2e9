"""Values are right or the call is loud (issue 10): Python numbers reach the requested dtype
exactly, integers never wrap and finite floats never become infinite, dtypes are never converted
without a word, captured arrays are snapshotted when traced, the jit cache hands out no value a
caller can change, and rm.random.normal is the same to the bit on both backends."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import remat as rm
from conftest import run_on

F32_MAX = float(np.finfo(np.float32).max)


def bits(a) -> np.ndarray:
    """The bytes of `a`: equal bits, so -0.0 differs from 0.0 and NaN equals itself."""
    return np.ascontiguousarray(np.asarray(a)).reshape(-1).view(np.uint8)


# ---------------------------------------------------------------- 1. exact values


def test_python_floats_reach_float64_exactly():
    """They used to pass through float32: 0.1 became 0.10000000149, 1e-50 became 0, 1e300 inf."""
    assert float(rm.asarray(0.1, "float64")) == 0.1
    np.testing.assert_array_equal(rm.asarray([0.1, 1e-50], "float64"), [0.1, 1e-50])
    assert float(rm.asarray(1e300, "float64")) == 1e300
    assert float(rm.full((), 0.1, "float64")) == 0.1
    np.testing.assert_array_equal(rm.arange(0.0, 0.3, 0.1, dtype="float64"), np.arange(0.0, 0.3, 0.1))


def test_python_ints_reach_int64_exactly():
    """2**40 as int64 used to be 0 (it went through int32 first)."""
    assert int(rm.asarray(2**40, "int64")) == 2**40
    np.testing.assert_array_equal(rm.asarray([2**40, -(2**62)], "int64"), [2**40, -(2**62)])
    np.testing.assert_array_equal(rm.full((2,), 2**40, "int64"), [2**40, 2**40])
    np.testing.assert_array_equal(rm.arange(2**31, 2**31 + 3, dtype="int64"), [2**31, 2**31 + 1, 2**31 + 2])
    assert int(rm.asarray(2**63 - 1, "int64")) == 2**63 - 1


def test_exact_values_inside_traces(backend):
    x = rm.zeros((2,), "float64")
    out = run_on(backend, lambda x: x + rm.asarray([0.1, 1e300], "float64"), x)
    np.testing.assert_array_equal(out, [0.1, 1e300])
    n = run_on(backend, lambda i: i + rm.asarray(2**40, "int64"), rm.zeros((), "int64"))
    assert int(n) == 2**40


def test_without_a_dtype_python_numbers_default_to_float32_and_int32():
    """The documented rule (remat/values.py): floats round to float32 once, ints must fit int32."""
    assert rm.asarray(0.1).dtype == np.float32 and float(rm.asarray(0.1)) == float(np.float32(0.1))
    assert rm.asarray(3).dtype == np.int32 and rm.asarray([True, 2]).dtype == np.int32
    assert rm.asarray([1, 2.5]).dtype == np.float32 and rm.asarray(True).dtype == np.bool_
    assert int(rm.asarray(2**31 - 1)) == 2**31 - 1 and int(rm.asarray(-(2**31))) == -(2**31)
    assert float(rm.asarray(F32_MAX)) == F32_MAX  # the largest finite float32 fits
    assert float(rm.asarray(1e-50)) == 0.0  # underflow rounds, as rounding does; it is no overflow
    assert math.isinf(float(rm.asarray(float("inf")))) and math.isnan(float(rm.asarray(float("nan"))))
    assert int(rm.asarray(-2.7, "int32")) == -2  # an explicit integer dtype truncates toward zero


def test_big_python_ints_round_once_to_float32():
    """2**70 + 2**46 + 1 is nearer 2**70 + 2**47 than 2**70; through float64 it would tie and round to
    even, 2**70."""
    v = 2**70 + 2**46 + 1
    assert float(rm.asarray(v, "float32")) == 2.0**70 + 2.0**47
    assert float(rm.asarray(v, "float64")) == float(v)
    np.testing.assert_array_equal(rm.asarray([2**70, 1.5]), np.array([2.0**70, 1.5], np.float32))


def test_uniform_bounds_are_exact_float64_values(backend):
    """minval=0.1 went through float32, so float64 numbers were off by 1.5e-9."""
    key = rm.random.key(3)
    u = np.asarray(rm.random.uniform(key, (1000,), "float64"))
    expected = u * (1.0 - 0.1) + 0.1
    eager = np.asarray(rm.random.uniform(key, (1000,), "float64", minval=0.1))
    np.testing.assert_array_equal(eager, expected)
    traced = run_on(backend, lambda k: rm.random.uniform(k, (1000,), "float64", minval=0.1), key)
    # XLA may fuse the multiply-add (one rounding instead of two): at most an ulp apart.
    np.testing.assert_array_max_ulp(traced, expected, maxulp=1)
    assert traced.min() >= 0.1


def nearest_bfloat16(v) -> float:
    """The bfloat16 nearest the exact value of `v` (a Python int or float; a normal number),
    ties to even: 8 significant bits, worked out in exact rational arithmetic."""
    q = Fraction(v)
    if q == 0:
        return math.copysign(0.0, v)
    scale = Fraction(2) ** (math.floor(math.log2(abs(q))) - 7)
    if abs(q) >= scale * 2**8:  # log2 of a float rounded up to the next power of two
        scale *= 2
    return float(round(q / scale) * scale)  # round() of a Fraction breaks ties to even


def bf16(values) -> np.ndarray:
    return np.array(values, np.float64).astype(rm.bfloat16)  # exact: each value has 8 bits


TIES = [1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 2**-8 - 2**-40, 3.0 + 2**-6, 0.1, -1e-30, 3e38, 7.0]
INT_TIES = [2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**24 + 2**16, 257, 259, -(2**31), 2**31 - 1, 0]


def test_python_values_round_once_to_bfloat16():
    """ml_dtypes goes through float32, so 1 + 2**-8 + 2**-40 became 1 rather than 1 + 2**-7."""
    assert float(rm.asarray(1 + 2**-8 + 2**-40, "bfloat16")) == 1 + 2**-7
    np.testing.assert_array_equal(rm.asarray(TIES, "bfloat16"), bf16([nearest_bfloat16(v) for v in TIES]))
    np.testing.assert_array_equal(rm.asarray(np.array(TIES), "bfloat16"), bf16([nearest_bfloat16(v) for v in TIES]))
    big = [2**70 + 2**62 + 1, 2**53 + 2**45 + 1, -(2**62 + 2**54 + 1)]
    np.testing.assert_array_equal(rm.asarray(big, "bfloat16"), bf16([nearest_bfloat16(v) for v in big]))
    for dtype in ("int32", "int64"):
        got = rm.asarray(np.array(INT_TIES, dtype), "bfloat16")
        np.testing.assert_array_equal(got, bf16([nearest_bfloat16(v) for v in INT_TIES]))


@pytest.mark.parametrize("source", ["float64", "float32", "int32", "int64", "float16"])
def test_astype_bfloat16_rounds_once_and_alike_on_both_backends(backend, source):
    """A traced cast to bfloat16 rounds each value once, to the same bits on NumPy and XLA (both
    round through float32 on their own: XLA gives 1 for 1 + 2**-8 + 2**-40)."""
    rng = np.random.default_rng(3)
    if source.startswith("int"):
        info = np.iinfo(source)
        values = [int(v) for v in rng.integers(info.min, info.max, 200, dtype=source)] + INT_TIES
        values += [int(v) for v in rng.integers(-(2**20), 2**20, 100)]
        if source == "int64":
            values += [2**53 + 2**45 + 1, 2**63 - 1, -(2**63), 2**62 + 2**54 + 1]
    else:
        values = list(rng.normal(0, 1, 200) * 10.0 ** rng.integers(-3, 4, 200))
        values = [float(np.dtype(source).type(v)) for v in values + TIES[:-2]]
    x = np.array(values, source)
    expected = bf16([nearest_bfloat16(v.item()) for v in x])
    np.testing.assert_array_equal(bits(run_on(backend, lambda x: x.astype("bfloat16"), x)), bits(expected))
    np.testing.assert_array_equal(bits(rm.astype(x, "bfloat16")), bits(expected))


@pytest.mark.parametrize(
    "call,fn,value,dtype,fix",
    [
        (lambda: rm.asarray(70000, "float16"), "asarray", "Python int 70000", "float16", 'pass dtype="float32"'),
        (lambda: rm.asarray(1e39, "bfloat16"), "asarray", r"Python float 1e\+39", "bfloat16", 'pass dtype="float64"'),
        (lambda: rm.asarray(np.array([F32_MAX]), "bfloat16"), "asarray", "value 3.4028", "bfloat16", "float64"),
        (lambda: rm.asarray(np.array([7e4], np.float32), "float16"), "asarray", "value 70000.0", "float16",
         'pass dtype="float32"'),
        (lambda: rm.ones(2, "float16") * 1e5, "multiply", r"Python float 100000\.0", "float16",
         r'x\.astype\("float32"\)'),
        (lambda: rm.full((2,), 2**16, "float16"), "full", "65536", "float16", 'dtype="float32"'),
    ],
)
def test_numbers_beyond_a_low_precision_dtype_raise_value_overflow(call, fn, value, dtype, fix):
    """float16 holds at most 65504 and bfloat16 3.39e38: beyond, the value would become inf."""
    with pytest.raises(rm.ValueOverflow, match=rf"^{fn}: .*{value}.* does not fit {dtype}.*{fix}"):
        call()
    assert float(rm.asarray(65504, "float16")) == 65504.0  # the largest finite float16 fits


# ---------------------------------------------------------------- 2. no wrapping, no overflow to inf

OVERFLOWS = [
    ("asarray(2**40)", lambda: rm.asarray(2**40), "asarray", "1099511627776", "int32", 'dtype="int64"'),
    ("asarray([2**40, 1])", lambda: rm.asarray([2**40, 1]), "asarray", "1099511627776", "int32", 'dtype="int64"'),
    ("asarray(2**70)", lambda: rm.asarray(2**70), "asarray", "1180591620717411303424", "int32", "beyond int64"),
    ("arange(2**31, 2**31 + 3)", lambda: rm.arange(2**31, 2**31 + 3), "arange", "2147483650", "int32",
     'dtype="int64"'),
    ("full((2,), 2**40)", lambda: rm.full((2,), 2**40), "full", "1099511627776", "int32", 'dtype="int64"'),
    ("int32 + 2**40", lambda: rm.asarray([1], "int32") + 2**40, "add", "1099511627776", "int32",
     'astype("int64")'),
    ("asarray(1e300)", lambda: rm.asarray(1e300), "asarray", "1e+300", "float32", 'dtype="float64"'),
    ("float32 * 1e300", lambda: rm.ones((2,)) * 1e300, "multiply", "1e+300", "float32", 'astype("float64")'),
    ("asarray(2**63, int64)", lambda: rm.asarray(2**63, "int64"), "asarray", "9223372036854775808", "int64",
     "beyond int64"),
    ("asarray(-2**31 - 1)", lambda: rm.asarray(-(2**31) - 1), "asarray", "-2147483649", "int32", 'dtype="int64"'),
    ("asarray(3.5e38)", lambda: rm.asarray(3.5e38), "asarray", "3.5e+38", "float32", 'dtype="float64"'),
    ("asarray(nan, int32)", lambda: rm.asarray(float("nan"), "int32"), "asarray", "nan", "int32", "no integer"),
    ("int64 array as int32", lambda: rm.asarray(np.array([1, 2**40]), "int32"), "asarray", "1099511627776",
     "int32", 'dtype="int64"'),
]


@pytest.mark.parametrize("name,call,fn,value,dtype,fix", OVERFLOWS, ids=[o[0] for o in OVERFLOWS])
def test_values_a_dtype_cannot_hold_raise_value_overflow(name, call, fn, value, dtype, fix):
    """JAX raises OverflowError here; remat used to wrap integers and return inf."""
    with pytest.raises(rm.ValueOverflow) as info:
        call()
    assert isinstance(info.value, OverflowError)
    message = str(info.value)
    assert message.startswith(f"{fn}: ")
    for part in (value, dtype, fix, "test_exact_values.py:"):
        assert part in message, (part, message)


def test_a_weak_scalar_that_does_not_fit_fails_when_traced(backend):
    x = rm.asarray([1, 2], "int32")
    with pytest.raises(rm.ValueOverflow, match=r"^add: the Python int 1099511627776 does not fit int32"):
        rm.jit(lambda x: x + 2**40, backend=backend)(x)
    np.testing.assert_array_equal(run_on(backend, lambda x: x + (2**31 - 3), x), [2**31 - 2, 2**31 - 1])
    wide = run_on(backend, lambda x: x.astype("int64") + 2**40, x)
    np.testing.assert_array_equal(wide, [2**40 + 1, 2**40 + 2])


# ---------------------------------------------------------------- 3. no silent dtype conversion


@pytest.mark.parametrize("dtype,to", [(np.longdouble, "float32"), (np.uint8, "int32"), (np.int16, "int32")])
def test_arrays_of_unsupported_dtypes_raise_naming_the_dtype(dtype, to):
    """uint8 used to become int32 without a word (float16, then refused too, is supported now)."""
    a = np.arange(3).astype(dtype)
    with pytest.raises(rm.DTypeError) as info:
        rm.asarray(a)
    message = str(info.value)
    for part in (f"dtype {np.dtype(dtype)}", "bool, int32, int64, float16, bfloat16, float32, float64",
                 f"astype(np.{to})",
                 f'dtype="{to}"'):
        assert part in message, (part, message)
    converted = rm.asarray(a, dtype=to)  # asking is allowed
    assert converted.dtype == np.dtype(to)
    np.testing.assert_array_equal(converted, [0, 1, 2])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_unsupported_dtypes_as_jit_and_grad_arguments(backend, dtype):
    a = np.ones(3, dtype)
    with pytest.raises(rm.DTypeError, match=rf"argument of dtype {np.dtype(dtype)} is not supported"):
        rm.jit(lambda x: x * 2, backend=backend)(a)
    with pytest.raises(rm.DTypeError, match=rf"argument of dtype {np.dtype(dtype)}"):
        rm.grad(lambda x: rm.sum(x * 2.0))(a)
    np.testing.assert_array_equal(run_on(backend, lambda x: x * 2, a.astype(np.float32)), [2, 2, 2])


@pytest.mark.parametrize(
    "call,fn",
    [
        (lambda: rm.asarray([1.0], "uint16"), "asarray"),
        (lambda: rm.astype(rm.ones(2), "int8"), "astype"),
        (lambda: rm.zeros((2,), np.uint8), "zeros"),
        (lambda: rm.full((2,), 1, "uint32"), "full"),
        (lambda: rm.arange(3, dtype="int16"), "arange"),
        (lambda: rm.random.normal(rm.random.key(0), (2,), "longdouble"), "random.normal"),
    ],
)
def test_naming_an_unsupported_dtype_is_an_error(call, fn):
    """dtypes.canonical mapped float16 to float32 and uint32 to int32 silently."""
    with pytest.raises(rm.DTypeError, match=rf"^{fn}: dtype \w+ is not supported; use one of bool, int32"):
        call()


# ---------------------------------------------------------------- 4. constants are snapshots


def test_a_captured_numpy_array_is_snapshotted_when_traced(backend):
    """NumPy used to read the array at every call and XLA at trace time; both now agree with JAX."""
    w = np.array([1.0, 2.0, 3.0], np.float32)
    f = rm.jit(lambda x: x * w + 1.0, backend=backend)
    x = rm.ones((3,))
    np.testing.assert_array_equal(f(x), [2.0, 3.0, 4.0])
    w[:] = 100.0
    np.testing.assert_array_equal(f(x), [2.0, 3.0, 4.0])  # the cached program keeps the old values
    np.testing.assert_array_equal(rm.jit(lambda x: x * w, backend=backend)(x), w)  # a new trace sees the new


def test_the_jit_cache_hands_out_no_value_a_caller_can_change(backend):
    f = rm.jit(lambda x: (x * 2, rm.ones((3,))), backend=backend)
    x = rm.ones((3,))
    out = f(x)
    try:
        np.asarray(out[1])[:] += 1
    except ValueError as e:  # read-only: the cache's constant is not the caller's to change
        assert "read-only" in str(e)
    again = f(x)
    np.testing.assert_array_equal(again[1], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(again[0], [2.0, 2.0, 2.0])


def test_graph_constants_are_read_only_snapshots():
    w = np.arange(3.0, dtype=np.float32)
    g = rm.make_graph(lambda x: x + w)(rm.ones((3,)))
    (const,) = [a for a in g.constants.values() if a.ndim]
    assert not const.flags.writeable and not np.shares_memory(const, w)
    t = rm.asarray([1.0, 2.0])  # remat's own read-only value is taken as it is
    g = rm.make_graph(lambda x: x + t)(rm.ones((2,)))
    assert any(np.shares_memory(a, np.asarray(t)) for a in g.constants.values())


# ---------------------------------------------------------------- 5. normal numbers, bit for bit

SHAPES = [(2000,), (), (2, 0), (7, 1, 3)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_is_bit_identical_on_both_backends(dtype):
    """It used to differ by up to 3 ulp (float32) and 114 ulp (float64): NumPy's and XLA's log and
    cos round differently, and XLA fuses multiply-adds."""
    keys = rm.random.split(rm.random.key(11), 12)
    for shape in SHAPES:
        one_key = lambda k, shape=shape: rm.random.normal(k, shape, dtype)  # noqa: E731
        for backend in ("numpy", "xla"):
            f = rm.jit(one_key, backend=backend)
            for k in keys[:4]:  # one program for every key
                z = rm.random.normal(k, shape, dtype)
                assert z.shape == shape and z.dtype == np.dtype(dtype)
                np.testing.assert_array_equal(bits(f(k)), bits(z), err_msg=f"{backend} {shape}")
    batch = rm.vmap(lambda k: rm.random.normal(k, (3, 5), dtype))  # a batch of keys draws per key
    expected = np.stack([np.asarray(rm.random.normal(k, (3, 5), dtype)) for k in keys])
    for backend in ("numpy", "xla"):
        np.testing.assert_array_equal(bits(rm.jit(batch, backend=backend)(keys)), bits(expected))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_survives_fusion_with_what_follows(dtype):
    """No float product of the transform is left for XLA to fuse with the caller's addition."""
    key = rm.random.key(5)
    x = rm.asarray(np.random.default_rng(0).normal(size=500), dtype)
    f = lambda k, x: rm.random.normal(k, (500,), dtype) + x  # noqa: E731
    expected = np.asarray(rm.random.normal(key, (500,), dtype)) + np.asarray(x)
    np.testing.assert_array_equal(rm.jit(f, backend="xla")(key, x), expected)


@pytest.mark.parametrize("dtype,bits_", [("float32", 24), ("float64", 53)])
def test_normal_is_box_muller_on_the_uniforms_within_two_ulp(dtype, bits_):
    """The same numbers as before, z = sqrt(-2 ln(1 - u1)) cos(2π u2) on the uniforms
    uniform(key, (2,) + shape) draws, now computed exactly enough to round within 2 ulp."""
    import mpmath  # a test dependency: the exact reference
    mpmath.mp.prec = 128
    key = rm.random.key(2)
    u = np.asarray(rm.random.uniform(key, (2, 400), dtype))
    z = np.asarray(rm.random.normal(key, (400,), dtype))
    # The edges: u1 = 0 (z = 0), tiny and near-one u1, and angles on and beside the axes.
    ks = [(0, 5), (1, 0), (2 ** (bits_ - 1), 2 ** (bits_ - 2)), (2**bits_ - 1, 2 ** (bits_ - 3)),
          (7, 3 * 2 ** (bits_ - 2) + 1), (2**bits_ - 2, 2 ** (bits_ - 1) - 1)]
    words = np.array(ks, np.uint64 if bits_ == 53 else np.uint32).T
    from remat.backends import box_muller

    edge = box_muller.normal(np, words[0], words[1], np.dtype(dtype))
    cases = list(zip(u[0], u[1], z)) + [(a * 2.0**-bits_, b * 2.0**-bits_, e) for (a, b), e in zip(ks, edge)]
    for u1, u2, got in cases:
        u1, u2 = mpmath.mpf(float(u1)), mpmath.mpf(float(u2))
        exact = mpmath.sqrt(-2 * mpmath.log(1 - u1)) * mpmath.cos(2 * mpmath.pi * u2)
        if abs(exact) < 1e-30:  # cos at an axis: exactly 0
            assert got == 0
            continue
        ulp = float(np.spacing(np.abs(np.dtype(dtype).type(float(exact)))))
        assert abs(float(got) - exact) <= 2 * ulp, (u1, u2, got, exact)


# ---------------------------------------------------------------- 6. clear errors


def test_ragged_and_too_deep_lists_are_shape_errors():
    with pytest.raises(rm.ShapeError, match=r"^asarray: the nested list \[\[1, 2\], \[3\]\] is ragged: its rows "
                                            r"at depth 1 have lengths 2 and 1"):
        rm.asarray([[1, 2], [3]])
    deep: list = [1.0]
    for _ in range(64):
        deep = [deep]
    with pytest.raises(rm.ShapeError, match=r"more than 64 deep"):
        rm.asarray(deep)
    assert rm.asarray(deep[0]).ndim == 64  # 64 levels are a tensor


def test_make_graph_checks_its_function_when_made():
    with pytest.raises(rm.ArgumentTypeError, match=r"^make_graph: expected a callable, got int 3"):
        rm.make_graph(3)  # not at the call


@pytest.mark.parametrize(
    "value,error,words",
    [
        (None, rm.ArgumentTypeError, "NoneType"),
        ({"a": 1}, rm.ArgumentTypeError, "dict"),
        (object(), rm.ArgumentTypeError, "object"),
        (["a", "b"], rm.ArgumentTypeError, "str"),
        ([1, None], rm.ArgumentTypeError, "holding a NoneType"),
        (1 + 2j, rm.DTypeError, "complex128"),
    ],
)
def test_values_of_unsupported_types(value, error, words):
    with pytest.raises(error, match=rf"^asarray: .*{words}"):
        rm.asarray(value)


def test_a_float_in_a_shape_is_an_error_not_truncated():
    """random.uniform(key, (1.5,)) used to draw one number."""
    with pytest.raises(rm.ArgumentTypeError, match=r"^random\.uniform: shape \(1\.5,\) has an entry 1\.5"):
        rm.random.uniform(rm.random.key(0), (1.5,))
    with pytest.raises(rm.ArgumentTypeError, match=r"^zeros: shape \(2\.0,\) has an entry 2\.0"):
        rm.zeros((2.0,))
