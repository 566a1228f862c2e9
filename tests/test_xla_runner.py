"""The XLA runner's arguments: handed to the executable without a Python-side copy per array,
never sharing the caller's memory with a result, converted to the program's dtypes. Wall-clock
figures are in benchmarks/call_overhead.py; these tests pin the structure behind them."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import remat as rm  # noqa: E402
from remat.backends import xla  # noqa: E402
from remat.models import residual_mlp_loss, residual_mlp_params  # noqa: E402

# ---------------------------------------------------------------- arguments


@pytest.fixture
def device_puts(monkeypatch):
    calls: list[int] = []
    real = jax.device_put

    def counting(x, *args, **kwargs):
        calls.append(len(x) if isinstance(x, list) else 1)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(jax, "device_put", counting)
    return calls


def test_numpy_arguments_go_to_the_executable_without_device_put(device_puts):
    """A Python-side `jax.device_put` per array cost ~28 us a leaf (512 leaves: 15 ms, against
    1.2 ms for `jax.jit`); the executable takes NumPy arrays itself, as `jax.jit` passes them."""
    leaves = {f"p{i}": np.full((3,), i, np.float32) for i in range(64)}
    f = rm.jit(lambda t: sum(rm.sum(v) for v in t.values()), backend="xla")
    assert float(f(leaves)) == 3 * sum(range(64))
    device_puts.clear()
    assert float(f(leaves)) == 3 * sum(range(64))
    assert device_puts == []


def test_a_checkpointed_step_takes_its_arguments_as_they_are(device_puts):
    params = residual_mlp_params(5, 8)
    x = rm.asarray(np.ones((4, 8)), "float32")
    graph = rm.make_graph(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, "layer")))(params, x)
    args = [np.asarray(a) for a in rm.tree.leaves((params, x))]
    runner = xla.compile(graph)
    device_puts.clear()
    loss, *grads = runner(*args)
    assert device_puts == []  # one executable reads every weight forward and backward
    expected = rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, "layer")))(params, x)
    np.testing.assert_allclose(np.asarray(loss), np.asarray(expected[0]), rtol=1e-6)


def aligned(values) -> np.ndarray:
    """A float32 array at a 64-byte boundary: one XLA:CPU's device_put would share, not copy."""
    buf = np.empty(len(values) + 16, np.float32)
    start = (-buf.ctypes.data % 64) // 4
    a = buf[start : start + len(values)]
    a[:] = values
    return a


def test_an_argument_returned_as_it_is_does_not_share_the_callers_memory():
    x, y = aligned(range(1024)), aligned(range(1024))
    out, also, doubled = rm.jit(lambda x, y: (x, y, y * 2), backend="xla")(x, y)
    assert all(isinstance(t._value, jax.Array) for t in (out, also, doubled))
    x[:] = -1  # the caller's arrays change; the results do not
    y[:] = -1
    np.testing.assert_array_equal(np.asarray(out), np.arange(1024))
    np.testing.assert_array_equal(np.asarray(also), np.arange(1024))
    np.testing.assert_array_equal(np.asarray(doubled), 2 * np.arange(1024))


def test_arguments_of_another_dtype_are_converted():
    graph = rm.make_graph(lambda x: x * 2)(rm.ones((3,)))
    (out,) = xla.compile(graph)(np.arange(3, dtype=np.float64))
    assert out.dtype == np.float32 and np.asarray(out).tolist() == [0, 2, 4]


def test_a_warm_call_makes_no_tensor_per_argument(monkeypatch):
    """The signature of NumPy and JAX arguments is read off the arrays: a Tensor per leaf on
    every call cost more than XLA's own call."""
    leaves = [np.full((2,), i, np.float32) for i in range(32)] + [jax.numpy.ones((2,), np.int32)]
    f = rm.jit(lambda xs: rm.sum(rm.stack(xs[:-1])) + rm.sum(xs[-1]).astype("float32"), backend="xla")
    assert float(f(leaves)) == 2 * sum(range(32)) + 2
    made = []
    real = rm.Tensor._concrete.__func__
    monkeypatch.setattr(rm.Tensor, "_concrete", classmethod(lambda cls, *a: made.append(1) or real(cls, *a)))
    out = f(leaves)
    assert len(made) <= 2  # the result (and its relabelled copy), not one per argument
    assert float(out) == 2 * sum(range(32)) + 2 and f.trace_count == 1
