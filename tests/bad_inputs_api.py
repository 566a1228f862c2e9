"""Bad inputs to the transformations: jit, grad, vjp, vmap, checkpoint, policies, compiled
programs and rm.memory's argnums."""

from __future__ import annotations

import remat as rm
from bad_inputs import Case

X = rm.asarray([1.0, 2.0])
M = rm.ones((3, 2))


def dot(x, y):
    return rm.sum(x * y)


def _ck(policy, body=lambda h: h * 2.0):
    return lambda: rm.grad(lambda x: rm.sum(rm.checkpoint(body, x, policy=policy)))(X)


def _compiled(backend):
    return rm.jit(lambda x: x * 2.0, backend=backend).lower(rm.ones((3,))).compile()


def _named(h):
    return rm.checkpoint_name(rm.sin(h), "hidden") * 2.0


def _star(*xs):
    return rm.sum(xs[0] * xs[1])


AT = r"\(at bad_inputs_api\.py:\d+\)"  # where the user's source line is what a case's lambda is

CASES: list[Case] = [
    # argnums
    Case("api-grad-argnums-repeated", lambda: rm.grad(dot, argnums=(0, 0)), rm.ArgumentValueError,
         (r"^grad:", r"argnums=\(0, 0\)", r"argument 0 more than once")),
    Case("api-grad-argnums-negative-out-of-range", lambda: rm.grad(dot, argnums=-5), rm.ArgumentTypeError,
         (r"^grad:", r"argnums=-5", r"dot takes 2 positional arguments \(x, y\)", AT)),
    Case("api-grad-argnums-str", lambda: rm.grad(dot, argnums="a"), rm.ArgumentTypeError,
         (r"^grad:", r"argnums must be an int or a tuple of ints", r"got 'a'")),
    Case("api-grad-argnums-float", lambda: rm.grad(dot, argnums=0.0), rm.ArgumentTypeError,
         (r"^grad:", r"argnums", r"got 0\.0")),
    Case("api-grad-argnums-beyond-the-call", lambda: rm.grad(_star, argnums=2)(X, X), rm.ArgumentTypeError,
         (r"^grad:", r"argnums=2", r"at least 3 positional arguments", r"_star was called with 2")),
    Case("api-value-and-grad-argnums-repeated", lambda: rm.value_and_grad(dot, argnums=(1, -1)),
         rm.ArgumentValueError, (r"^value_and_grad:", r"argnums=\(1, -1\)", r"argument 1 more than once")),
    Case("api-memory-argnums-repeated", lambda: rm.memory.saved_residuals(dot, X, X, argnums=[0, 0]),
         rm.ArgumentValueError, (r"^memory\.saved_residuals:", r"argnums=\[0, 0\]", r"more than once")),
    Case("api-memory-profile-argnums-out-of-range", lambda: rm.memory.profile(dot, X, X, argnums=3),
         rm.ArgumentTypeError, (r"^memory\.profile:", r"argnums=3", r"out of range")),
    Case("api-memory-profile-unknown-backend", lambda: rm.memory.profile(dot, X, X, backend="cuda"),
         rm.ArgumentValueError, (r"^memory\.profile:", r"backend 'cuda'", r"numpy, xla")),
    # callables, at creation
    Case("api-jit-not-callable", lambda: rm.jit(42), rm.ArgumentTypeError, (r"^jit:", r"callable", r"int 42", AT)),
    Case("api-grad-not-callable", lambda: rm.grad(42), rm.ArgumentTypeError, (r"^grad:", r"callable", r"int 42")),
    Case("api-value-and-grad-not-callable", lambda: rm.value_and_grad("f"), rm.ArgumentTypeError,
         (r"^value_and_grad:", r"callable", r"str 'f'")),
    Case("api-vjp-not-callable", lambda: rm.vjp(None, X), rm.ArgumentTypeError,
         (r"^vjp:", r"callable", r"NoneType None")),
    Case("api-vmap-not-callable", lambda: rm.vmap(42), rm.ArgumentTypeError, (r"^vmap:", r"callable", r"int 42")),
    Case("api-checkpoint-not-callable", lambda: rm.checkpoint(42, X), rm.ArgumentTypeError,
         (r"^checkpoint:", r"callable body", r"int 42")),
    Case("api-remat-not-callable", lambda: rm.remat(42), rm.ArgumentTypeError,
         (r"^remat:", r"callable body", r"int 42")),
    Case("api-custom-vjp-not-callable", lambda: rm.custom_vjp(42), rm.ArgumentTypeError,
         (r"^custom_vjp:", r"callable", r"int 42")),
    # jit options and static arguments
    Case("api-jit-static-argnums-beyond-params", lambda: rm.jit(dot, static_argnums=5), rm.ArgumentTypeError,
         (r"^jit:", r"static_argnums=5", r"dot takes 2 positional arguments")),
    Case("api-jit-static-argnums-str", lambda: rm.jit(dot, static_argnums="a"), rm.ArgumentTypeError,
         (r"^jit:", r"static_argnums", r"got 'a'")),
    Case("api-jit-static-argnums-negative-star-args", lambda: rm.jit(_star, static_argnums=-1),
         rm.ArgumentValueError, (r"^jit:", r"static_argnums=-1", r"\*args", r"count from the start")),
    Case("api-jit-static-argnames-unknown", lambda: rm.jit(dot, static_argnames=("z",)), rm.ArgumentValueError,
         (r"^jit:", r"static_argnames", r"'z'", r"parameters: x, y")),
    Case("api-jit-static-argnames-int", lambda: rm.jit(dot, static_argnames=1), rm.ArgumentTypeError,
         (r"^jit:", r"static_argnames", r"got 1")),
    Case("api-jit-unknown-backend", lambda: rm.jit(dot, backend="tpu9"), rm.ArgumentValueError,
         (r"^jit:", r"backend 'tpu9'", r"numpy, xla")),
    Case("api-jit-unhashable-static-list", lambda: rm.jit(lambda x, n: x, static_argnums=1)(X, [1, 2]),
         rm.ArgumentTypeError, (r"^jit:", r"static argument 'n' \(position 1\)", r"\[1, 2\]", r"pass a tuple")),
    Case("api-jit-unhashable-static-keyword",
         lambda: rm.jit(lambda x, *, opts: x, static_argnames="opts")(X, opts={"k": 1}),
         rm.ArgumentTypeError, (r"^jit:", r"static argument 'opts'", r"\{'k': 1\}", r"pass a tuple")),
    Case("api-jit-non-array-argument", lambda: rm.jit(lambda x, s: x)(X, "hello"), TypeError,
         (r"str", r"static_argnums")),
    # has_aux and the function's result
    Case("api-grad-has-aux-not-a-pair", lambda: rm.grad(lambda x: rm.sum(x), has_aux=True)(X),
         rm.ArgumentTypeError, (r"^grad:", r"has_aux=True", r"returned a tensor f32\[\]")),
    Case("api-value-and-grad-has-aux-triple",
         lambda: rm.value_and_grad(lambda x: (rm.sum(x), x, x), has_aux=True)(X),
         rm.ArgumentTypeError, (r"^value_and_grad:", r"has_aux=True", r"a tuple of 3")),
    Case("api-vjp-has-aux-not-a-pair", lambda: rm.vjp(lambda x: x, X, has_aux=True), rm.ArgumentTypeError,
         (r"^vjp:", r"has_aux=True", r"a tensor f32\[2\]")),
    Case("api-grad-non-scalar-output", lambda: rm.grad(lambda x: x * 2.0)(X), rm.ArgumentTypeError,
         (r"^grad:", r"float scalar", r"shape \(2,\)", r"rm\.vjp")),
    Case("api-vjp-cotangent-structure", lambda: rm.vjp(lambda x: x * 2.0, X)[1]((X, X)), rm.ArgumentTypeError,
         (r"^vjp:", r"cotangent structure \(\*, \*\)", r"output's \*")),
    # vmap and vectorized axes
    Case("api-vmap-in-axes-out-of-range", lambda: rm.vmap(lambda row: row, in_axes=3)(M), rm.ArgumentValueError,
         (r"^vmap:", r"in_axes=3", r"row of shape \(3, 2\)", r"-2 to 1")),
    Case("api-vmap-in-axes-over-0d", lambda: rm.vmap(lambda x, s: x * s)(M, rm.asarray(2.0)),
         rm.ArgumentValueError, (r"^vmap:", r"in_axes=0", r"s, a 0-d tensor", r"use None")),
    Case("api-vmap-in-axes-wrong-length", lambda: rm.vmap(lambda a, b: a * b, in_axes=(0, 0, 0))(M, M),
         rm.ArgumentValueError, (r"^vmap:", r"in_axes=\(0, 0, 0\)", r"a tuple of 3, args a tuple of 2",
                                 r"\(\*, \*\)", r"^(?![\s\S]*Tensor\()")),
    Case("api-vmap-out-axes-out-of-range", lambda: rm.vmap(lambda r: r * 2.0, out_axes=4)(M),
         rm.ArgumentValueError, (r"^vmap:", r"out_axes=4", r"output, which has 2 axes", r"-2 to 1")),
    Case("api-vmap-in-axes-str", lambda: rm.vmap(lambda x: x, in_axes="a"), rm.ArgumentTypeError,
         (r"^vmap:", r"in_axes", r"a str 'a'")),
    Case("api-vmap-sizes-differ", lambda: rm.vmap(lambda a, b: a + b)(rm.ones((3,)), rm.ones((4,))),
         rm.ArgumentValueError, (r"^vmap:", r"in_axes=0", r"3 for a, 4 for b")),
    Case("api-vmap-nothing-mapped", lambda: rm.vmap(lambda a: a, in_axes=None)(M), rm.ArgumentValueError,
         (r"^vmap:", r"no argument is mapped", r"in_axes=None")),
    Case("api-vectorize-name-not-str", lambda: rm.vectorize(M, 0), rm.ArgumentTypeError,
         (r"^vectorize:", r"axis name", r"int 0")),
    Case("api-vectorize-name-taken", lambda: rm.vectorize(rm.vectorize(M, "b"), "b"), rm.ArgumentValueError,
         (r"^vectorize:", r"name='b'", r"already vectorized")),
    Case("api-devectorize-unknown-name", lambda: rm.devectorize(rm.vectorize(M, "b"), "c"), rm.ArgumentValueError,
         (r"^devectorize:", r"name='c'", r"it has \['b'\]")),
    Case("api-vectorize-0d", lambda: rm.vectorize(rm.asarray(1.0), "b"), rm.ShapeError,
         (r"^vectorize:", r"0-d tensor")),
    # checkpoint bodies and policies
    Case("api-policy-factory-not-called", _ck(rm.policies.save_only_these_names), rm.ArgumentTypeError,
         (r"^checkpoint:", r"policy=rm\.policies\.save_only_these_names", r"call it with the names")),
    Case("api-policy-other-factory-not-called", lambda: rm.remat(_named, policy=rm.policies.save_any_names_but_these),
         rm.ArgumentTypeError, (r"^remat:", r"policy=rm\.policies\.save_any_names_but_these", r"factory")),
    Case("api-policy-string", _ck("dots_saveable"), rm.ArgumentValueError,
         (r"^checkpoint:", r"policy='dots_saveable'", r"rm\.policies\.dots_saveable")),
    Case("api-policy-not-callable", _ck(3), rm.ArgumentTypeError, (r"^checkpoint:", r"policy", r"got int")),
    Case("api-policy-unhashable", _ck(type("P", (), {"__call__": lambda *a: False, "__hash__": None})()),
         rm.ArgumentTypeError, (r"^checkpoint:", r"policy must be hashable", r"unhashable P")),
    Case("api-policy-returns-non-bool", _ck(lambda op, i, o, p: "yes"), rm.ArgumentTypeError,
         (r"^checkpoint:", r"policy", r"returned str for multiply")),
    Case("api-policy-names-not-str", lambda: rm.policies.save_only_these_names(1), rm.ArgumentTypeError,
         (r"^save_only_these_names:", r"names must be str", r"int \(1\)")),
    Case("api-policy-unknown-name", _ck(rm.policies.save_only_these_names("hiden"), _named), None,
         (r"checkpoint:", r"save_only_these_names\('hiden'\)", r"names 'hiden'", r"names in the body: 'hidden'"),
         warns=rm.policies.UnusedNameWarning),
    Case("api-policy-unknown-excluded-name", _ck(rm.policies.save_any_names_but_these("hid"), _named), None,
         (r"save_any_names_but_these\('hid'\)", r"names 'hid'", r"'hidden'"), warns=UserWarning),
    Case("api-checkpoint-eager-body-returns-str", lambda: rm.checkpoint(lambda h: "s", X), rm.ArgumentTypeError,
         (r"^checkpoint:", r"the body <lambda>", r"returned a str")),
    Case("api-checkpoint-traced-body-returns-str", lambda: rm.jit(lambda x: rm.checkpoint(lambda h: "s", x))(X),
         rm.ArgumentTypeError, (r"^checkpoint:", r"the body <lambda>", r"returned a str")),
    Case("api-checkpoint-arity", lambda: rm.checkpoint(lambda h: h, X, X), rm.ArgumentTypeError,
         (r"^checkpoint:", r"<lambda>", r"2 inputs")),
    Case("api-custom-vjp-no-rule", lambda: rm.grad(lambda x: rm.sum(rm.custom_vjp(lambda y: y)(x)))(X),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"<lambda> has no VJP", r"defvjp")),
    Case("api-custom-vjp-defvjp-not-callable", lambda: rm.custom_vjp(lambda y: y).defvjp(1, 2), rm.ArgumentTypeError,
         (r"^custom_vjp:", r"defvjp", r"two callables")),
    # compiled programs
    Case("api-compiled-other-shape-numpy", lambda: _compiled("numpy")(rm.ones((5,))), rm.ArgumentTypeError,
         (r"^jit\(<lambda>\):", r"takes \(f32\[3\]\)", r"called with \(f32\[5\]\)")),
    Case("api-compiled-other-shape-xla", lambda: _compiled("xla")(rm.ones((5,))), rm.ArgumentTypeError,
         (r"^jit\(<lambda>\):", r"takes \(f32\[3\]\)", r"called with \(f32\[5\]\)")),
    Case("api-compiled-other-dtype-xla", lambda: _compiled("xla")(rm.ones((3,), "float64")), rm.ArgumentTypeError,
         (r"^jit\(<lambda>\):", r"takes \(f32\[3\]\)", r"called with \(f64\[3\]\)")),
    Case("api-compiled-extra-argument", lambda: _compiled("numpy")(rm.ones((3,)), rm.ones((3,))),
         rm.ArgumentTypeError, (r"^jit\(<lambda>\):", r"takes \(f32\[3\]\)", r"called with \(f32\[3\], f32\[3\]\)")),
    Case("api-compiled-missing-argument", lambda: _compiled("xla")(), rm.ArgumentTypeError,
         (r"^jit\(<lambda>\):", r"takes \(f32\[3\]\)", r"called with \(\)")),
]
