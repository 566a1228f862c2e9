"""JAX's weak types and x64 mode: a Python number takes the dtype of what it meets (a loop's
start from `0.0` takes the dtype its body gives the carry), and in x64 mode Python numbers and
default dtypes are 64-bit, as `jax.config.update("jax_enable_x64", True)` makes them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm

XS = np.linspace(0.0, 1.0, 5)  # float64


@pytest.mark.parametrize("checkpoint", [None, "step", rm.loops.segments(2), rm.loops.binomial(2)],
                         ids=["plain", "step", "segments", "binomial"])
def test_a_scan_started_from_a_python_float_takes_the_dtype_of_its_body(checkpoint, backend):
    """JAX promotes a weakly typed start to the carry's dtype; remat raised a DTypeError
    (float64 returned, float32 started)."""
    f = lambda xs: rm.scan(lambda c, x: (c + x * x, c), 0.0, xs, checkpoint=checkpoint)  # noqa: E731
    carry, ys = rm.jit(f, backend=backend)(XS)
    with jax.enable_x64(True):
        want_c, want_ys = jax.lax.scan(lambda c, x: (c + x * x, c), 0.0, XS)
    assert carry.dtype == ys.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(want_ys))
    np.testing.assert_array_equal(np.asarray(carry), np.asarray(want_c))
    grad = rm.grad(lambda xs: f(xs)[0])(XS)
    assert grad.dtype == np.float64
    np.testing.assert_allclose(np.asarray(grad), 2 * XS, rtol=1e-15)


def test_fori_and_while_loops_started_from_python_numbers():
    x = rm.asarray(XS)
    assert rm.fori_loop(0, 3, lambda i, c: c + x[i], 0.0).dtype == np.float64
    assert float(rm.fori_loop(0, 3, lambda i, c: c + x[i], 0.0)) == XS[:3].sum()
    total, count = rm.jit(lambda x: rm.fori_loop(0, 3, lambda i, c: (c[0] + x[i], c[1] + 1), (0.0, 0)))(x)
    assert (total.dtype, count.dtype) == (np.float64, np.int32) and int(count) == 3
    out = rm.while_loop(lambda c: c < 1.0, lambda c: c + x[1], 0.0)
    assert out.dtype == np.float64 and float(out) == 1.0
    assert rm.scan(lambda c, x: (c + x, None), 0, XS)[0].dtype == np.float64  # an int start, float body


def test_a_weak_start_the_body_cannot_hold_is_still_an_error():
    """A Python float does not become an integer carry: JAX refuses it too."""
    with pytest.raises(rm.DTypeError, match=r"scan: <lambda> returned carry of dtype int32, but init has dtype "
                                            r"float32"):
        rm.scan(lambda c, x: (x.astype("int32"), None), 0.0, rm.asarray([1, 2]))
    with pytest.raises(rm.DTypeError, match=r"scan: <lambda> returned carry of dtype float64, but init has dtype "
                                            r"float32"):
        rm.scan(lambda c, x: (c + x, None), rm.asarray(0.0), XS)  # a tensor start is strongly typed


def test_x64_mode_makes_python_numbers_and_defaults_64_bit():
    assert not rm.x64_enabled()
    with rm.enable_x64():
        assert rm.x64_enabled()
        assert rm.asarray(3.0).dtype == np.float64 and rm.asarray(3).dtype == np.int64
        assert rm.zeros(2).dtype == np.float64 and rm.arange(3).dtype == np.int64
        assert rm.random.uniform(rm.random.key(0), (2,)).dtype == np.float64
        assert rm.nn.one_hot(rm.asarray([1]), 3).dtype == np.float64
        g = rm.grad(lambda x: x * x * 0.1)(3.0)
        with jax.enable_x64(True):
            want = jax.grad(lambda x: x * x * 0.1)(3.0)
        assert g.dtype == np.float64 and float(g) == float(want)
        # `0.1 * i` in a float64 loop stays float64 (it was float32, and the carry check failed)
        out = rm.fori_loop(0, 4, lambda i, c: c + 0.1 * i, rm.zeros((), "float64"))
        with jax.enable_x64(True):
            want = jax.lax.fori_loop(0, 4, lambda i, c: c + 0.1 * i, jnp.zeros((), "float64"))
        assert out.dtype == np.float64 and float(out) == float(want)
    assert not rm.x64_enabled()
    assert rm.asarray(3.0).dtype == np.float32 and rm.grad(lambda x: x * x)(3.0).dtype == np.float32


def test_x64_mode_as_a_call_and_dtype_float_as_in_jax():
    rm.enable_x64()
    try:
        assert rm.zeros(2, dtype=float).dtype == np.float64
    finally:
        rm.enable_x64(False)
    assert rm.zeros(2, dtype=float).dtype == np.float32 and rm.zeros(2, dtype=int).dtype == np.int32


def test_a_jitted_function_keeps_one_program_per_mode():
    f = rm.jit(lambda x: x + rm.ones(()))
    assert f(2.0).dtype == np.float32
    with rm.enable_x64():
        assert f(2.0).dtype == np.float64
    assert f(2.0).dtype == np.float32


BF16 = np.asarray([1.5, -2.0, 0.25], "bfloat16")
F32 = np.asarray([1.5, -2.0, 0.25], "float32")


@pytest.mark.parametrize("scalar, other", [(2.0, BF16), (3, np.float16([1.0, 2.0])), (2.0, np.int32([1, 2]))],
                         ids=["float*bfloat16", "int*float16", "float*int32"])
def test_python_numbers_passed_to_a_jitted_function_stay_weak(scalar, other, backend):
    """`jit(f)(2.0, x_bf16)` computes in bfloat16, as JAX's: the number is a weakly typed input,
    not a float32 one (remat gave float32)."""
    f = lambda s, x: rm.sin(s) * x + s  # noqa: E731  (weakness survives ops on weak inputs alone)
    want = jax.jit(lambda s, x: jnp.sin(s) * x + s)(scalar, other)
    got = rm.jit(f, backend=backend)(scalar, other)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got, "float64"), np.asarray(want, "float64"))


def test_what_weak_inputs_alone_compute_is_weak_and_a_dtype_asked_for_is_strong(backend):
    double = rm.jit(lambda s: s * 2, backend=backend)
    assert double(3.0).weak_type and jax.jit(lambda s: s * 2)(3.0).weak_type
    assert (double(3.0) * BF16).dtype == np.dtype("bfloat16")  # a weak result meets a strong tensor
    strong = rm.jit(lambda s, x: s.astype("float32") * x, backend=backend)(3.0, BF16)
    assert strong.dtype == jax.jit(lambda s, x: s.astype("float32") * x)(3.0, BF16).dtype == np.float32
    assert not rm.asarray(3.0).weak_type  # remat's asarray of a number is strong (docs/semantics.md)


def test_a_python_number_and_a_numpy_scalar_trace_apart():
    f = rm.jit(lambda s, x: s * x)
    assert f(2.0, BF16).dtype == np.dtype("bfloat16")
    assert f(np.float32(2.0), BF16).dtype == np.float32 == jax.jit(lambda s, x: s * x)(np.float32(2.0), BF16).dtype
    assert f(2.0, BF16).dtype == np.dtype("bfloat16")


def test_weak_arguments_in_x64_mode_take_the_dtype_they_meet():
    """Under x64 a Python number is a weak float64: `2.0 * x_f32` stays float32 (remat made it
    float64), through grad, vjp and jvp as through jit."""
    f = lambda s, x: (s * x).sum()  # noqa: E731
    with rm.enable_x64(), jax.enable_x64(True):
        assert rm.jit(lambda s, x: s * x)(2.0, F32).dtype == np.float32 == jax.jit(lambda s, x: s * x)(2.0, F32).dtype
        g = rm.grad(f)(2.0, F32)
        want = jax.grad(f)(2.0, F32)
        assert g.dtype == want.dtype == np.float64 and float(g) == float(want)
        y, back = rm.vjp(lambda s, x: s * x, 2.0, F32)
        assert y.dtype == np.float32 and back(np.ones(3, "float32"))[0].dtype == np.float64
        y, t = rm.jvp(lambda s, x: s * x, (2.0, F32), (1.0, F32))
        assert y.dtype == t.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(t), 2 * F32 + F32)


def test_a_loop_started_from_a_weak_argument_takes_the_dtype_of_its_body(backend):
    step = lambda c, x: (c + x, c)  # noqa: E731
    carry, ys = rm.jit(lambda c0, xs: rm.scan(step, c0, xs), backend=backend)(0.0, BF16)
    want_c, want_ys = jax.jit(lambda c0, xs: jax.lax.scan(step, c0, xs))(0.0, BF16)
    assert carry.dtype == ys.dtype == want_c.dtype == np.dtype("bfloat16")
    np.testing.assert_array_equal(np.asarray(ys, "float32"), np.asarray(want_ys, "float32"))


def test_an_eager_checkpoint_traces_a_weak_and_a_strong_argument_apart():
    """Its program cache keyed shapes and dtypes only: the program traced for a weak tensor
    (bfloat16 out) answered the float32 call after it."""
    weak = rm.jit(lambda s: rm.broadcast_to(s, (3,)))(2.0)
    assert weak.weak_type
    times_bf16 = lambda a: a * BF16  # noqa: E731
    assert rm.checkpoint(times_bf16, weak).dtype == np.dtype("bfloat16")
    assert rm.checkpoint(times_bf16, rm.asarray(F32)).dtype == np.float32
