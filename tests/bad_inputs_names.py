"""Bad inputs to the names of issue 11 (what NumPy and JAX users type first): einsum subscripts
that do not match, split sections that do not divide, axes out of range, integer division by
zero, norms that do not exist, functional updates that do not fit, boolean masks that are
traced, and random draws from empty ranges."""

from __future__ import annotations

import numpy as np

import remat as rm
from bad_inputs import Case

X = rm.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
V = rm.ones((3,))
I = rm.asarray([1, 2, 3])  # noqa: E741
KEY = rm.random.key(0)
E = rm.ArgumentValueError
T = rm.ArgumentTypeError
S = rm.ShapeError
D = rm.DTypeError
AT = r"\(at bad_inputs_names\.py:\d+\)"  # the user's line: the case's lambda


def _traced(fn, *args):
    """`fn(X, *args)` with every argument traced by jit."""
    return lambda: rm.jit(fn)(X, *args)


CASES: list[Case] = [
    # einsum: subscripts that do not match the operands
    Case("names-einsum-subscripts-not-str", lambda: rm.einsum(3, X), T, (r"^einsum:", r"subscripts", r"int 3")),
    Case("names-einsum-too-few-operands", lambda: rm.einsum("ij,jk->ik", X), E,
         (r"^einsum:", r"'ij,jk->ik'", r"name 2 operand", r"got 1")),
    Case("names-einsum-rank-mismatch", lambda: rm.einsum("ijk->i", X), S,
         (r"^einsum:", r"'ijk->i'", r"operand 0 has shape \(2, 3\)", r"'ijk' names 3", AT)),
    Case("names-einsum-sizes-differ", lambda: rm.einsum("ij,jk->ik", X, X), S,
         (r"^einsum:", r"'ij,jk->ik'", r"index 'j' has size 3 in operand 0 and 2 in operand 1", r"\(2, 3\)")),
    Case("names-einsum-output-index-unknown", lambda: rm.einsum("ij->k", X), E,
         (r"^einsum:", r"'ij->k'", r"output index 'k' is in no input")),
    Case("names-einsum-output-index-twice", lambda: rm.einsum("ij->ii", X), E,
         (r"^einsum:", r"'ij->ii'", r"index 'i' twice")),
    Case("names-einsum-bad-character", lambda: rm.einsum("i1,j", V, V), E,
         (r"^einsum:", r"'i1,j'", r"'1'", r"letters")),
    Case("names-einsum-two-arrows", lambda: rm.einsum("i->i->i", V), E,
         (r"^einsum:", r"'i->i->i'", r"at most one '->'")),
    Case("names-einsum-two-ellipses", lambda: rm.einsum("...i...", V), E,
         (r"^einsum:", r"'\.\.\.i\.\.\.'", r"one '\.\.\.'")),
    Case("names-einsum-diagonal-sizes-differ", lambda: rm.einsum("ii->i", X), S,
         (r"^einsum:", r"'ii->i'", r"index 'i' is repeated", r"sizes 2 and 3", r"\(2, 3\)")),
    Case("names-einsum-bool", lambda: rm.einsum("i,i", X[0] > 0, X[0] > 0), D,
         (r"^einsum:", r"'i,i'", r"bool", r"astype")),
    # split: sections that do not divide, points that are not ints
    Case("names-split-uneven-sections", lambda: rm.split(X, 2, axis=1), E,
         (r"^split:", r"indices_or_sections=2", r"axis 1 of size 3", r"\(2, 3\)", r"divides 3")),
    Case("names-split-zero-sections", lambda: rm.split(X, 0), E, (r"^split:", r"indices_or_sections=0")),
    Case("names-split-float-sections", lambda: rm.split(X, 1.5), T,
         (r"^split:", r"indices_or_sections", r"1\.5 \(float\)")),
    Case("names-split-float-point", lambda: rm.split(X, [1, 2.5], axis=1), T,
         (r"^split:", r"indices_or_sections \[1, 2\.5\]", r"2\.5 \(float\)")),
    Case("names-split-axis-out-of-range", lambda: rm.split(X, 1, axis=2), E,
         (r"^split:", r"axis 2 is out of range for a 2-d tensor")),
    Case("names-split-0d", lambda: rm.split(rm.asarray(1.0), 1), S, (r"^split:", r"0-d")),
    Case("names-split-traced-point", _traced(lambda x, n: rm.split(x, [n], axis=1), rm.asarray(1)), rm.TracerError,
         (r"^split:", r"indices_or_sections", r"traced", r"static")),
    # axes out of range or of the wrong type
    Case("names-cumsum-axis-out-of-range", lambda: rm.cumsum(X, axis=2), E,
         (r"^cumsum:", r"axis 2 is out of range for a 2-d tensor")),
    Case("names-cumsum-axis-tuple", lambda: rm.cumsum(X, axis=(0, 1)), T, (r"^cumsum:", r"axis", r"\(0, 1\)")),
    Case("names-cumsum-bad-dtype", lambda: rm.cumsum(X, dtype="uint8"), D, (r"^cumsum:", r"uint8")),
    Case("names-cumprod-axis-negative", lambda: rm.cumprod(X, axis=-3), E,
         (r"^cumprod:", r"axis -3 is out of range")),
    Case("names-sort-axis-out-of-range", lambda: rm.sort(X, axis=2), E, (r"^sort:", r"axis 2 is out of range")),
    Case("names-argsort-axis-float", lambda: rm.argsort(X, axis=0.0), T,
         (r"^argsort:", r"axis", r"0\.0 \(float\)")),
    Case("names-var-axis-out-of-range", lambda: rm.var(X, axis=(0, 2)), E,
         (r"^var:", r"axis \(0, 2\)", r"axis 2 is out of range")),
    Case("names-var-ddof-too-large", lambda: rm.var(X, axis=0, ddof=2), E,
         (r"^var:", r"ddof=2", r"2 elements", r"below 2")),
    Case("names-std-ddof-float", lambda: rm.std(X, ddof=0.5), T, (r"^std:", r"ddof", r"0\.5 \(float\)")),
    Case("names-linspace-num-negative", lambda: rm.linspace(0.0, 1.0, -1), E, (r"^linspace:", r"num", r"-1")),
    Case("names-linspace-num-float", lambda: rm.linspace(0.0, 1.0, 2.5), T,
         (r"^linspace:", r"num", r"2\.5 \(float\)")),
    Case("names-linspace-start-str", lambda: rm.linspace("a", 1.0), T, (r"^linspace:", r"start", r"'a'")),
    Case("names-linspace-axis-out-of-range", lambda: rm.linspace(V, V * 2, 4, axis=2), E,
         (r"^linspace:", r"axis 2 is out of range for a 2-d tensor")),
    Case("names-rms-norm-axis-out-of-range", lambda: rm.nn.rms_norm(X, axis=2), E,
         (r"^rms_norm:", r"axis 2 is out of range")),
    # integer division by a zero known when tracing
    Case("names-floor-divide-int-zero", lambda: I // 0, E, (r"^floor_divide:", r"division by zero", r"divisor 0")),
    Case("names-remainder-int-zero-array", lambda: rm.remainder(I, rm.asarray([1, 0, 2])), E,
         (r"^remainder:", r"division by zero", r"shape \(3,\)")),
    Case("names-floor-divide-bool", lambda: rm.floor_divide(X > 0, X > 1), D,
         (r"^floor_divide:", r"numeric", r"bool")),
    # norms that do not exist
    Case("names-norm-nuclear", lambda: rm.linalg.norm(X, "nuc"), E,
         (r"^norm:", r"ord='nuc'", r"singular values", r"'fro'")),
    Case("names-norm-matrix-2", lambda: rm.linalg.norm(X, 2), E, (r"^norm:", r"ord=2", r"singular values")),
    Case("names-norm-fro-of-a-vector", lambda: rm.linalg.norm(V, "fro"), E,
         (r"^norm:", r"ord='fro'", r"matrix norm", r"one axis")),
    Case("names-norm-ord-str", lambda: rm.linalg.norm(X, "max"), E, (r"^norm:", r"ord='max'", r"not a norm")),
    Case("names-norm-ord-list", lambda: rm.linalg.norm(X, [1]), T, (r"^norm:", r"ord", r"\[1\]", r"list")),
    Case("names-norm-three-axes", lambda: rm.linalg.norm(rm.ones((2, 2, 2)), axis=(0, 1, 2)), E,
         (r"^norm:", r"axis=\(0, 1, 2\)", r"3 axes")),
    Case("names-norm-ord-of-3d", lambda: rm.linalg.norm(rm.ones((2, 2, 2)), 1), E,
         (r"^norm:", r"ord=1", r"\(2, 2, 2\)", r"name the axis")),
    # functional updates that do not fit
    Case("names-at-set-shape", lambda: X.at[0].set(rm.ones((2,))), S,
         (r"^at\[\.\.\.\]\.set:", r"\(2,\)", r"\(3,\)", r"\(2, 3\)")),
    Case("names-at-add-index-out-of-range", lambda: X.at[5].add(1.0), rm.IndexOutOfRange,
         (r"^getitem:", r"index 5", r"size 2")),
    Case("names-at-add-bool", lambda: (X > 0).at[0].add(True), D, (r"^at\[\.\.\.\]\.add:", r"bool", r"astype")),
    Case("names-at-set-unknown-mode", lambda: X.at[0].set(1.0, mode="wrap"), rm.ArgumentValueError,
         (r"^at\[\.\.\.\]\.set:", r"mode='wrap'", r"'drop', 'fill', 'clip', 'promise_in_bounds'")),
    Case("names-at-get-fill-value-without-fill", lambda: X.at[0].get(fill_value=0.0), rm.ArgumentValueError,
         (r"^at\[\.\.\.\]\.get:", r"fill_value=0\.0", r"mode='fill'")),
    Case("names-at-apply-not-callable", lambda: X.at[0].apply(2.0), rm.ArgumentTypeError,
         (r"^at\[\.\.\.\]\.apply:", r"fn must be a function", r"float")),
    Case("names-at-apply-not-elementwise", lambda: X.at[0:2].apply(lambda v: rm.sum(v)), S,
         (r"^at\[\.\.\.\]\.apply:", r"elementwise", r"\(\) of \(6,\)")),
    Case("names-at-set-int-overflow", lambda: I.at[0].set(2**40), rm.ValueOverflow,
         (r"^at\[\.\.\.\]\.set:", r"1099511627776", r"int32", r"astype")),
    # boolean masks
    Case("names-mask-traced", _traced(lambda x: x[x > 1.0]), rm.TracerError,
         (r"^getitem:", r"boolean mask", r"traced", r"rm\.where")),
    Case("names-mask-shape", lambda: X[np.array([True, False, True])], rm.IndexOutOfRange,
         (r"^getitem:", r"mask of shape \(3,\)", r"\(2, 3\)")),
    Case("names-mask-two", lambda: X[np.array([True, False]), np.array([True, False, True])], E,
         (r"^getitem:", r"one boolean mask", r"&")),
    Case("names-mask-0d", lambda: X[np.bool_(True)], D, (r"^getitem:", r"0-d boolean", r"rm\.where")),
    # tensor methods
    Case("names-len-0d", lambda: len(rm.asarray(1.0)), T, (r"len\(\)", r"0-d", r"\.shape")),
    Case("names-iter-0d", lambda: list(rm.asarray(1.0)), T, (r"len\(\)", r"0-d")),
    Case("names-transpose-method-bad-axes", lambda: X.transpose(0, 0), E,
         (r"^transpose:", r"axes \(0, 0\)", r"not a permutation")),
    Case("names-squeeze-method-not-one", lambda: X.squeeze(0), S, (r"^squeeze:", r"axis 0", r"size 2")),
    # rm.random
    Case("names-randint-empty-range", lambda: rm.random.randint(KEY, (3,), 5, 5), E,
         (r"^random\.randint:", r"minval 5", r"maxval 5", r"empty")),
    Case("names-randint-float-dtype", lambda: rm.random.randint(KEY, (3,), 0, 5, dtype="float32"), D,
         (r"^random\.randint:", r"dtype", r"float32")),
    Case("names-randint-float-bound", lambda: rm.random.randint(KEY, (3,), 0.5, 5), D,
         (r"^random\.randint:", r"minval", r"0\.5")),
    Case("names-randint-bounds-shape", lambda: rm.random.randint(KEY, (3,), rm.zeros((2,), "int32"), 5), S,
         (r"^random\.randint:", r"\(2,\)", r"shape \(3,\)")),
    Case("names-categorical-scalar-logits", lambda: rm.random.categorical(KEY, 1.0), S,
         (r"^random\.categorical:", r"logits", r"shape \(\)")),
    Case("names-categorical-shape", lambda: rm.random.categorical(KEY, X, shape=(4, 3)), S,
         (r"^random\.categorical:", r"shape \(4, 3\)", r"\(2,\)", r"\(2, 3\)")),
    Case("names-categorical-axis", lambda: rm.random.categorical(KEY, X, axis=2), E,
         (r"^random\.categorical:", r"axis 2 is out of range")),
    Case("names-permutation-negative", lambda: rm.random.permutation(KEY, -1), E,
         (r"^random\.permutation:", r"-1")),
    Case("names-permutation-0d", lambda: rm.random.permutation(KEY, rm.asarray(1.0)), S,
         (r"^random\.permutation:", r"0-d")),
    Case("names-truncated-normal-empty", lambda: rm.random.truncated_normal(KEY, 1.0, -1.0), E,
         (r"^random\.truncated_normal:", r"lower 1\.0", r"upper -1\.0")),
    Case("names-truncated-normal-shape", lambda: rm.random.truncated_normal(KEY, V * -1, V, shape=(2,)), S,
         (r"^random\.truncated_normal:", r"\(3,\)", r"shape \(2,\)")),
    Case("names-truncated-normal-bound-str", lambda: rm.random.truncated_normal(KEY, "a", 1.0), T,
         (r"^random\.truncated_normal:", r"lower", r"'a'")),
    Case("names-truncated-normal-int-dtype", lambda: rm.random.truncated_normal(KEY, 0.0, 1.0, dtype="int32"), D,
         (r"^random\.truncated_normal:", r"dtype", r"int32")),
]
