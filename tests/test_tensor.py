"""The Tensor: attributes, operators (with Python scalars and NumPy arrays on either side),
conversions, printing, errors on traced values, and the errors ops raise on bad shapes."""

from __future__ import annotations

import operator
import sys

import numpy as np
import pytest

import remat as rm
from remat.trace import current_trace

A = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)
B = np.array([2.0, 0.5, -3.0], np.float32)


def here() -> int:
    """The line number of the caller."""
    return sys._getframe(1).f_lineno


# ---------------------------------------------------------------- attributes


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 0, 4), (1, 2, 3, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_shape_dtype_ndim_size(shape, dtype):
    a = np.zeros(shape, dtype)
    seen = []

    def f(x):
        seen.append((x.shape, x.dtype, x.ndim, x.size, x.is_concrete))
        return x

    t = rm.asarray(a)
    f(t)
    rm.jit(f)(t)
    want = (shape, np.dtype(dtype), len(shape), int(np.prod(shape)))
    assert seen == [want + (True,), want + (False,)]
    assert isinstance(t.shape, tuple) and isinstance(t.size, int)


# ---------------------------------------------------------------- operators

BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
          operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


def assert_same(got, want):
    assert isinstance(got, rm.Tensor)
    want = np.asarray(want)
    assert got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.__name__)
def test_binary_operators_between_tensors_broadcast(op):
    a, b = np.abs(A) + 0.5, np.abs(B) + 0.5  # positive so ** is defined
    got = op(rm.asarray(a), rm.asarray(b))
    assert_same(got, op(a, b))
    assert got.dtype == op(a, b).dtype
    assert_same(rm.jit(op)(rm.asarray(a), rm.asarray(b)), op(a, b))


@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.__name__)
@pytest.mark.parametrize("scalar", [2, 0.5, 3.0])
def test_operators_with_python_scalars_on_either_side(op, scalar):
    a = np.abs(A) + 0.5
    t = rm.asarray(a)
    assert_same(op(t, scalar), op(a, np.float32(scalar)))
    assert_same(op(scalar, t), op(np.float32(scalar), a))
    assert op(scalar, t).dtype == op(t, scalar).dtype == op(np.float32(scalar), a).dtype
    assert_same(rm.jit(lambda x: op(scalar, x))(t), op(np.float32(scalar), a))


@pytest.mark.parametrize("op", BINARY + [operator.matmul], ids=lambda o: o.__name__)
def test_numpy_array_on_the_left_gives_a_tensor(op):
    a = np.abs(A) + 0.5
    n = np.abs(A.T if op is operator.matmul else B[None]) + 0.5
    got = op(n, rm.asarray(a))
    assert isinstance(got, rm.Tensor)
    assert_same(got, op(n, a))
    assert_same(op(rm.asarray(a), n), op(a, n))


def test_numpy_scalar_on_the_left_gives_a_tensor():
    t = rm.asarray(A)
    for got, want in [(np.float32(2.0) * t, 2 * A), (np.int32(1) + t, A + 1), (np.float32(1) - t, 1 - A)]:
        assert isinstance(got, rm.Tensor)
        assert got.dtype == np.float32
        assert_same(got, want)


def test_matmul_operator_and_its_reflected_form():
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    assert_same(rm.asarray(A) @ rm.asarray(w), A @ w)
    assert_same(rm.asarray(A) @ w, A @ w)
    assert_same(A @ rm.asarray(w), A @ w)
    assert_same(rm.jit(lambda x, y: x @ y)(rm.asarray(A), rm.asarray(w)), A @ w)


def test_unary_operators():
    t = rm.asarray(A)
    assert_same(-t, -A)
    assert_same(+t, A)
    assert_same(abs(t), np.abs(A))
    assert_same(~rm.asarray([True, False]), [False, True])
    assert_same(rm.jit(lambda x: -x)(t), -A)
    ints = rm.asarray([3, -4])
    assert (-ints).dtype == np.int32
    assert_same(-ints, [-3, 4])


def test_comparisons_give_bool_tensors_and_combine_with_logical_operators():
    t = rm.asarray(A)
    got = (t > 0) & (t < 3.5) | (t == -1)
    assert got.dtype == np.bool_
    assert_same(got, (A > 0) & (A < 3.5) | (A == -1))
    assert_same(t != A, np.zeros(A.shape, bool))


def test_tensor_methods():
    t = rm.asarray(A)
    assert_same(t.T, A.T)
    assert_same(t.reshape(3, 2), A.reshape(3, 2))
    assert_same(t.reshape((6,)), A.reshape(6))
    assert_same(t.sum(axis=1), A.sum(axis=1))
    assert_same(t.mean(), A.mean())
    assert_same(t.max(axis=0, keepdims=True), A.max(axis=0, keepdims=True))
    assert_same(t.min(), A.min())
    assert t.astype("int64").dtype == np.int64
    assert_same(t.astype("int64"), A.astype(np.int64))


def test_tensors_are_unhashable_because_eq_builds_a_tensor():
    with pytest.raises(TypeError):
        hash(rm.asarray(A))


# ---------------------------------------------------------------- conversions and printing


def test_array_conversion():
    t = rm.asarray(A)
    a = np.asarray(t)
    assert type(a) is np.ndarray and a.dtype == np.float32
    np.testing.assert_array_equal(a, A)
    a64 = np.array(t, dtype=np.float64)
    assert a64.dtype == np.float64
    np.testing.assert_array_equal(a64, A.astype(np.float64))


def test_item_float_int_len_bool_on_concrete_tensors():
    s = rm.asarray(2.5)
    assert s.item() == 2.5 and isinstance(s.item(), float)
    assert float(s) == 2.5
    assert int(rm.asarray(7)) == 7
    assert rm.asarray(7).item() == 7 and isinstance(rm.asarray(7).item(), int)
    assert rm.asarray([True]).item() is True
    assert len(rm.asarray(A)) == 2
    assert bool(rm.asarray(1.0)) is True and bool(rm.asarray(0)) is False
    with pytest.raises(TypeError, match="0-d"):
        len(s)


def test_repr_of_a_concrete_tensor_shows_its_values():
    assert repr(rm.asarray([1.0, 2.5])) == "Tensor([1. , 2.5], dtype=float32)"
    assert repr(rm.asarray(3)) == "Tensor(3, dtype=int32)"
    assert repr(rm.asarray([[1, 2], [3, 4]], "int64")) == "Tensor([[1, 2],\n        [3, 4]], dtype=int64)"
    assert repr(rm.asarray([True, False])) == "Tensor([ True, False], dtype=bool)"


def test_repr_of_a_traced_tensor_shows_its_type():
    seen = []
    rm.jit(lambda x: seen.append(repr(x)) or x)(rm.asarray(A))
    assert seen == ["Tensor(traced f32[2,3] in `jit(<lambda>)`)"]


# ---------------------------------------------------------------- traced tensors need rm.where


def test_bool_on_a_traced_tensor_names_rm_where():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    line = here() - 4  # the `if`
    with pytest.raises(TypeError, match=r"rm\.where") as info:
        rm.jit(f)(rm.asarray(A))
    assert isinstance(info.value, rm.TracerError)
    assert f"test_tensor.py:{line}" in str(info.value)
    assert_same(rm.jit(lambda x: rm.where(x.sum() > 0, x, -x))(rm.asarray(A)), A)


@pytest.mark.parametrize(
    "use", [bool, float, int, lambda x: x.item(), np.asarray, lambda x: list(range(3))[x]],
    ids=["bool", "float", "int", "item", "asarray", "index"],
)
def test_concrete_only_conversions_of_traced_tensors_raise_type_errors(use):
    with pytest.raises(TypeError, match="traced"):
        rm.jit(lambda x: use(x))(rm.asarray(1))
    assert current_trace() is None


def test_escaped_tracer_raises_a_type_error():
    leaked = []
    rm.jit(lambda x: leaked.append(x) or x)(rm.asarray(A))
    with pytest.raises(TypeError, match="escaped"):
        leaked[0] + 1.0
    with pytest.raises(TypeError, match="escaped"):
        rm.jit(lambda y: y + leaked[0])(rm.asarray(A))
    assert_same(rm.jit(lambda y: y + 1.0)(rm.asarray(A)), A + 1)


# ---------------------------------------------------------------- shape errors

X48 = np.ones((4, 8), np.float32)

SHAPE_ERRORS = [
    ("add", lambda: rm.asarray(X48) + rm.ones((3,)), ["(4, 8)", "(3,)"]),
    ("multiply", lambda: rm.ones((2, 3)) * X48, ["(2, 3)", "(4, 8)"]),
    ("matmul", lambda: rm.asarray(X48) @ rm.asarray(X48), ["(4, 8)"]),
    ("matmul", lambda: rm.matmul(rm.asarray(1.0), rm.asarray(X48)), ["()", "(4, 8)"]),
    ("concat", lambda: rm.concat([rm.asarray(X48), rm.ones((4, 3))]), ["(4, 8)", "(4, 3)"]),
    ("reshape", lambda: rm.reshape(rm.asarray(X48), (5, 6)), ["(4, 8)", "(5, 6)"]),
    ("broadcast_to", lambda: rm.broadcast_to(rm.asarray(X48), (3, 8)), ["(4, 8)", "(3, 8)"]),
    ("where", lambda: rm.where(rm.ones((3,)) > 0, rm.asarray(X48), 0.0), ["(3,)", "(4, 8)"]),
    ("tensordot", lambda: rm.tensordot(rm.asarray(X48), rm.ones((4, 8)), ([1], [0])), ["(4, 8)"]),
    ("slice", lambda: rm.slice(rm.asarray(X48), (0, 0), (5, 8)), ["(4, 8)"]),
]


@pytest.mark.parametrize("op,call,shapes", SHAPE_ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(SHAPE_ERRORS)])
def test_shape_errors_name_op_shapes_and_source_line(op, call, shapes):
    line = call.__code__.co_firstlineno
    for run in (call, lambda: rm.jit(lambda x: call())(rm.ones(1))):
        with pytest.raises(ValueError) as info:
            run()
        assert isinstance(info.value, rm.ShapeError)
        msg = str(info.value)
        assert msg.startswith(f"{op}:"), msg
        for s in shapes:
            assert s in msg, msg
        assert f"test_tensor.py:{line}" in msg, msg
        assert current_trace() is None


def test_after_errors_the_next_trace_works_normally():
    def bad(x):
        return x @ rm.ones((3, 3))

    for _ in range(2):
        with pytest.raises(rm.ShapeError):
            rm.jit(bad)(rm.asarray(X48))
        with pytest.raises(rm.ShapeError):
            rm.grad(lambda x: rm.sum(rm.checkpoint(bad, x)))(rm.asarray(X48))
        with pytest.raises(rm.ShapeError):
            rm.make_graph(lambda x: rm.jit(bad)(x))(rm.asarray(X48))
        assert current_trace() is None
    g = rm.make_graph(lambda x: rm.tanh(x * 2.0))(rm.asarray(X48))
    assert str(g) == (
        "graph(a:f32[4,8]) {\n  b:f32[4,8] = multiply a 2.0\n  c:f32[4,8] = tanh b\n  return c\n}"
    )
    assert_same(rm.jit(lambda x: x @ rm.ones((8, 2)))(rm.asarray(X48)), np.full((4, 2), 8.0))
    assert_same(rm.grad(lambda x: rm.sum(x * x))(rm.asarray(X48)), 2 * X48)


def test_shape_error_is_a_remat_error_and_a_value_error():
    assert issubclass(rm.ShapeError, ValueError) and issubclass(rm.ShapeError, rm.RematError)
    assert issubclass(rm.DTypeError, TypeError) and issubclass(rm.TracerError, TypeError)
