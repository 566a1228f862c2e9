"""`x[index]` against NumPy: ints, slices with any step, None, `...`, one integer tensor or array,
and their combinations; eagerly, inside `rm.jit` with the index fixed, and with the integer
index passed to `jit` as a traced argument."""

from __future__ import annotations

import numpy as np
import pytest

import remat as rm
from conftest import run_on
from remat.trace import current_trace


class _Index:
    def __getitem__(self, index):
        return index


I = _Index()  # I[1, ::2] is the index (1, slice(None, None, 2))

X = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)

INDICES = [
    I[1], I[-1], I[-4], I[3, 4, 5], I[-1, -5, -6],
    I[1:3], I[::2], I[1::3], I[:-1], I[-3:], I[5:100], I[-100:2], I[2:2], I[3:1],
    I[::-1], I[::-2], I[3:0:-2], I[-1:-5:-1], I[:, ::-3], I[1:4, 4:0:-1, ::-5], I[0:3:-1],
    I[None], I[None, None], I[:, None], I[None, 1, None, ::2], I[..., None],
    I[...], I[..., 1], I[1, ...], I[1, ..., ::-1], I[..., 2, :], I[:, ...],
    I[np.array([0, 2, 1])], I[np.array([3, 3])], I[np.array([-1, 0])], I[np.array([[0, 1], [2, 0]])],
    I[np.array(2)], I[:, np.array([4, 0])], I[..., np.array([[5], [0]])], I[None, :, np.array([1])],
    I[1, np.array([0, 0]), ::-1], I[np.array([1, 2]), 3], I[::-1, np.array([2, 4])],
    # Ints and the array apart: NumPy puts the array's axes first.
    I[1, :, np.array([0, 1])], I[1, None, np.array([0, 1])], I[np.array([0, 1]), :, 1],
    I[1, ..., np.array([[0, 1]])], I[np.array(1), :, np.array([0, 1])],
]


def _ids(index):
    return repr(index).replace(" ", "")


def _items(index) -> tuple:
    return index if isinstance(index, tuple) else (index,)


def _as_tensor_index(index):
    return tuple(rm.asarray(i) if isinstance(i, np.ndarray) else i for i in _items(index))


def assert_matches(out, expected):
    assert isinstance(out, rm.Tensor)
    assert out.shape == expected.shape
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize("index", INDICES, ids=_ids)
def test_eager_indexing_matches_numpy(index):
    assert_matches(rm.asarray(X)[index], X[index])


@pytest.mark.parametrize("index", INDICES, ids=_ids)
def test_eager_indexing_with_tensor_indices_matches_numpy(index):
    assert_matches(rm.asarray(X)[_as_tensor_index(index)], X[index])


@pytest.mark.parametrize("index", INDICES, ids=_ids)
def test_jit_indexing_with_a_fixed_index_matches_numpy(index):
    assert_matches(rm.jit(lambda x: x[index])(rm.asarray(X)), X[index])


@pytest.mark.parametrize(
    "index", [i for i in INDICES if any(isinstance(k, np.ndarray) for k in _items(i))], ids=_ids
)
def test_jit_indexing_with_a_traced_integer_index_matches_numpy(index):
    array = max((k for k in _items(index) if isinstance(k, np.ndarray)), key=np.ndim)

    def f(x, idx):
        return x[tuple(idx if k is array else k for k in _items(index))]

    g = rm.make_graph(f)(rm.asarray(X), rm.asarray(array))
    assert "take" in [n.op for n in g.nodes]  # the index is an input, not a constant
    assert_matches(rm.jit(f)(rm.asarray(X), rm.asarray(array)), X[index])


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "float64"])
def test_indexing_keeps_the_dtype(dtype):
    a = (X % 3).astype(dtype)
    assert_matches(rm.asarray(a)[1, ::-2, np.array([0, 5])], a[1, ::-2, np.array([0, 5])])


def test_zero_d_tensor_indexing():
    a = np.array(3.5, np.float32)
    assert_matches(rm.asarray(a)[...], a[...])
    assert_matches(rm.asarray(a)[None], a[None])
    assert_matches(rm.asarray(a)[()], a[()])


def test_numpy_integer_scalars_index_like_ints():
    assert_matches(rm.asarray(X)[np.int64(2), np.int32(-1)], X[2, -1])


def test_tensor_methods_index_like_getitem():
    x = rm.asarray(X)
    assert_matches(x[1:3].sum(axis=0), X[1:3].sum(axis=0))
    assert [t.shape for t in x] == [(5, 6)] * 4
    np.testing.assert_array_equal(np.asarray(list(x)[2]), X[2])


def test_indexing_is_recorded_as_slice_flip_take_in_the_graph():
    g = rm.make_graph(lambda x, i: x[1, i, ::-1])(rm.asarray(X), rm.asarray([0, 2]))
    ops = [n.op for n in g.nodes]
    assert ops[:3] == ["slice", "flip", "take"]
    assert g.outputs[0].shape == (2, 6)


BAD_INDICES = [
    (I[4], rm.IndexOutOfRange), (I[-5], rm.IndexOutOfRange), (I[0, 5], rm.IndexOutOfRange),
    (I[0, 0, 6], rm.IndexOutOfRange), (I[:, :, -7], rm.IndexOutOfRange), (I[..., 6], rm.IndexOutOfRange),
    (I[0, 0, 0, 0], rm.IndexOutOfRange), (I[np.array([4])], rm.IndexOutOfRange),
    (I[:, np.array([[0], [-6]])], rm.IndexOutOfRange), (I[1, ..., 1, ..., 1], rm.ArgumentValueError),
    (I[np.array([0.0])], rm.DTypeError), (I[np.array([True, False, True])], rm.IndexOutOfRange),
    (I[np.array([0]), np.array([0])], rm.ArgumentValueError), (I[1.0], rm.ArgumentTypeError),
    (I["a"], rm.ArgumentTypeError), (I[True], rm.ArgumentTypeError), (I[::0], rm.ArgumentValueError),
    (I[0.5:], rm.ArgumentTypeError),
]


@pytest.mark.parametrize("index,error", BAD_INDICES, ids=[_ids(i) for i, _ in BAD_INDICES])
def test_bad_indices_raise_remat_errors(index, error):
    with pytest.raises(error, match=r"^getitem: .* \(at test_indexing.py:\d+\)$"):
        rm.asarray(X)[index]
    with pytest.raises(error, match=r"^getitem: "):
        rm.jit(lambda x: x[index])(rm.asarray(X))
    assert current_trace() is None
    assert_matches(rm.jit(lambda x: x[0])(rm.asarray(X)), X[0])


def test_out_of_range_int_error_names_op_index_axis_and_size():
    with pytest.raises(rm.IndexOutOfRange, match=r"^getitem: index 7 is out of bounds for axis 1 with size 5 \(at "):
        rm.asarray(X)[0, 7]


CONCRETE_OUT_OF_RANGE = [
    (lambda x: x[np.array([0, 4])], r"getitem: index 4 is out of bounds for axis 0 with size 4"),
    (lambda x: x[:, rm.asarray([-6])], r"getitem: index -6 is out of bounds for axis 1 with size 5"),
    (lambda x: x[1, ..., [6]], r"getitem: index 6 is out of bounds for axis 2 with size 6"),
    (lambda x: rm.take(x, [0, 5], axis=1), r"take: index 5 is out of bounds for axis 1 with size 5"),
    (lambda x: rm.take(x, np.array([-121])), r"take: index -121 is out of bounds for the flattened tensor"),
    (lambda x: rm.index_add(x, [4], rm.ones((1, 5, 6))), r"index_add: index 4 is out of bounds for axis 0 with"),
]


@pytest.mark.parametrize("call,says", CONCRETE_OUT_OF_RANGE, ids=[s.split(":")[0] + str(i) for i, (_, s) in
                                                                   enumerate(CONCRETE_OUT_OF_RANGE)])
def test_concrete_out_of_range_indices_raise_eagerly_and_when_traced(call, says, backend):
    # An index known when tracing is checked then, whatever the backend: NumPy used to raise its
    # own IndexError at run time, XLA clamped without a word.
    with pytest.raises(rm.IndexOutOfRange, match="^" + says):
        call(rm.asarray(X))
    with pytest.raises(rm.IndexOutOfRange, match="^" + says):
        rm.jit(call, backend=backend)(rm.asarray(X))
    assert current_trace() is None


def _read_at(i: np.ndarray, n: int) -> np.ndarray:
    """The element a traced index reads: negatives wrap once, then the nearest end."""
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


TRACED = np.array([[0, 4, -1], [5, -5, -6], [100, -100, 2]], np.int32)  # along an axis of size 5
W = np.random.default_rng(0).standard_normal((4, 3, 3, 6)).astype(np.float32)


def _jax_reference(fn, *args):
    import jax

    return [np.asarray(a) for a in jax.value_and_grad(fn)(*args)]


def test_traced_out_of_range_take_clamps_with_matching_gradient(backend):
    import jax.numpy as jnp

    loss = lambda x, i: rm.sum(rm.take(x, i, axis=1) * W)  # noqa: E731
    value, grad = run_on(backend, rm.value_and_grad(loss), rm.asarray(X), rm.asarray(TRACED))
    want = np.take(X, _read_at(TRACED, 5), axis=1)
    np.testing.assert_allclose(value, np.sum(want * W), rtol=1e-5)
    jax_value, jax_grad = _jax_reference(lambda x: jnp.sum(x.at[:, TRACED].get(mode="clip") * W), X)
    np.testing.assert_allclose(value, jax_value, rtol=1e-5)
    np.testing.assert_allclose(grad, jax_grad, rtol=1e-6)
    expected = np.zeros_like(X)
    np.add.at(expected, (slice(None), _read_at(TRACED, 5)), W)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


def test_traced_tensor_index_reads_like_take_on_every_backend(backend):
    import jax.numpy as jnp

    idx = np.array([-7, -1, 0, 6, 9], np.int32)  # along the last axis, of size 6
    v = W.reshape(-1)[:25].reshape(5, 5)
    loss = lambda x, i: rm.sum(x[1, :, i] * v)  # noqa: E731
    value, grad = run_on(backend, rm.value_and_grad(loss), rm.asarray(X), rm.asarray(idx))
    jax_value, jax_grad = _jax_reference(lambda x: jnp.sum(x.at[1, :, idx].get(mode="clip") * v), X)
    np.testing.assert_allclose(value, jax_value, rtol=1e-5)
    np.testing.assert_allclose(grad, jax_grad, rtol=1e-6)
    forward = run_on(backend, lambda x, i: x[1, :, i], rm.asarray(X), rm.asarray(idx))
    np.testing.assert_array_equal(forward, X[1, :, _read_at(idx, 6)])  # NumPy's axis order


def test_traced_out_of_range_index_add_matches_take_and_jax(backend):
    import jax.numpy as jnp

    upd = W[:3, 0, 0, :4]
    idx = np.array([-9, 3, 4], np.int32)  # along axis 0, of size 4

    def loss(x, u, i):
        return rm.sum(rm.index_add(x, i, u, axis=0) ** 2)

    x2 = X[:, :4, 0]
    (gx, gu) = run_on(backend, rm.grad(loss, argnums=(0, 1)), rm.asarray(x2), rm.asarray(upd), rm.asarray(idx))
    out = run_on(backend, lambda x, u, i: rm.index_add(x, i, u), rm.asarray(x2), rm.asarray(upd), rm.asarray(idx))
    want = x2.copy()
    np.add.at(want, _read_at(idx, 4), upd)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    import jax

    jx, ju = jax.grad(lambda x, u: jnp.sum(x.at[idx].add(u, mode="clip") ** 2), argnums=(0, 1))(x2, upd)
    np.testing.assert_allclose(gx, jx, rtol=1e-5)
    np.testing.assert_allclose(gu, ju, rtol=1e-5)
    np.testing.assert_allclose(gu, 2 * want[_read_at(idx, 4)], rtol=1e-5)  # read where it was added


def test_vectorized_traced_indices_clamp_within_their_own_entry(backend):
    # The vectorized gather flattens entries into one axis: an index past the end of entry 0
    # used to read the first element of entry 1.
    xs = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    idx = np.array([[3, -4], [-1, 7]], np.int32)
    f = rm.vmap(lambda x, i: rm.take(x, i))
    np.testing.assert_array_equal(run_on(backend, f, rm.asarray(xs), rm.asarray(idx)), [[2.0, 0.0], [5.0, 5.0]])
    g = run_on(backend, rm.grad(lambda x, i: rm.sum(f(x, i))), rm.asarray(xs), rm.asarray(idx))
    np.testing.assert_array_equal(g, [[1.0, 0.0, 1.0], [0.0, 0.0, 2.0]])


def test_take_from_a_constant_a_checkpoint_returns_lowers_on_xla():
    # Found by the fuzzer (seed 1088): the block's constant output reaches the XLA lowering as a
    # NumPy array, which has no `.at`.
    c = np.array([1.0, 2.0, 3.0], np.float32)

    def f(x):
        y, k = rm.checkpoint(lambda h: (rm.sin(h), rm.asarray(c)), x)
        return rm.sum(rm.take(k, np.array([-1, 2, 0])) * y)

    x = rm.ones(3)
    want = np.asarray(rm.jit(rm.grad(f))(x))
    got = np.asarray(rm.jit(rm.grad(f), backend="xla")(x))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(want, np.cos(1.0) * np.array([3.0, 3.0, 1.0]), rtol=1e-6)
