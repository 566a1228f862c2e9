"""`x[index]` against NumPy: ints, slices with any step, None, `...`, one integer tensor or array,
and their combinations; eagerly, inside `rm.jit` with the index fixed, and with the integer
index passed to `jit` as a traced argument."""

from __future__ import annotations

import numpy as np
import pytest

import remat as rm
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


@pytest.mark.parametrize(
    "index",
    [I[4], I[-5], I[0, 5], I[0, 0, 6], I[:, :, -7], I[..., 6], I[0, 0, 0, 0], I[1, ..., 1, ..., 1],
     I[np.array([0.0])], I[np.array([0]), np.array([0])]],
    ids=_ids,
)
def test_bad_indices_raise_index_error(index):
    with pytest.raises(IndexError):
        rm.asarray(X)[index]
    with pytest.raises(IndexError):
        rm.jit(lambda x: x[index])(rm.asarray(X))
    assert current_trace() is None
    assert_matches(rm.jit(lambda x: x[0])(rm.asarray(X)), X[0])


def test_out_of_range_int_error_names_index_axis_and_size():
    with pytest.raises(IndexError, match=r"index 7 is out of bounds for axis 1 with size 5"):
        rm.asarray(X)[0, 7]


def test_out_of_range_tensor_index_raises_index_error():
    with pytest.raises(IndexError):
        rm.asarray(X)[np.array([0, 4])]
    with pytest.raises(IndexError):
        rm.asarray(X)[:, rm.asarray([-6])]
    with pytest.raises(IndexError):
        rm.jit(lambda x, i: x[i])(rm.asarray(X), rm.asarray([9]))
    # The failed run leaves nothing behind: the same function works on good indices.
    assert_matches(rm.jit(lambda x, i: x[i])(rm.asarray(X), rm.asarray([3])), X[[3]])
