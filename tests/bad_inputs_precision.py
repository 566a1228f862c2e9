"""Bad inputs to the matmul precision setting: `rm.jit(..., precision=)` and
`rm.default_matmul_precision`."""

from __future__ import annotations

from jax import lax

import remat as rm
from bad_inputs import Case

ACCEPTED = r"use 'default', 'high', 'highest' \(or JAX's aliases 'bfloat16', 'tensorfloat32', 'float32'\), " \
    r"a jax.lax.Precision, or None \(the global setting\)"
AT = r"\(at bad_inputs_precision\.py:\d+\)"


def double(x):
    return x * 2.0


CASES: list[Case] = [
    Case("precision-jit-unknown-name", lambda: rm.jit(double, backend="xla", precision="fastest"),
         rm.ArgumentValueError, (r"^jit:", r"precision='fastest' is not a matmul precision", ACCEPTED, AT)),
    Case("precision-jit-upper-case-name", lambda: rm.jit(double, backend="xla", precision="HIGHEST"),
         rm.ArgumentValueError, (r"^jit:", r"precision='HIGHEST'", r"did you mean 'highest'\?")),
    Case("precision-jit-algorithm-preset", lambda: rm.jit(double, backend="xla", precision="F32_F32_F32"),
         rm.ArgumentValueError, (r"^jit:", r"precision='F32_F32_F32'", ACCEPTED)),
    Case("precision-jit-number", lambda: rm.jit(double, backend="xla", precision=3),
         rm.ArgumentTypeError, (r"^jit:", r"precision must be 'default', 'high', 'highest'", r"got int 3", AT)),
    Case("precision-jit-per-operand-pair", lambda: rm.jit(double, backend="xla", precision=("high", "high")),
         rm.ArgumentTypeError, (r"^jit:", r"precision must be", r"got tuple \('high', 'high'\)")),
    Case("precision-jit-the-enum-class", lambda: rm.jit(double, backend="xla", precision=lax.Precision),
         rm.ArgumentTypeError, (r"^jit:", r"precision must be", r"got EnumType|got EnumMeta|got type")),
    Case("precision-jit-numpy-backend-checks-it-too", lambda: rm.jit(double, precision="hihgest"),
         rm.ArgumentValueError, (r"^jit:", r"precision='hihgest'", ACCEPTED)),
    Case("precision-scope-unknown-name", lambda: rm.default_matmul_precision("tf32"),
         rm.ArgumentValueError, (r"^default_matmul_precision:", r"precision='tf32' is not a matmul precision",
                                 ACCEPTED, AT)),
    Case("precision-scope-bool", lambda: rm.default_matmul_precision(True),
         rm.ArgumentTypeError, (r"^default_matmul_precision:", r"precision must be", r"got bool True")),
]
