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
