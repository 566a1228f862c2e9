"""Tensors in JAX, PyTorch and NumPy and their arrays in remat, without copies where the memory
allows; JAX arrays on the NumPy backend; `lower().compile()` filling jit's cache;
`memory.profile(static_argnums=...)`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm


def _aligned(n: int) -> np.ndarray:
    """A float32 array whose buffer is 64-byte aligned, as XLA:CPU needs to use it in place."""
    raw = np.zeros(n + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    a = raw[start : start + n]
    a[:] = np.arange(n)
    return a


# ---------------------------------------------------------------- JAX arrays on the NumPy backend


@pytest.mark.parametrize("make", [jnp.ones, lambda n: np.ones(n, np.float32)], ids=["jax", "numpy"])
def test_numpy_backend_runs_jax_and_numpy_arguments_alike(make):
    x = make(3)
    assert np.asarray(rm.jit(lambda a: a * 2)(x)).tolist() == [2.0, 2.0, 2.0]
    grad = rm.jit(rm.grad(lambda a: rm.sum(a[1:] * a[1:])))(x)
    assert np.asarray(grad).tolist() == [0.0, 2.0, 2.0]
    assert np.asarray(rm.grad(lambda a: rm.sum(a * 3.0))(x)).tolist() == [3.0, 3.0, 3.0]


def test_numpy_backend_counts_a_jax_argument_as_the_callers():
    # The argument is the caller's: the run holds one buffer of 3 floats, tanh's output, which the
    # product overwrites; never the argument, which it must not write into either.
    for x in (jnp.ones(3), np.ones(3, np.float32)):
        compiled = rm.jit(lambda a: rm.tanh(a) * 2).lower(x).compile()
        compiled(x)
        assert compiled.last_memory.peak == 12
        assert np.asarray(x).tolist() == [1.0, 1.0, 1.0]


def test_numpy_backend_reads_a_jax_argument_in_place():
    x = jnp.arange(8.0)
    out = rm.jit(lambda a: a[2:])(x)  # a slice of the argument: a view of JAX's own buffer
    assert out._value.ctypes.data == x.unsafe_buffer_pointer() + 2 * 4
    assert np.asarray(out).tolist() == list(range(2, 8))


@pytest.mark.parametrize("grad", [True, False])
def test_memory_profile_takes_jax_arrays(grad):
    x = jnp.ones((64,))
    got = rm.memory.profile(lambda a: rm.sum(rm.tanh(a) * 2.0), x, grad=grad)
    want = rm.memory.profile(lambda a: rm.sum(rm.tanh(a) * 2.0), np.ones(64, np.float32), grad=grad)
    assert got.peak_bytes == want.peak_bytes > 0
    assert [e.live for e in got.timeline] == [e.live for e in want.timeline]


# ---------------------------------------------------------------- tensors in JAX


def test_jax_functions_take_concrete_tensors():
    t = rm.asarray([1.0, 2.0, 3.0])
    assert float(jnp.sum(t)) == 6.0
    assert np.asarray(jax.jit(lambda a: a * 2)(t)).tolist() == [2.0, 4.0, 6.0]
    assert np.asarray(jax.vmap(jnp.sin)(t)).tolist() == pytest.approx(np.sin([1.0, 2.0, 3.0]).tolist())
    assert jnp.asarray(t).dtype == jnp.float32


def test_jax_grad_of_a_tensor_is_a_tensor():
    t = rm.asarray([1.0, 2.0, 3.0])
    g = jax.grad(lambda a: jnp.sum(a * a))(t)
    assert isinstance(g, rm.Tensor)
    assert g.dtype == np.float32 and np.asarray(g).tolist() == [2.0, 4.0, 6.0]
    params = {"w": rm.ones((2,)), "b": rm.zeros(())}
    g = jax.grad(lambda p: jnp.sum(p["w"] * 3.0) + p["b"])(params)
    assert isinstance(g["w"], rm.Tensor) and np.asarray(g["w"]).tolist() == [3.0, 3.0]
    assert float(g["b"]) == 1.0


def test_jax_gets_an_aligned_tensor_buffer_uncopied():
    a = _aligned(256)
    t = rm.asarray(a)
    assert jnp.asarray(t).unsafe_buffer_pointer() == a.ctypes.data
    x = jnp.ones(4)
    assert jnp.asarray(rm.asarray(x)) is x  # a tensor holding a JAX array hands over that array


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_jax_array_with_a_tensor_is_a_tensor_eager_and_traced(backend):
    # JAX's operators defer to the tensor, as NumPy's do: same result type whether traced or not.
    w = jnp.full((3,), 2.0)
    t = rm.asarray([1.0, 2.0, 3.0])
    assert isinstance(w * t, rm.Tensor) and np.asarray(w * t).tolist() == [2.0, 4.0, 6.0]
    assert isinstance(w == t, rm.Tensor)
    out = rm.jit(lambda x: w * x + w, backend=backend)(t)
    assert np.asarray(out).tolist() == [4.0, 6.0, 8.0]
    assert np.asarray(rm.grad(lambda x: rm.sum(w * x))(t)).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("call", [
    lambda x: jnp.sum(x),
    lambda x: jnp.asarray(x),
    lambda x: jax.jit(jnp.sin)(x),
    lambda x: np.from_dlpack(x),
], ids=["jnp.sum", "jnp.asarray", "jax.jit", "from_dlpack"])
def test_a_traced_tensor_given_to_another_library_is_a_tracer_error(call):
    with pytest.raises(rm.TracerError, match=r"traced inside `jit\(<lambda>\)`.*use remat's ops"):
        rm.jit(call)(rm.ones((3,)))


def test_tensors_become_jax_pytrees_when_jax_is_imported_after_remat():
    code = textwrap.dedent("""
        import sys
        import remat as rm
        assert "jax" not in sys.modules
        import jax, jax.numpy as jnp
        t = rm.asarray([1.0, 2.0])
        print(float(jnp.sum(t)), jax.jit(lambda a: a + 1)(t).tolist(), type(jax.grad(jnp.sum)(t)).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["3.0", "[2.0,", "3.0]", "Tensor"]


# ---------------------------------------------------------------- DLPack and NumPy


def test_numpy_reads_tensors_in_place():
    y = rm.sin(rm.asarray([0.0, 1.0]))  # an op's result
    assert np.shares_memory(np.asarray(y), y._value)
    assert np.from_dlpack(y).ctypes.data == y._value.ctypes.data
    frozen = rm.asarray([0.0, 1.0, 2.0])  # read-only (a value made from Python numbers): NumPy
    # is told so through DLPack 1.0
    view = np.from_dlpack(frozen)
    assert view.ctypes.data == frozen._value.ctypes.data and not view.flags.writeable


def test_dlpack_consumers_that_cannot_see_read_only_get_a_copy():
    frozen = rm.asarray([float(i) for i in range(8)])  # made from Python numbers: read-only
    assert not frozen._value.flags.writeable
    legacy = jax.dlpack.from_dlpack(frozen)  # JAX asks without max_version
    assert legacy.unsafe_buffer_pointer() != frozen._value.ctypes.data
    assert np.asarray(legacy).tolist() == list(range(8))
    writable = rm.exp(frozen) * 1.0  # an op's result can be shared with anyone
    assert np.from_dlpack(writable).ctypes.data == writable._value.ctypes.data


def test_dlpack_device_of_host_and_jax_tensors():
    assert rm.ones((2,)).__dlpack_device__() == (1, 0)
    x = jnp.ones(2)
    assert rm.asarray(x).__dlpack_device__() == x.__dlpack_device__()


def test_from_dlpack_shares_memory_with_numpy_and_jax():
    a = np.arange(4.0, dtype=np.float32)
    t = rm.from_dlpack(a)
    a[0] = 7.0
    assert np.asarray(t).tolist() == [7.0, 1.0, 2.0, 3.0] and t.dtype == np.float32
    x = jnp.arange(3.0)
    assert rm.from_dlpack(x)._value is x  # stays a JAX array, on its device
    assert rm.from_dlpack(t) is t
    assert np.asarray(rm.jit(lambda v: v * 2)(rm.from_dlpack(a))).tolist() == [14.0, 2.0, 4.0, 6.0]


def test_from_dlpack_refuses_unsupported_dtypes_and_non_arrays():
    with pytest.raises(rm.DTypeError, match=r"from_dlpack: x has dtype uint8.*convert it first"):
        rm.from_dlpack(np.zeros(3, np.uint8))
    with pytest.raises(rm.ArgumentTypeError, match=r"from_dlpack: x is a list.*rm\.asarray"):
        rm.from_dlpack([1.0, 2.0])


@pytest.mark.torch
def test_tensors_and_pytorch_share_memory_both_ways():
    import torch
    y = rm.tanh(rm.asarray([0.5, 1.0]))
    tt = torch.from_dlpack(y)
    assert tt.data_ptr() == y._value.ctypes.data and tt.tolist() == pytest.approx(np.tanh([0.5, 1.0]).tolist())
    src = torch.arange(3, dtype=torch.float32)
    t = rm.from_dlpack(src)
    src[1] = 9.0
    assert np.asarray(t).tolist() == [0.0, 9.0, 2.0]
    grad = rm.grad(lambda v: rm.sum(v * v))(rm.from_dlpack(src))
    assert torch.from_dlpack(grad).tolist() == [0.0, 18.0, 4.0]


# ---------------------------------------------------------------- jit's cache and profile's static arguments


def test_lower_compile_fills_the_cache():
    f = rm.jit(lambda x, n: x * n, static_argnums=1)
    x = rm.ones((3,))
    compiled = f.lower(x, 2).compile()
    assert f.trace_count == 1
    assert np.asarray(f(x, 2)).tolist() == [2.0, 2.0, 2.0]
    assert f.trace_count == 1  # the call used the compiled program
    f(x, 3)
    assert f.trace_count == 2  # another static value is another program
    assert f.lower(x, 2).compile() is compiled  # the entry already cached is kept
    assert np.asarray(compiled(x)).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_a_call_then_lower_compile_share_one_entry(backend):
    f = rm.jit(lambda x: rm.sin(x), backend=backend)
    x = rm.zeros((2,))
    f(x)
    f.lower(x).compile()
    f(x)
    assert f.trace_count == 2  # lower always traces (as in JAX); calls never did again


def test_lower_with_an_unhashable_static_argument_is_named():
    f = rm.jit(lambda x, n: x, static_argnums=1)
    with pytest.raises(rm.ArgumentTypeError, match=r"jit: static argument .*position 1.*list.*not hashable"):
        f.lower(rm.ones((2,)), [1, 2])


def _layer(h):
    return rm.tanh(rm.tanh(h))


def _layers(x, depth, plan):
    h = x
    for _ in range(depth):
        h = rm.checkpoint(_layer, h) if plan == "checkpoint" else _layer(h)
    return rm.sum(h)


def test_memory_profile_takes_static_argnums():
    x = rm.ones((1024,))
    plain = rm.memory.profile(_layers, x, 8, "plain", static_argnums=(1, 2))
    ckpt = rm.memory.profile(_layers, x, 8, "checkpoint", static_argnums=(-2, -1))
    assert plain.peak_bytes > ckpt.peak_bytes  # the plan (a str) reached the function as it is
    deeper = rm.memory.profile(_layers, x, 16, "plain", static_argnums=(1, 2), argnums=0)
    assert deeper.peak_bytes > plain.peak_bytes  # and the depth (an int) did too, not a tensor


def test_memory_profile_static_argnums_mistakes():
    x = rm.ones((4,))
    with pytest.raises(rm.ArgumentValueError, match=r"memory.profile: argnums=1 names argument 1, which "
                                                    r"static_argnums=\(1, 2\) makes static"):
        rm.memory.profile(_layers, x, 2, "plain", static_argnums=(1, 2), argnums=1)
    with pytest.raises(rm.ArgumentTypeError, match=r"memory.profile: static_argnums=5 is out of range"):
        rm.memory.profile(_layers, x, 2, "plain", static_argnums=5)
