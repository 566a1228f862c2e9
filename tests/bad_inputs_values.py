"""Bad values and dtypes: numbers a dtype cannot hold (never wrapped, never made infinite),
dtypes remat does not take (never converted without a word), values that are no array, and
the dtype rules of elementwise ops, creation functions and rm.random."""

from __future__ import annotations

import numpy as np

import remat as rm
from bad_inputs import Case

I32 = rm.asarray([1, 2], "int32")
F32 = rm.asarray([1.0, 2.0], "float32")
F16 = rm.asarray([1.0, 2.0], "float16")
KEY = rm.random.key(0)
O = rm.ValueOverflow
D = rm.DTypeError
T = rm.ArgumentTypeError
V = rm.ArgumentValueError
S = rm.ShapeError
AT = r"\(at bad_inputs_values\.py:\d+\)"  # the user's line: the case's lambda


def _nested(depth: int) -> list:
    x: list = [0]
    for _ in range(depth - 1):
        x = [x]
    return x


CASES: list[Case] = [
    # Python numbers a dtype cannot hold: an error naming the function, the value and the dtype.
    Case("values-asarray-int-beyond-int32", lambda: rm.asarray(2**40), O,
         (r"^asarray:", r"Python int 1099511627776", r"does not fit int32", r'pass dtype="int64"', AT)),
    Case("values-asarray-list-int-beyond-int32", lambda: rm.asarray([2**40, 1]), O,
         (r"^asarray:", r"1099511627776", r"int32", r'dtype="int64"')),
    Case("values-asarray-int-beyond-int64", lambda: rm.asarray(2**70), O,
         (r"^asarray:", r"1180591620717411303424", r"int32", r"beyond int64")),
    Case("values-asarray-int-beyond-explicit-int64", lambda: rm.asarray(2**63, "int64"), O,
         (r"^asarray:", r"9223372036854775808", r"does not fit int64", r"beyond int64")),
    Case("values-asarray-negative-int-beyond-int32", lambda: rm.asarray([-(2**31) - 1]), O,
         (r"^asarray:", r"-2147483649", r"int32", r'dtype="int64"')),
    Case("values-asarray-float-beyond-float32", lambda: rm.asarray(1e300), O,
         (r"^asarray:", r"Python float 1e\+300", r"does not fit float32", r'pass dtype="float64"')),
    Case("values-asarray-nan-as-int", lambda: rm.asarray(float("nan"), "int32"), O,
         (r"^asarray:", r"nan", r"int32", r"no integer value")),
    Case("values-asarray-float-beyond-int32", lambda: rm.asarray([1e10], "int32"), O,
         (r"^asarray:", r"10000000000\.0", r"int32", r'dtype="int64"')),
    Case("values-asarray-int64-array-to-int32", lambda: rm.asarray(np.array([2**40]), "int32"), O,
         (r"^asarray:", r"value 1099511627776", r"int32")),
    Case("values-asarray-float64-array-to-float32", lambda: rm.asarray(np.array([1e300]), "float32"), O,
         (r"^asarray:", r"1e\+300", r"float32")),
    Case("values-arange-beyond-int32", lambda: rm.arange(2**31, 2**31 + 3), O,
         (r"^arange:", r"2147483650", r"int32", r'pass dtype="int64"')),
    Case("values-arange-beyond-int64", lambda: rm.arange(2**70), O, (r"^arange:", r"1180591620717411303424", r"int64")),
    Case("values-full-int-beyond-int32", lambda: rm.full((2,), 2**40), O,
         (r"^full:", r"1099511627776", r"int32", r'pass dtype="int64"')),
    Case("values-full-float-beyond-explicit-float32", lambda: rm.full((2,), 1e39, "float32"), O,
         (r"^full:", r"1e\+39", r"float32")),
    Case("values-add-weak-int-beyond-int32", lambda: I32 + 2**40, O,
         (r"^add:", r"Python int 1099511627776", r"int32", r'x\.astype\("int64"\)', AT)),
    Case("values-radd-weak-int-beyond-int32", lambda: 2**40 + I32, O, (r"^add:", r"1099511627776", r"int32")),
    Case("values-multiply-weak-float-beyond-float32", lambda: F32 * 1e300, O,
         (r"^multiply:", r"1e\+300", r"float32", r'x\.astype\("float64"\)')),
    Case("values-where-weak-int-beyond-int32", lambda: rm.where(I32 > 1, I32, 2**40), O,
         (r"^where:", r"1099511627776", r"int32")),
    Case("values-add-two-weak-ints", lambda: rm.add(2**40, 1), O,
         (r"^add:", r"1099511627776", r"int32", r'rm\.asarray\(\.\.\., dtype="int64"\)')),
    Case("values-traced-weak-int-beyond-int32", lambda: rm.jit(lambda x: x * 2**40)(I32), O,
         (r"^multiply:", r"1099511627776", r"int32")),
    Case("values-jit-argument-int-beyond-int32", lambda: rm.jit(lambda x: x + 1)(2**40), O,
         (r"^asarray:", r"1099511627776", r"int32")),
    # dtypes remat does not take: named, with the supported ones and how to convert.
    Case("values-asarray-longdouble-array", lambda: rm.asarray(np.ones(2, np.longdouble)), D,
         (r"^asarray:", r"dtype float(128|64)", r"bool, int32, int64, float16, bfloat16, float32, float64",
          r"astype\(np\.float32\)")),
    Case("values-asarray-uint8-array", lambda: rm.asarray(np.arange(3, dtype=np.uint8)), D,
         (r"^asarray:", r"dtype uint8", r"astype\(np\.int32\)", r'dtype="int32"')),
    Case("values-asarray-int16-scalar", lambda: rm.asarray(np.int16(3)), D, (r"^asarray:", r"dtype int16")),
    Case("values-asarray-complex", lambda: rm.asarray(1 + 2j), D, (r"^asarray:", r"complex128")),
    Case("values-asarray-complex-list", lambda: rm.asarray([1j]), D, (r"^asarray:", r"complex")),
    Case("values-jit-argument-int8", lambda: rm.jit(lambda x: x * 2.0)(np.ones(2, np.int8)), D,
         (r"argument of dtype int8", r"int32", r"astype\(np\.int32\)")),
    Case("values-xla-jit-argument-uint8", lambda: rm.jit(lambda x: x + 1, backend="xla")(np.ones(2, np.uint8)), D,
         (r"argument of dtype uint8", r"astype\(np\.int32\)")),
    Case("values-grad-argument-uint16", lambda: rm.grad(lambda x: rm.sum(x))(np.ones(2, np.uint16)), D,
         (r"argument of dtype uint16",)),
    Case("values-asarray-dtype-uint16", lambda: rm.asarray([1.0], "uint16"), D,
         (r"^asarray:", r"dtype uint16 is not supported", r"float16, bfloat16, float32")),
    Case("values-asarray-dtype-typo", lambda: rm.asarray([1.0], "flaot32"), D,
         (r"^asarray:", r"'flaot32' is not a dtype", r"float32")),
    Case("values-astype-int8", lambda: F32.astype("int8"), D, (r"^astype:", r"int8", r"int32")),
    Case("values-astype-none", lambda: rm.astype(F32, None), D, (r"^astype:", r"dtype None")),
    Case("values-astype-complex64", lambda: rm.astype(F32, np.complex64), D, (r"^astype:", r"complex64")),
    Case("values-zeros-uint8", lambda: rm.zeros((2,), "uint8"), D, (r"^zeros:", r"dtype uint8")),
    Case("values-ones-like-uint32", lambda: rm.ones_like(F32, "uint32"), D, (r"^ones_like:", r"uint32")),
    Case("values-eye-complex", lambda: rm.eye(2, dtype="complex128"), D, (r"^eye:", r"complex128")),
    Case("values-arange-dtype-int8", lambda: rm.arange(3, dtype="int8"), D, (r"^arange:", r"dtype int8")),
    Case("values-random-normal-int-dtype", lambda: rm.random.normal(KEY, (2,), "int32"), D,
         (r"^random\.normal:", r"dtype must be a float dtype", r"int32")),
    Case("values-random-uniform-float16", lambda: rm.random.uniform(KEY, (2,), "float16"), D,
         (r"^random\.uniform:", r"dtype float16", r'astype\("float16"\)')),
    Case("values-random-normal-bfloat16", lambda: rm.random.normal(KEY, (2,), rm.bfloat16), D,
         (r"^random\.normal:", r"dtype bfloat16", r"draw float32")),
    # float16 holds at most 65504, bfloat16 3.39e38: beyond, a value would become inf.
    Case("values-asarray-int-beyond-float16", lambda: rm.asarray(70000, "float16"), O,
         (r"^asarray:", r"Python int 70000", r"does not fit float16", r'pass dtype="float32"', AT)),
    Case("values-asarray-float-beyond-bfloat16", lambda: rm.asarray([1e39], "bfloat16"), O,
         (r"^asarray:", r"Python float 1e\+39", r"does not fit bfloat16", r'pass dtype="float64"')),
    Case("values-asarray-bfloat16-array-to-float16", lambda: rm.asarray(np.array([1e5], rm.bfloat16), "float16"), O,
         (r"^asarray:", r"value 99840\.0", r"does not fit float16")),
    Case("values-multiply-weak-float-beyond-float16", lambda: F16 * 1e5, O,
         (r"^multiply:", r"Python float 100000\.0", r"float16", r'x\.astype\("float32"\)', AT)),
    Case("values-add-weak-int-beyond-float16-traced", lambda: rm.jit(lambda x: x + 2**17)(F16), O,
         (r"^add:", r"Python int 131072", r"float16")),
    Case("values-full-beyond-float16", lambda: rm.full((2,), -1e5, "float16"), O,
         (r"^full:", r"-100000\.0", r"float16")),
    # Values that are no array: ragged, too deep, or of another type.
    Case("values-asarray-ragged", lambda: rm.asarray([[1, 2], [3]]), S,
         (r"^asarray:", r"\[\[1, 2\], \[3\]\]", r"ragged", r"lengths 2 and 1")),
    Case("values-asarray-mixed-depth", lambda: rm.asarray([1, [2, 3]]), S,
         (r"^asarray:", r"\[1, \[2, 3\]\]", r"mixes numbers and sequences")),
    Case("values-asarray-rank-65", lambda: rm.asarray(_nested(65)), S,
         (r"^asarray:", r"more than 64 deep", r"64 dimensions")),
    Case("values-asarray-none", lambda: rm.asarray(None), T, (r"^asarray:", r"NoneType")),
    Case("values-asarray-dict", lambda: rm.asarray({"a": 1}), T, (r"^asarray:", r"dict")),
    Case("values-asarray-object", lambda: rm.asarray(object()), T, (r"^asarray:", r"object")),
    Case("values-asarray-strings", lambda: rm.asarray(["a", "b"]), T, (r"^asarray:", r"str", r"dtype <U1")),
    Case("values-asarray-list-holding-none", lambda: rm.asarray([1, None]), T,
         (r"^asarray:", r"list holding a NoneType")),
    Case("values-make-graph-not-callable", lambda: rm.make_graph(3), T,
         (r"^make_graph:", r"expected a callable", r"int 3")),
    Case("values-jit-returns-a-string", lambda: rm.jit(lambda x: "done")(F32), T,
         (r"`jit\(<lambda>\)` returned a str", r"not a tensor")),
    Case("values-jit-argument-a-string", lambda: rm.jit(lambda x: x)("a"), T,
         (r"argument leaf of type str", r"static")),
    # Creation functions' other arguments.
    Case("values-full-shape-negative", lambda: rm.full((-1, 2), 0.0), V, (r"^full:", r"shape \(-1, 2\)", r"negative")),
    Case("values-zeros-shape-float", lambda: rm.zeros((1.5, 2)), T, (r"^zeros:", r"shape \(1\.5, 2\)", r"1\.5")),
    Case("values-ones-rank-65", lambda: rm.ones((1,) * 65), V, (r"^ones:", r"65 dimensions", r"64")),
    Case("values-full-fill-does-not-broadcast", lambda: rm.full((2, 3), [1.0, 2.0]), S,
         (r"^full:", r"fill_value of shape \(2,\)", r"\(2, 3\)")),
    Case("values-full-fill-a-string", lambda: rm.full((2,), "a"), T, (r"^full:", r"str")),
    Case("values-arange-step-zero", lambda: rm.arange(0, 3, 0), V, (r"^arange:", r"step must not be 0")),
    Case("values-arange-stop-a-string", lambda: rm.arange("3"), T, (r"^arange:", r"stop", r"'3' \(str\)")),
    Case("values-arange-bool", lambda: rm.arange(0, True), T, (r"^arange:", r"stop", r"True \(bool\)")),
    Case("values-eye-negative", lambda: rm.eye(-2), V, (r"^eye:", r"\(-2, -2\)", r"negative")),
    Case("values-eye-float", lambda: rm.eye(2.5), T, (r"^eye:", r"n", r"2\.5")),
    # Elementwise ops' operands (these already raised remat errors).
    Case("values-add-shapes-do-not-broadcast", lambda: rm.ones((2, 3)) + rm.ones((4,)), S,
         (r"^add:", r"shapes \(2, 3\) and \(4,\) do not broadcast")),
    Case("values-negative-bool", lambda: -rm.asarray([True]), D, (r"^negative:", r"bool")),
    Case("values-subtract-bools", lambda: rm.asarray([True]) - rm.asarray([False]), D, (r"^subtract:", r"bool")),
    Case("values-sign-bool", lambda: rm.sign(rm.asarray([True])), D, (r"^sign:", r"bool")),
    # rm.random's arguments.
    Case("values-random-uniform-shape-float", lambda: rm.random.uniform(KEY, (1.5,)), T,
         (r"^random\.uniform:", r"shape \(1\.5,\)", r"1\.5 \(float\)")),
    Case("values-random-normal-shape-negative", lambda: rm.random.normal(KEY, (-1, 2)), V,
         (r"^random\.normal:", r"shape \(-1, 2\)", r"negative size -1")),
    Case("values-random-key-float-seed", lambda: rm.random.key(1.5), T, (r"^random\.key:", r"seed", r"float")),
    Case("values-random-split-negative", lambda: rm.random.split(KEY, -1), V, (r"^random\.split:", r"n", r"-1")),
    Case("values-random-split-float", lambda: rm.random.split(KEY, 2.0), T, (r"^random\.split:", r"n", r"2\.0")),
    Case("values-random-normal-bad-key-shape", lambda: rm.random.normal(rm.asarray([1, 2, 3])), S,
         (r"^random\.normal:", r"key", r"\(3,\)")),
    Case("values-random-bernoulli-float-key", lambda: rm.random.bernoulli(rm.asarray([0.0, 1.0])), D,
         (r"^random\.bernoulli:", r"key", r"float32")),
    Case("values-random-fold-in-float-data", lambda: rm.random.fold_in(KEY, rm.asarray(1.5)), D,
         (r"^random\.fold_in:", r"data", r"float32")),
]
