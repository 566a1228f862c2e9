"""Bad inputs at the borders with other libraries (JAX, DLPack, NumPy) and to the options of issue
11: `rm.from_dlpack`, traced tensors handed to JAX or DLPack, `memory.profile(static_argnums=)`,
`jit(...).lower` with static arguments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import remat as rm
from bad_inputs import Case

X = rm.asarray([1.0, 2.0])
TRACED = r"a tensor traced inside `jit\(<lambda>\)` has no value"
AT = r"\(at bad_inputs_interop\.py:\d+\)"  # the user's line, not one of JAX's


def layers(x, depth, plan):
    h = x
    for _ in range(depth):
        h = rm.tanh(h) if plan == "tanh" else rm.sin(h)
    return rm.sum(h)


def _profile(**kwargs):
    return lambda: rm.memory.profile(layers, X, 2, "tanh", **kwargs)


CASES: list[Case] = [
    Case("interop-from-dlpack-list", lambda: rm.from_dlpack([1.0, 2.0]), rm.ArgumentTypeError,
         (r"^from_dlpack:", r"x is a list", r"__dlpack__", r"rm\.asarray")),
    Case("interop-from-dlpack-none", lambda: rm.from_dlpack(None), rm.ArgumentTypeError,
         (r"^from_dlpack:", r"x is a NoneType", r"__dlpack__")),
    Case("interop-from-dlpack-uint8", lambda: rm.from_dlpack(np.zeros(3, np.uint8)), rm.DTypeError,
         (r"^from_dlpack:", r"x has dtype uint8", r"convert it first")),
    Case("interop-from-dlpack-int16-jax-array", lambda: rm.from_dlpack(jnp.zeros(3, jnp.int16)), rm.DTypeError,
         (r"^from_dlpack:", r"x has dtype int16", AT)),
    Case("interop-jnp-sum-of-traced", lambda: rm.jit(lambda x: jnp.sum(x))(X), rm.TracerError,
         (r"^JAX:", TRACED, r"use remat's ops", AT)),
    Case("interop-jax-jit-of-traced", lambda: rm.jit(lambda x: jax.jit(jnp.sin)(x))(X), rm.TracerError,
         (r"^JAX:", TRACED)),
    Case("interop-jnp-asarray-of-traced", lambda: rm.jit(lambda x: jnp.asarray(x))(X), rm.TracerError,
         (r"^__jax_array__:", TRACED, AT)),
    Case("interop-np-from-dlpack-of-traced", lambda: rm.jit(lambda x: np.from_dlpack(x))(X), rm.TracerError,
         (r"__dlpack", TRACED)),
    Case("interop-grad-of-jnp-on-traced", lambda: rm.grad(lambda x: jnp.sum(x * x))(X), rm.TracerError,
         (r"^JAX:", r"traced inside", r"rm\.sum", AT)),
    Case("interop-profile-static-and-argnums", _profile(static_argnums=(1, 2), argnums=1), rm.ArgumentValueError,
         (r"^memory\.profile:", r"argnums=1", r"static_argnums=\(1, 2\) makes static", r"leave it out")),
    Case("interop-profile-static-out-of-range", _profile(static_argnums=5), rm.ArgumentTypeError,
         (r"^memory\.profile:", r"static_argnums=5", r"layers takes 3 positional arguments")),
    Case("interop-profile-static-not-an-int", _profile(static_argnums="depth"), rm.ArgumentTypeError,
         (r"^memory\.profile:", r"static_argnums must be an int or a tuple of ints", r"'depth'")),
    Case("interop-profile-static-repeated", _profile(static_argnums=(1, 1)), rm.ArgumentValueError,
         (r"^memory\.profile:", r"static_argnums=\(1, 1\)", r"argument 1 more than once")),
    Case("interop-lower-unhashable-static",
         lambda: rm.jit(lambda x, n: x, static_argnums=1).lower(X, [1, 2]), rm.ArgumentTypeError,
         (r"^jit:", r"static argument 'n' \(position 1\)", r"a list of 2", r"not hashable", r"pass a tuple")),
    Case("interop-compiled-after-lower-other-shape",
         lambda: rm.jit(lambda x: x * 2.0).lower(X).compile()(rm.ones((3,))), rm.ArgumentTypeError,
         (r"^jit\(<lambda>\):", r"takes \(f32\[2\]\)", r"called with \(f32\[3\]\)")),
]
