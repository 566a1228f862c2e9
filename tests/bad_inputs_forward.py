"""Bad inputs to forward mode and Jacobians: jvp, linearize, jacfwd, jacrev, hessian, custom_jvp."""

from __future__ import annotations

import remat as rm
from bad_inputs import Case

X = rm.asarray([1.0, 2.0, 3.0])
N = rm.asarray([1, 2, 3])


def _f(x):
    return rm.sin(x)


def _linearized_with(t):
    _, f_jvp = rm.linearize(_f, X)
    return f_jvp(t)


def _no_rule():
    f = rm.custom_jvp(lambda x: x * 2.0)
    return rm.grad(f)(rm.asarray(1.0))


def _hessian_through_binomial():
    return rm.hessian(lambda c: rm.sum(rm.scan(lambda h, x: (rm.sin(h * x), None), c, rm.ones((4, 3)),
                                               checkpoint=rm.loops.binomial(2))[0]))(X)


def _jvp_of_binomial_gradient():
    def loss(c):
        return rm.sum(rm.scan(lambda h, x: (rm.sin(h * x), None), c, rm.ones((4, 3)),
                              checkpoint=rm.loops.binomial(2))[0])

    return rm.jvp(rm.grad(loss), (X,), (X,))


CASES: list[Case] = [
    # ---- tangents must match the primals: pytree, shape, dtype
    Case("forward-jvp-tangent-structure", lambda: rm.jvp(_f, (X,), ((X, X),)), rm.ArgumentTypeError,
         (r"^jvp:", r"tangents has structure \(\(\*, \*\)\)", r"primals has structure \(\*\)")),
    Case("forward-jvp-tangent-count", lambda: rm.jvp(lambda x, y: x * y, (X, X), (X,)), rm.ArgumentTypeError,
         (r"^jvp:", r"tangents has structure \(\*\)", r"primals has structure \(\*, \*\)")),
    Case("forward-jvp-tangent-shape", lambda: rm.jvp(_f, (X,), (rm.ones((2,)),)), rm.ShapeError,
         (r"^jvp:", r"tangents\[0\]", r"shape \(2,\)", r"shape \(3,\)")),
    Case("forward-jvp-tangent-dtype", lambda: rm.jvp(_f, (X,), (rm.ones((3,), "float64"),)), rm.DTypeError,
         (r"^jvp:", r"tangents\[0\]", r"float64", r"float32", r"astype")),
    Case("forward-jvp-pytree-leaf-named", lambda: rm.jvp(lambda p: p["w"], ({"w": X},), ({"w": rm.ones((4,))},)),
         rm.ShapeError, (r"^jvp:", r"tangents\[0\]\['w'\]", r"\(4,\)", r"\(3,\)")),
    Case("forward-jvp-primals-not-a-tuple", lambda: rm.jvp(_f, X, X), rm.ArgumentTypeError,
         (r"^jvp:", r"primals must be a tuple or list", r"a tensor f32\[3\]", r"rm\.jvp\(f, \(x,\), \(t,\)\)")),
    Case("forward-jvp-not-callable", lambda: rm.jvp("sin", (X,), (X,)), rm.ArgumentTypeError,
         (r"^jvp:", r"callable", r"str")),
    # ---- integer primals: their tangents are zeros of their own dtype (JAX's float0 zeros)
    Case("forward-jvp-integer-primal-float-tangent", lambda: rm.jvp(lambda n: n * 2, (N,), (X,)), rm.DTypeError,
         (r"^jvp:", r"tangents\[0\]", r"float32", r"int32", r"zeros_like")),
    Case("forward-jvp-integer-primal-nonzero-tangent", lambda: rm.jvp(lambda n: n * 2, (N,), (N,)),
         rm.ArgumentValueError, (r"^jvp:", r"tangents\[0\]", r"nonzero", r"int32", r"zeros")),
    # ---- linearize checks the tangents it is given later
    Case("forward-linearize-tangent-shape", lambda: _linearized_with(rm.ones((5,))), rm.ShapeError,
         (r"^linearize:", r"tangents\[0\]", r"\(5,\)", r"\(3,\)")),
    Case("forward-linearize-tangent-dtype", lambda: _linearized_with(rm.ones((3,), "float64")), rm.DTypeError,
         (r"^linearize:", r"float64", r"float32")),
    # ---- Jacobians need float arrays in and out
    Case("forward-jacfwd-non-array-output", lambda: rm.jacfwd(lambda x: "loss")(X), rm.ArgumentTypeError,
         (r"^jacfwd:", r"<lambda>", r"returned a str", r"output")),
    Case("forward-jacrev-non-array-output", lambda: rm.jacrev(lambda x: (x, None, 3j))(X), rm.ArgumentTypeError,
         (r"^jacrev:", r"a complex", r"output\[2\]")),
    Case("forward-jacfwd-integer-output", lambda: rm.jacfwd(lambda x: rm.argmax(x))(X), rm.DTypeError,
         (r"^jacfwd:", r"output", r"int32", r"float outputs")),
    Case("forward-jacrev-integer-input", lambda: rm.jacrev(lambda n: n * 2.0)(N), rm.DTypeError,
         (r"^jacrev:", r"argument 0", r"int32", r"argnums")),
    Case("forward-hessian-argnums-out-of-range", lambda: rm.hessian(lambda x: rm.sum(x), argnums=2)(X),
         rm.ArgumentTypeError, (r"^hessian:|^jacrev:|^jacfwd:", r"argnums=2", r"out of range")),
    # ---- custom_jvp
    Case("forward-custom-jvp-without-rule", _no_rule, rm.ArgumentTypeError,
         (r"^custom_jvp:", r"<lambda> has no JVP rule", r"defjvp")),
    Case("forward-custom-jvp-rule-not-callable", lambda: rm.custom_jvp(_f).defjvp(3), rm.ArgumentTypeError,
         (r"custom_jvp", r"defjvp of _f", r"callable", r"int")),
    # ---- what forward mode cannot do, said so
    Case("forward-jvp-of-binomial-scan-gradient", _jvp_of_binomial_gradient, rm.ArgumentTypeError,
         (r"^scan:", r"binomial\(2\)", r"forward mode", r"segments")),
    Case("forward-hessian-through-binomial-scan", _hessian_through_binomial, rm.ArgumentTypeError,
         (r"^scan:", r"binomial\(2\)", r"forward mode \(jvp of grad, hessian\)", r"segments")),
]
