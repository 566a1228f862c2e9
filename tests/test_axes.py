"""Axis and shape arguments: negative axes count from the end as in NumPy; an axis out of range,
of the wrong type or traced is an error naming the function and the value as written — never
taken modulo the rank — and a shape is a tuple of Python ints known when tracing."""

from __future__ import annotations

import re

import numpy as np
import pytest

import remat as rm
from conftest import run_on
from remat.trace import current_trace

A = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)

# (name, remat call, NumPy call): negative and positive axes, compared value for value.
NEGATIVE_AXES = [
    ("sum", lambda x: rm.sum(x, axis=-1), lambda a: a.sum(axis=-1)),
    ("sum-tuple", lambda x: rm.sum(x, axis=(-1, 0)), lambda a: a.sum(axis=(-1, 0))),
    ("mean", lambda x: rm.mean(x, axis=-2, keepdims=True), lambda a: a.mean(axis=-2, keepdims=True)),
    ("prod", lambda x: rm.prod(x, axis=-3), lambda a: a.prod(axis=-3)),
    ("max", lambda x: rm.max(x, axis=(-2, -1)), lambda a: a.max(axis=(-2, -1))),
    ("min", lambda x: rm.min(x, axis=-1), lambda a: a.min(axis=-1)),
    ("argmax", lambda x: rm.argmax(x, axis=-2), lambda a: a.argmax(axis=-2).astype(np.int32)),
    ("argmin", lambda x: rm.argmin(x, axis=-1), lambda a: a.argmin(axis=-1).astype(np.int32)),
    ("transpose", lambda x: rm.transpose(x, (-1, 0, -2)), lambda a: a.transpose(-1, 0, -2)),
    ("permute_dims", lambda x: rm.permute_dims(x, [2, -3, 1]), lambda a: a.transpose(2, 0, 1)),
    ("flip", lambda x: rm.flip(x, -1), lambda a: np.flip(a, -1)),
    ("expand_dims", lambda x: rm.expand_dims(x, -1), lambda a: np.expand_dims(a, -1)),
    ("expand_dims-tuple", lambda x: rm.expand_dims(x, (0, -1)), lambda a: np.expand_dims(a, (0, -1))),
    ("squeeze", lambda x: rm.squeeze(x[:, :1], -2), lambda a: np.squeeze(a[:, :1], -2)),
    ("concat", lambda x: rm.concat([x, x], axis=-1), lambda a: np.concatenate([a, a], axis=-1)),
    ("stack", lambda x: rm.stack([x, x], axis=-1), lambda a: np.stack([a, a], axis=-1)),
    ("take", lambda x: rm.take(x, [2, -1], axis=-1), lambda a: np.take(a, [2, -1], axis=-1)),
    ("tensordot", lambda x: rm.tensordot(x, x, ([-1, 0], [2, -3])),
     lambda a: np.tensordot(a, a, ([-1, 0], [2, -3]))),
    ("tensordot-int", lambda x: rm.tensordot(x, rm.permute_dims(x, (1, 2, 0)), 2),
     lambda a: np.tensordot(a, a.transpose(1, 2, 0), 2)),
    ("numpy-int-axis", lambda x: rm.sum(x, axis=np.int64(-1)), lambda a: a.sum(axis=-1)),
]


@pytest.mark.parametrize("name,call,expected", NEGATIVE_AXES, ids=[c[0] for c in NEGATIVE_AXES])
def test_axes_count_from_the_end_as_in_numpy(name, call, expected, backend):
    want = expected(A)
    for out in (np.asarray(call(rm.asarray(A))), run_on(backend, call, rm.asarray(A))):
        assert out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=1e-6)


# (remat call on a (2, 3, 4) tensor, error, the message after "fn: "). Each of these used to
# wrap the axis modulo the rank, or fail deep inside NumPy.
BAD_AXES = [
    (lambda x: rm.transpose(x, (0, 1, 3)), rm.ArgumentValueError,
     r"transpose: axes \(0, 1, 3\): axis 3 is out of range for a 3-d tensor"),
    (lambda x: rm.transpose(x, (0, 1)), rm.ArgumentValueError,
     r"transpose: axes \(0, 1\) is not a permutation of the 3 axes of a tensor of shape \(2, 3, 4\)"),
    (lambda x: rm.permute_dims(x, (2, 2, 0)), rm.ArgumentValueError,
     r"permute_dims: axes \(2, 2, 0\) is not a permutation"),
    (lambda x: rm.tensordot(x, x, ([5], [0])), rm.ArgumentValueError,
     r"tensordot: axes \(\[5\], \[0\]\): axis 5 is out of range for a 3-d tensor"),
    (lambda x: rm.tensordot(x, x, (0, -4)), rm.ArgumentValueError,
     r"tensordot: axes \(0, -4\): axis -4 is out of range"),
    (lambda x: rm.tensordot(x, rm.ones((4,)), 2), rm.ArgumentValueError,
     r"tensordot: axes 2 must be from 0 to 1, the smaller rank of the operands \(2, 3, 4\) and \(4,\)"),
    (lambda x: rm.tensordot(x, x, ([0, 0], [0, 1])), rm.ArgumentValueError,
     r"tensordot: axes \(\[0, 0\], \[0, 1\]\) names an axis of the \(2, 3, 4\) operand twice"),
    (lambda x: rm.tensordot(x, x, ([0], [0], [0])), rm.ArgumentValueError,
     r"tensordot: axes .* must be an int or a pair"),
    (lambda x: rm.sum(x, axis=3), rm.ArgumentValueError, r"sum: axis 3 is out of range for a 3-d tensor"),
    (lambda x: rm.sum(x, axis=-4), rm.ArgumentValueError, r"sum: axis -4 is out of range for a 3-d tensor"),
    (lambda x: rm.mean(x, axis=(0, 7)), rm.ArgumentValueError, r"mean: axis \(0, 7\): axis 7 is out of range"),
    (lambda x: rm.prod(x, axis=(0, -3)), rm.ArgumentValueError, r"prod: axis \(0, -3\) names axis 0 twice"),
    (lambda x: rm.max(x, axis=3), rm.ArgumentValueError, r"max: axis 3 is out of range"),
    (lambda x: rm.min(x, axis=-4), rm.ArgumentValueError, r"min: axis -4 is out of range"),
    (lambda x: rm.argmax(x, axis=3), rm.ArgumentValueError, r"argmax: axis 3 is out of range"),
    (lambda x: rm.argmin(x, axis=-4), rm.ArgumentValueError, r"argmin: axis -4 is out of range"),
    (lambda x: rm.squeeze(x, 3), rm.ArgumentValueError, r"squeeze: axis 3 is out of range"),
    (lambda x: rm.expand_dims(x, 4), rm.ArgumentValueError, r"expand_dims: axis 4 is out of range for a 4-d tensor"),
    (lambda x: rm.expand_dims(x, -5), rm.ArgumentValueError, r"expand_dims: axis -5 is out of range"),
    (lambda x: rm.stack([x, x], axis=4), rm.ArgumentValueError, r"stack: axis 4 is out of range for a 4-d tensor"),
    (lambda x: rm.concat([x, x], axis=3), rm.ArgumentValueError, r"concat: axis 3 is out of range for a 3-d tensor"),
    (lambda x: rm.flip(x, (0, -4)), rm.ArgumentValueError, r"flip: axis \(0, -4\): axis -4 is out of range"),
    (lambda x: rm.take(x, [0], axis=-4), rm.ArgumentValueError, r"take: axis -4 is out of range"),
    (lambda x: rm.sum(x, axis=1.5), rm.ArgumentTypeError,
     r"sum: axis must be None, an int or a tuple of ints, got 1\.5 \(float\)"),
    (lambda x: rm.sum(x, axis="a"), rm.ArgumentTypeError,
     r"sum: axis must be None, an int or a tuple of ints, got 'a' \(str\)"),
    (lambda x: rm.mean(x, axis=[0, "b"]), rm.ArgumentTypeError,
     r"mean: axis \[0, 'b'\] has an entry 'b' \(str\); its entries must be ints"),
    (lambda x: rm.max(x, axis=False), rm.ArgumentTypeError,
     r"max: axis must be None, an int or a tuple of ints, got False \(bool\)"),
    (lambda x: rm.argmax(x, axis=(0,)), rm.ArgumentTypeError, r"argmax: axis must be an int or None, got \(0,\)"),
    (lambda x: rm.transpose(x, "abc"), rm.ArgumentTypeError, r"transpose: axes must be a sequence of ints, got 'abc'"),
    (lambda x: rm.concat([x], axis=None), rm.ArgumentTypeError, r"concat: axis must be an int, got None"),
    (lambda x: rm.flip(x, 0.0), rm.ArgumentTypeError, r"flip: axis must be None, an int or a tuple of ints, got 0\.0"),
    (lambda x: rm.take(x, [0], axis=1.0), rm.ArgumentTypeError, r"take: axis must be an int, got 1\.0"),
    (lambda x: rm.tensordot(x, x, "ab"), rm.ArgumentTypeError,
     r"tensordot: axes must be an int or a pair of axis sequences, got 'ab'"),
]


@pytest.mark.parametrize("call,error,says", BAD_AXES, ids=[f"{c[2].split(':')[0]}-{i}" for i, c in enumerate(BAD_AXES)])
def test_bad_axes_raise_naming_the_function_and_the_axis_as_written(call, error, says):
    line = call.__code__.co_firstlineno
    for run in (lambda: call(rm.asarray(A)), lambda: rm.jit(call)(rm.asarray(A))):
        with pytest.raises(error, match=rf"^{says}.* \(at test_axes\.py:{line}\)$"):
            run()
        assert current_trace() is None


def test_transpose_with_an_out_of_range_axis_no_longer_returns_x():
    x = rm.ones((2, 3))
    with pytest.raises(rm.ArgumentValueError):
        rm.transpose(x, (0, 3))  # was x itself: (0, 3) was read as (0, 1)


def test_tensordot_axes_are_not_wrapped():
    a, b = rm.ones((2, 3)), rm.ones((3, 2))
    with pytest.raises(rm.ArgumentValueError, match=r"axis 5"):
        rm.tensordot(a, b, ([5], [0]))  # was contracted over axis 1 (5 % 2)
    np.testing.assert_array_equal(rm.tensordot(a, b, ([-1], [0])), np.full((2, 2), 3.0))
    np.testing.assert_array_equal(rm.tensordot(a, b, 0), np.ones((2, 3, 3, 2)))


# ---------------------------------------------------------------- shapes


def test_shape_entries_are_python_ints_not_truncated_floats():
    with pytest.raises(rm.ArgumentTypeError, match=r"^reshape: shape \(1\.5, 4\) has an entry 1\.5 \(float\)"):
        rm.reshape(rm.ones(4), (1.5, 4))  # was reshaped to (1, 4)
    with pytest.raises(rm.ArgumentTypeError, match=r"^reshape: shape must be an int or a tuple of ints, got 4\.0"):
        rm.ones(4).reshape(4.0)
    with pytest.raises(rm.ArgumentTypeError, match=r"^broadcast_to: shape \(2, True\)"):
        rm.broadcast_to(rm.ones(1), (2, True))
    with pytest.raises(rm.ArgumentTypeError, match=r"^slice: stop \(1\.9,\)"):
        rm.slice(rm.ones(4), (0,), (1.9,))  # was the slice 0:1
    with pytest.raises(rm.ArgumentTypeError, match=r"^pad: hi \(0\.5,\)"):
        rm.pad(rm.ones(4), (0,), (0.5,))


def test_shapes_accept_numpy_ints_and_concrete_tensors():
    x = rm.asarray(np.arange(6.0, dtype=np.float32))
    assert rm.reshape(x, (np.int64(2), rm.asarray(3))).shape == (2, 3)
    assert rm.reshape(x, np.array([3, -1])).shape == (3, 2)
    assert rm.reshape(x, 6).shape == (6,)
    assert rm.broadcast_to(x, [np.int32(2), 6]).shape == (2, 6)
    assert x.reshape(3, 2).shape == (3, 2)


@pytest.mark.parametrize(
    "shape,error,says",
    [
        ((-2, -3), rm.ArgumentValueError, r"reshape: shape \(-2, -3\) has a negative size -2; only -1"),
        ((-1, -1), rm.ArgumentValueError, r"reshape: shape \(-1, -1\) has more than one -1"),
        ([4, -1], rm.ShapeError, r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(4, -1\)"),
        ((5,), rm.ShapeError, r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(5,\)"),
        ((0, -1), rm.ShapeError, r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(0, -1\)"),
    ],
)
def test_reshape_errors_name_both_shapes_as_tuples(shape, error, says):
    with pytest.raises(error, match="^" + says):
        rm.reshape(rm.ones((2, 3)), shape)


def test_broadcast_to_rejects_negative_sizes():
    with pytest.raises(rm.ArgumentValueError, match=r"^broadcast_to: shape \(-1, 3\) has a negative size -1"):
        rm.broadcast_to(rm.ones(3), (-1, 3))


@pytest.mark.parametrize(
    "call,fn",
    [
        (lambda: rm.reshape(rm.ones(1), (1,) * 65), "reshape"),
        (lambda: rm.broadcast_to(rm.ones(1), (1,) * 65), "broadcast_to"),
        (lambda: rm.expand_dims(rm.ones((1,) * 63), (0, 1)), "expand_dims"),
        (lambda: rm.stack([rm.ones((1,) * 64)]), "stack"),
    ],
)
def test_rank_above_64_is_an_error_naming_the_function(call, fn):
    with pytest.raises(rm.ArgumentValueError, match=rf"^{fn}: .*65 dimensions, more than the 64"):
        call()


def test_rank_64_is_allowed():
    x = rm.reshape(rm.ones(2), (1,) * 63 + (2,))
    assert x.ndim == 64
    assert rm.sum(x, axis=-1).shape == (1,) * 63


@pytest.mark.parametrize("fn", ["concat", "stack"])
def test_joining_nothing_is_an_argument_value_error(fn):
    with pytest.raises(rm.ArgumentValueError, match=rf"^{fn}: needs at least one tensor, got an empty sequence"):
        getattr(rm, fn)([])
    with pytest.raises(rm.ArgumentValueError):
        getattr(rm, fn)(iter([]))


def test_stack_of_different_shapes_names_stack():
    with pytest.raises(rm.ShapeError, match=r"^stack: tensors must share one shape, got \(2,\) and \(3,\)"):
        rm.stack([rm.ones(2), rm.ones(3)])


def test_matrix_transpose_needs_two_axes():
    with pytest.raises(rm.ShapeError, match=r"^matrix_transpose: .*\(3,\)"):
        rm.matrix_transpose(rm.ones(3))  # was x unchanged
    np.testing.assert_array_equal(rm.matrix_transpose(rm.asarray(A)), np.swapaxes(A, -1, -2))


# ---------------------------------------------------------------- traced values as shapes and axes


def _reshape_by(x, n):
    return rm.reshape(x, (n, 3))  # the line the error must point at


def _sum_over(x, axis):
    return rm.sum(x, axis=axis)  # the line the error must point at


@pytest.mark.parametrize("fn,arg,says", [(_reshape_by, 2, r"^reshape: shape \(Tensor\(traced"),
                                         (_sum_over, 1, r"^sum: axis is a tensor traced")])
def test_traced_shape_or_axis_points_at_the_user_line_and_suggests_static_arguments(fn, arg, says, backend):
    x = rm.ones((2, 3))
    line = fn.__code__.co_firstlineno + 1
    with pytest.raises(rm.TracerError) as info:
        rm.jit(fn, backend=backend)(x, rm.asarray(arg))
    message = str(info.value)
    assert re.search(says, message), message
    assert "pass the value as a static argument" in message
    assert message.endswith(f"(at test_axes.py:{line})")
    assert current_trace() is None
    # The fix the message gives works.
    out = rm.jit(fn, backend=backend, static_argnums=1)(x, arg)
    assert out.shape == ((2, 3) if fn is _reshape_by else (2,))
