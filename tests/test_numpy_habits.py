"""NumPy habits on tensors (remat/numpy_habits.py): `np.exp(t)` and `np.sum(t)` run as remat's
functions, traced and differentiable; NumPy functions remat lacks run on a concrete tensor's
value and raise on a traced one; `rm.asarray([a, b])` of tensors stacks them as `jnp.asarray`
does; `y[0] = v` says to write `y.at[0].set(v)`."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from conftest import run_on

A = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
B = np.array([[1.0, 2.0, -3.0], [0.5, -0.5, 4.0]], np.float32)
M = np.array([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]], np.float32)

# (name, the call on tensors or arrays, its arguments): NumPy on arrays is the reference.
DISPATCHED = [
    ("exp", lambda a: np.exp(a), (A,)),
    ("tanh", lambda a: np.tanh(a), (A,)),
    ("abs", lambda a: np.abs(a), (A,)),
    ("sqrt-of-square", lambda a: np.sqrt(np.square(a)), (A,)),
    ("add-scalar", lambda a: np.add(a, 1.0), (A,)),
    ("add-array-first", lambda a: np.add(B, a), (A,)),
    ("maximum", lambda a, b: np.maximum(a, b), (A, B)),
    ("power", lambda a: np.power(a, 2.0), (A,)),
    ("matmul", lambda a, m: np.matmul(a, m), (A, M)),
    ("sum-axis", lambda a: np.sum(a, axis=0), (A,)),
    ("sum", lambda a: np.sum(a), (A,)),
    ("mean-keepdims", lambda a: np.mean(a, axis=1, keepdims=True), (A,)),
    ("max", lambda a: np.max(a, axis=-1), (A,)),
    ("where", lambda a, b: np.where(a > b, a, 0.0), (A, B)),
    ("concatenate", lambda a, b: np.concatenate([a, b], axis=1), (A, B)),
    ("stack", lambda a, b: np.stack([a, b], axis=-1), (A, B)),
    ("reshape", lambda a: np.reshape(a, (3, 2)), (A,)),
    ("transpose", lambda a: np.transpose(a), (A,)),
    ("clip", lambda a: np.clip(a, -0.5, 1.0), (A,)),
    ("cumsum", lambda a: np.cumsum(a, axis=1), (A,)),
    ("linalg-norm", lambda a: np.linalg.norm(a, axis=1), (A,)),
    ("array-plus-tensor", lambda a: B + a, (A,)),
]


@pytest.mark.parametrize("name, fn, args", DISPATCHED, ids=[c[0] for c in DISPATCHED])
def test_numpy_functions_on_tensors_run_as_remat_functions(name, fn, args):
    want = fn(*args)
    got = fn(*(rm.asarray(a) for a in args))
    assert isinstance(got, rm.Tensor) and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name, fn, args", DISPATCHED, ids=[c[0] for c in DISPATCHED])
def test_numpy_functions_on_tensors_are_traced_by_jit(name, fn, args, backend):
    np.testing.assert_allclose(run_on(backend, fn, *args), fn(*args), rtol=1e-5, atol=1e-6)


def test_the_graph_holds_remat_ops_not_a_numpy_constant():
    graph = rm.make_graph(lambda x: np.sum(np.exp(x), axis=0))(rm.asarray(A))
    assert [n.op for n in graph.nodes] == ["exp", "sum"]
    assert not graph.constants


def test_gradients_flow_through_numpy_calls(backend):
    x = rm.asarray(A)
    g = rm.grad(lambda x: np.sum(np.exp(x)))(x)
    np.testing.assert_allclose(np.asarray(g), np.exp(A), rtol=1e-6)
    g = rm.jit(rm.grad(lambda x: np.mean(np.tanh(x) * 2.0)), backend=backend)(x)
    want = jax.grad(lambda x: jnp.mean(jnp.tanh(x) * 2.0))(A)
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-6)


def test_numpy_functions_under_vmap():
    out = rm.vmap(lambda row: np.sum(np.exp(row)))(rm.asarray(A))
    np.testing.assert_allclose(np.asarray(out), np.exp(A).sum(axis=1), rtol=1e-6)


def test_shape_ndim_and_size_need_no_value():
    seen = []
    rm.jit(lambda x: seen.append((np.shape(x), np.ndim(x), np.size(x), np.size(x, 1))) or x)(A)
    assert seen == [((2, 3), 2, 6, 3)]


def test_keyword_arguments_remat_lacks_are_errors():
    t = rm.asarray(A)
    with pytest.raises(rm.ArgumentTypeError, match=re.escape(
            "np.sum runs as rm.sum on a remat tensor: dtype= is not an argument of rm.sum(x, axis=None, "
            "keepdims=False)")):
        np.sum(t, dtype=np.float64)
    with pytest.raises(rm.ArgumentTypeError, match=r"np\.exp runs as rm\.exp .* where= is not an argument"):
        np.exp(t, where=A > 0)
    with pytest.raises(rm.ArgumentTypeError, match=r"out= is not an argument of rm\.max.*immutable: drop out="):
        np.max(t, out=np.zeros(()))
    np.testing.assert_allclose(np.asarray(np.sum(t, axis=0, out=None)), A.sum(axis=0))  # NumPy's default, spelled out


# ---------------------------------------------------------------- NumPy functions remat lacks


def test_numpy_functions_remat_lacks_run_on_a_concrete_tensors_value():
    t = rm.asarray(A)
    for got, want in [(np.cbrt(t), np.cbrt(A)), (np.diff(t, axis=1), np.diff(A, axis=1)),
                      (np.add.reduce(t), np.add.reduce(A)), (np.multiply.outer(t[0], t[1]), np.outer(A[0], A[1])),
                      (np.dot(t, M), A @ M)]:
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.allclose(t, A) and np.array_equal(t, A)
    rows, cols = np.where(t > 1.0)  # the one-argument form is np.nonzero's: NumPy's
    assert rows.tolist() == [0, 1] and cols.tolist() == [2, 0]


def test_writing_into_a_numpy_array_from_a_concrete_tensor():
    a = np.zeros(3, np.float32)
    a += rm.asarray([1.0, 2.0, 3.0])  # NumPy's in-place add: `a` stays the array it was
    assert isinstance(a, np.ndarray) and a.tolist() == [1.0, 2.0, 3.0]
    np.add.at(a, [0, 0], rm.asarray([1.0, 1.0]))
    assert a.tolist() == [3.0, 2.0, 3.0]


@pytest.mark.parametrize("transform", ["jit", "grad", "vmap"])
def test_numpy_functions_remat_lacks_raise_on_a_traced_tensor(transform):
    where = r"vectorized over 'vmap\d*'" if transform == "vmap" else r"traced inside `"
    wrapped = {"jit": rm.jit, "grad": rm.grad, "vmap": rm.vmap}[transform]
    with pytest.raises(rm.TracerError, match=rf"^np\.cbrt has no remat equivalent, so it cannot be traced: "
                                             rf"NumPy needs a concrete value, but this tensor is {where}"):
        wrapped(lambda x: np.sum(np.cbrt(x)))(rm.asarray(A))


@pytest.mark.parametrize("fn, says", [
    (lambda x: np.diff(x), r"np\.diff has no remat equivalent.*write it with remat's functions"),
    (lambda x: np.dot(x, x.T), r"np\.dot has no remat equivalent.*write a @ b \(rm\.matmul\)"),
    (lambda x: np.fft.fft(x), r"np\.fft\.fft has no remat equivalent"),
    (lambda x: np.where(x > 1.0), r"np\.where with these arguments has no remat equivalent \(rm\.where\(condition, "
     r"x, y\): missing a required argument: 'x'\).*np\.where\(mask\) is np\.nonzero\(mask\)"),
    (lambda x: np.add.reduce(x), r"remat does not run np\.add\.reduce.*write rm\.sum\(x, axis=0\)"),
    (lambda x: np.maximum.reduce(x), r"remat does not run np\.maximum\.reduce.*write rm\.max\(x, axis=0\)"),
    (lambda x: np.multiply.accumulate(x), r"np\.multiply\.accumulate.*write rm\.cumprod\(x, axis=0\)"),
    (lambda x: np.multiply.outer(x, x), r"np\.multiply\.outer.*rm\.outer\(a, b\) for 1-d a and b"),
    (lambda x: np.add.outer(x, x), r"np\.add\.outer.*write np\.add\(a\.reshape\(a\.shape \+ \(1,\) \* b\.ndim\), b\)"),
    (lambda x: np.add.at(np.zeros(3), 0, x[0, 0]), r"remat does not run np\.add\.at.*x = rm\.asarray\(a\)\.at\[idx\]"),
    (lambda x: np.add(np.zeros(3), x[0], out=np.zeros(3)),
     r"np\.add\(\.\.\., out=a\) writes into the NumPy array a in place, so it cannot be traced.*a = a \+ t"),
])
def test_traced_calls_numpy_alone_can_run_name_what_to_write(fn, says):
    with pytest.raises(rm.TracerError, match=says):
        rm.jit(fn)(A)


def test_an_in_place_add_into_a_numpy_array_raises_when_traced():
    def f(x):
        a = np.zeros(3, np.float32)
        a += x
        return a

    with pytest.raises(rm.TracerError, match=r"`a = a \+ t` for `a \+= t`"):
        rm.jit(f)(np.ones(3, np.float32))


def test_numpy_cannot_write_into_a_tensor():
    t = rm.asarray(A)
    with pytest.raises(rm.ArgumentTypeError, match=r"np\.exp\(\.\.\., out=\.\.\.\): remat tensors are immutable"):
        np.exp(A, out=t)
    with pytest.raises(rm.ArgumentTypeError, match=re.escape("np.add.at(x, idx, v) updates x in place, and remat "
                                                             "tensors are immutable; write x = x.at[idx].add(v)")):
        np.add.at(t, 0, 1.0)
    with pytest.raises(rm.ArgumentTypeError, match=re.escape("x = x.at[idx].min(v)")):
        np.minimum.at(t, 0, 1.0)
    np.testing.assert_array_equal(np.asarray(t), A)  # unchanged


# ---------------------------------------------------------------- rm.asarray of tensors


def test_asarray_stacks_concrete_tensors_as_jnp_asarray_does():
    a, b = rm.asarray(A[0]), rm.asarray(B[0])
    got = rm.asarray([a, b])
    want = jnp.asarray([jnp.asarray(A[0]), jnp.asarray(B[0])])
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    scalars = rm.asarray([[a[0], 1.0], (2, b[2])])
    np.testing.assert_array_equal(np.asarray(scalars), np.asarray(jnp.asarray([[A[0, 0], 1.0], [2, B[0, 2]]])))


@pytest.mark.parametrize("entries, want", [
    ((rm.asarray(3, "int32"), 2.5), np.float32),  # a weak float makes an int tensor float32, as in JAX
    ((rm.asarray(3, "int32"), 7), np.int32),
    ((rm.asarray(1.0, "bfloat16"), 2.0), rm.bfloat16),  # weak: bfloat16 stays
    ((rm.asarray(1.0, "float16"), rm.asarray(2.0, "float32")), np.float32),
    ((rm.asarray(True), 1), np.int32),
    ((rm.asarray(1.0), np.float64(2.0)), np.float64),  # a NumPy scalar is not weak
])
def test_asarray_of_tensors_promotes_as_jax(entries, want):
    got = rm.asarray(list(entries))
    assert got.dtype == want
    np.testing.assert_array_equal(np.asarray(got, np.float64), [float(e) for e in entries])
    if want != np.float64:  # JAX without x64 has no float64 to compare with
        theirs = [jnp.asarray(np.asarray(e)) if isinstance(e, rm.Tensor) else e for e in entries]
        assert jnp.asarray(theirs).dtype == want


def test_asarray_of_tensors_with_a_dtype():
    got = rm.asarray([rm.asarray(1.5), 2], dtype="float64")
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(got), [1.5, 2.0])


def test_asarray_stacks_traced_tensors(backend):
    f = lambda x: rm.asarray([[x[0, 0], 2 * x[1, 1]], [3.0, rm.sum(x)]])  # noqa: E731
    want = jnp.asarray([[A[0, 0], 2 * A[1, 1]], [3.0, A.sum()]])
    got = run_on(backend, f, A)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)
    g = rm.jit(rm.grad(lambda x: rm.sum(f(x) ** 2)), backend=backend)(A)
    want_g = jax.grad(lambda x: jnp.sum(jnp.asarray([[x[0, 0], 2 * x[1, 1]], [3.0, jnp.sum(x)]]) ** 2))(A)
    np.testing.assert_allclose(np.asarray(g), np.asarray(want_g), rtol=1e-5)


def test_asarray_stacks_rows_under_vmap():
    out = rm.vmap(lambda row: rm.asarray([row[0], row[1] * 2.0]))(rm.asarray(A))
    np.testing.assert_allclose(np.asarray(out), np.stack([A[:, 0], A[:, 1] * 2], axis=1))


def test_asarray_of_ragged_tensors_is_a_shape_error():
    with pytest.raises(rm.ShapeError, match=re.escape("asarray: the nested list of tensors is ragged: its entry 1 "
                                                      "has shape (2,) and entry 0 has (3,)")):
        rm.asarray([rm.asarray(A[0]), rm.asarray(A[0, :2])])
    with pytest.raises(rm.ShapeError, match=r"entry 1 has shape \(\) and entry 0 has \(3,\)"):
        rm.jit(lambda x: rm.asarray([x[0], 1.0]))(A)


def test_asarray_of_tensors_checks_python_numbers_fit():
    with pytest.raises(rm.ValueOverflow, match=r"asarray: the Python int 1099511627776 does not fit int32"):
        rm.asarray([rm.asarray(1, "int32"), 2**40])


# ---------------------------------------------------------------- y[0] = v


@pytest.mark.parametrize("index, shown", [
    (0, "0"), (slice(1, 3), "1:3"), ((Ellipsis, 0), "..., 0"), (slice(None, None, 2), "::2"),
    ((slice(None), None, -1), ":, None, -1"), (np.int64(1), "1"), ((), "()"),
    (np.array([True, False]), "idx"), ([0, 1], "idx"),
])
def test_item_assignment_says_to_use_at_set(index, shown):
    y = rm.asarray(A)
    with pytest.raises(rm.ArgumentTypeError, match=re.escape(
            f"x[{shown}] = v: remat tensors are immutable (as JAX arrays are), so they cannot be assigned into; "
            f"write x = x.at[{shown}].set(v)")) as info:
        y[index] = rm.ones(())
    assert isinstance(info.value, TypeError)
    np.testing.assert_array_equal(np.asarray(y), A)


def test_item_assignment_shows_a_python_number_and_raises_when_traced():
    with pytest.raises(rm.ArgumentTypeError, match=re.escape("x = x.at[1:3].set(2.0)")):
        rm.asarray(A)[1:3] = 2.0

    def f(y):
        y[0] = 1.0
        return y

    with pytest.raises(rm.ArgumentTypeError, match=re.escape("write x = x.at[0].set(1.0)")):
        rm.jit(f)(A)
