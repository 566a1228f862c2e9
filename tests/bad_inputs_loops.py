"""Bad inputs to the loops and branches: scan, fori_loop, while_loop, cond, switch."""

from __future__ import annotations

import remat as rm
from bad_inputs import Case

V3 = rm.ones((3,))
XS = rm.ones((4, 3))


def _twice(c):
    return rm.concat([c, c])


def _jitted_scan():
    return rm.jit(lambda c, xs: rm.scan(lambda c, x: (_twice(c), x), c, xs))(V3, XS)


def _grad_of_while():
    loop = lambda x: rm.while_loop(lambda v: rm.sum(v) < 10.0, lambda v: v * 2.0, x)  # noqa: E731
    return rm.grad(lambda x: rm.sum(loop(x)))(V3)


def _grad_of_grad_of_binomial():
    def loss(w):
        return rm.sum(rm.scan(lambda c, x: (rm.sin(c * w) + x, None), V3, XS, checkpoint=rm.loops.binomial(2))[0])

    return rm.grad(lambda w: rm.sum(rm.grad(loss)(w)))(V3)


CASES: list[Case] = [
    # ---- scan: the body's carry must keep its structure, shapes and dtypes
    Case("loops-scan-carry-changes-shape", lambda: rm.scan(lambda c, x: (_twice(c), x), V3, XS), rm.ShapeError,
         (r"^scan:", r"_twice|<lambda>", r"carry", r"\(6,\)", r"init has shape \(3,\)")),
    Case("loops-scan-carry-changes-shape-under-jit", _jitted_scan, rm.ShapeError,
         (r"^scan:", r"carry of shape \(6,\)", r"\(3,\)")),
    Case("loops-scan-carry-changes-dtype", lambda: rm.scan(lambda c, x: (c.astype("float64"), x), V3, XS),
         rm.DTypeError, (r"^scan:", r"carry", r"float64", r"float32", r"astype")),
    Case("loops-scan-carry-changes-structure", lambda: rm.scan(lambda c, x: ((c, c), x), V3, XS),
         rm.ArgumentTypeError, (r"^scan:", r"structure \(\*, \*\)", r"init has structure \*")),
    Case("loops-scan-carry-dict-leaf-changes-shape",
         lambda: rm.scan(lambda c, x: ({"h": c["h"][:2]}, x), {"h": V3}, XS), rm.ShapeError,
         (r"^scan:", r"carry\['h'\]", r"\(2,\)", r"\(3,\)")),
    Case("loops-scan-body-returns-no-pair", lambda: rm.scan(lambda c, x: c + x, V3, XS), rm.ArgumentTypeError,
         (r"^scan:", r"<lambda>", r"pair \(carry, y\)")),
    Case("loops-scan-body-returns-a-string", lambda: rm.scan(lambda c, x: ("c", x), V3, XS), rm.ArgumentTypeError,
         (r"^scan:", r"a str", r"carry")),
    Case("loops-scan-fn-not-callable", lambda: rm.scan(3, V3, XS), rm.ArgumentTypeError,
         (r"^scan:", r"callable", r"int 3")),
    Case("loops-scan-init-leaf-not-a-tensor", lambda: rm.scan(lambda c, x: (c, x), {"h": "zero"}, XS),
         rm.ArgumentTypeError, (r"^scan:", r"init\['h'\]", r"a str")),
    # ---- scan: xs and length
    Case("loops-scan-xs-leading-axes-differ", lambda: rm.scan(lambda c, x: (c, x), V3, (XS, rm.ones((5,)))),
         rm.ShapeError, (r"^scan:", r"xs\[0\] \(4, 3\)", r"xs\[1\] \(5,\)", r"leading axes")),
    Case("loops-scan-xs-leaf-is-a-scalar", lambda: rm.scan(lambda c, x: (c, x), V3, rm.asarray(2.0)),
         rm.ShapeError, (r"^scan:", r"xs is a 0-d tensor", r"leading axis")),
    Case("loops-scan-length-disagrees-with-xs", lambda: rm.scan(lambda c, x: (c, x), V3, XS, length=3),
         rm.ArgumentValueError, (r"^scan:", r"length=3", r"leading axis 4", r"\(4, 3\)")),
    Case("loops-scan-no-xs-and-no-length", lambda: rm.scan(lambda c, x: (c, x), V3), rm.ArgumentValueError,
         (r"^scan:", r"xs is None", r"length=")),
    Case("loops-scan-negative-length", lambda: rm.scan(lambda c, x: (c, x), V3, length=-2), rm.ArgumentValueError,
         (r"^scan:", r"length", r"-2")),
    Case("loops-scan-length-not-an-int", lambda: rm.scan(lambda c, x: (c, x), V3, length=2.5), rm.ArgumentTypeError,
         (r"^scan:", r"length must be an int", r"2\.5")),
    Case("loops-scan-unroll-zero", lambda: rm.scan(lambda c, x: (c, x), V3, XS, unroll=0), rm.ArgumentValueError,
         (r"^scan:", r"unroll must be >= 1", r"got 0")),
    Case("loops-scan-unroll-a-bool", lambda: rm.scan(lambda c, x: (c, x), V3, XS, unroll=True), rm.ArgumentTypeError,
         (r"^scan:", r"unroll must be an int", r"True")),
    Case("loops-scan-reverse-not-a-bool", lambda: rm.scan(lambda c, x: (c, x), V3, XS, reverse="yes"),
         rm.ArgumentTypeError, (r"^scan:", r"reverse", r"'yes'")),
    # ---- scan: checkpointing the loop
    Case("loops-scan-checkpoint-unknown-name", lambda: rm.scan(lambda c, x: (c, x), V3, XS, checkpoint="steps"),
         rm.ArgumentTypeError, (r"^scan:", r"checkpoint='steps'", r"\"step\"", r"rm\.loops\.segments\(k\)",
                                r"rm\.loops\.binomial")),
    Case("loops-scan-checkpoint-a-bool", lambda: rm.scan(lambda c, x: (c, x), V3, XS, checkpoint=True),
         rm.ArgumentTypeError, (r"^scan:", r"checkpoint=True", r"not a schedule")),
    Case("loops-scan-checkpoint-a-policy",
         lambda: rm.scan(lambda c, x: (c, x), V3, XS, checkpoint=rm.policies.nothing_saveable),
         rm.ArgumentTypeError, (r"^scan:", r"checkpoint=", r"not a schedule", r"rm\.loops\.binomial")),
    Case("loops-scan-step-checkpointed-carry-changes-shape",
         lambda: rm.scan(lambda c, x: (_twice(c), x), V3, XS, checkpoint="step"), rm.ShapeError,
         (r"^scan:", r"carry of shape \(6,\)", r"init has shape \(3,\)")),
    Case("loops-scan-segmented-carry-changes-dtype",
         lambda: rm.scan(lambda c, x: (c.astype("float64"), x), V3, XS, checkpoint=rm.loops.segments(3)),
         rm.DTypeError, (r"^scan:", r"carry of dtype float64", r"float32", r"astype")),
    Case("loops-segments-size-zero", lambda: rm.loops.segments(0), rm.ArgumentValueError,
         (r"^rm\.loops\.segments:", r"size must be >= 1", r"got 0")),
    Case("loops-segments-size-a-float", lambda: rm.loops.segments(2.5), rm.ArgumentTypeError,
         (r"^rm\.loops\.segments:", r"size must be an int", r"2\.5")),
    Case("loops-binomial-snapshots-zero", lambda: rm.loops.binomial(0), rm.ArgumentValueError,
         (r"^rm\.loops\.binomial:", r"snapshots must be >= 1", r"got 0")),
    Case("loops-binomial-snapshots-a-string", lambda: rm.loops.binomial("log"), rm.ArgumentTypeError,
         (r"^rm\.loops\.binomial:", r"snapshots must be an int", r"'log'")),
    Case("loops-scan-binomial-grad-of-grad", _grad_of_grad_of_binomial, rm.ArgumentTypeError,
         (r"^scan:", r"checkpoint=binomial\(2\)", r"grad of grad", r"rm\.loops\.segments")),
    # ---- fori_loop
    Case("loops-fori-upper-a-float", lambda: rm.fori_loop(0, 2.5, lambda i, v: v, V3), rm.ArgumentTypeError,
         (r"^fori_loop:", r"upper", r"2\.5")),
    Case("loops-fori-lower-a-float-tensor", lambda: rm.fori_loop(rm.asarray(1.0), 3, lambda i, v: v, V3),
         rm.ArgumentTypeError, (r"^fori_loop:", r"lower", r"float32")),
    Case("loops-fori-body-changes-dtype", lambda: rm.fori_loop(0, 3, lambda i, v: i, rm.asarray(1.0)),
         rm.DTypeError, (r"^fori_loop:", r"val of dtype int32", r"init has dtype float32")),
    Case("loops-fori-body-changes-shape", lambda: rm.fori_loop(0, 3, lambda i, v: v[1:], V3), rm.ShapeError,
         (r"^fori_loop:", r"val of shape \(2,\)", r"init has shape \(3,\)")),
    # ---- while_loop
    Case("loops-while-cond-returns-a-float", lambda: rm.while_loop(lambda c: rm.sum(c), lambda c: c, V3),
         rm.DTypeError, (r"^while_loop:", r"float32", r"boolean scalar")),
    Case("loops-while-cond-returns-a-vector", lambda: rm.while_loop(lambda c: c < 3.0, lambda c: c, V3),
         rm.ShapeError, (r"^while_loop:", r"shape \(3,\)", r"scalar")),
    Case("loops-while-cond-returns-a-string", lambda: rm.while_loop(lambda c: "yes", lambda c: c, V3),
         rm.ArgumentTypeError, (r"^while_loop:", r"'yes'", r"boolean scalar")),
    Case("loops-while-body-changes-shape", lambda: rm.while_loop(lambda c: rm.sum(c) < 9.0, _twice, V3),
         rm.ShapeError, (r"^while_loop:", r"_twice", r"\(6,\)", r"\(3,\)")),
    Case("loops-while-cond-not-callable", lambda: rm.while_loop(None, lambda c: c, V3), rm.ArgumentTypeError,
         (r"^while_loop:", r"callable", r"NoneType")),
    Case("loops-while-reverse-mode", _grad_of_while, rm.ArgumentTypeError,
         (r"while_loop", r"reverse-mode", r"rm\.scan", r"fori_loop with Python int bounds")),
    # ---- cond, switch
    Case("loops-cond-branch-takes-two", lambda: rm.cond(rm.asarray(True), lambda a, b: a, lambda a: a, V3),
         rm.ArgumentTypeError, (r"^cond:", r"true_fn <lambda> cannot take the 1 operand passed", r"'b'")),
    Case("loops-switch-branch-takes-none", lambda: rm.switch(rm.asarray(0), [lambda a: a, lambda: V3], V3),
         rm.ArgumentTypeError, (r"^switch:", r"branches\[1\] <lambda> cannot take the 1 operand", r"too many")),
    Case("loops-cond-pred-an-int", lambda: rm.cond(rm.asarray(1), lambda: V3, lambda: V3), rm.DTypeError,
         (r"^cond:", r"pred", r"int32", r"rm\.switch")),
    Case("loops-cond-pred-a-vector", lambda: rm.cond(V3 > 0, lambda: V3, lambda: V3), rm.ShapeError,
         (r"^cond:", r"pred", r"\(3,\)", r"rm\.where")),
    Case("loops-cond-branch-shapes-differ", lambda: rm.cond(rm.asarray(True), lambda: V3, lambda: V3[:2]),
         rm.ShapeError, (r"^cond:", r"false_fn", r"true_fn", r"\(3,\)", r"\(2,\)")),
    Case("loops-cond-branch-dtypes-differ",
         lambda: rm.cond(rm.asarray(True), lambda: V3, lambda: V3.astype("float64")), rm.DTypeError,
         (r"^cond:", r"false_fn", r"true_fn", r"float64", r"float32")),
    Case("loops-cond-branch-structures-differ", lambda: rm.cond(rm.asarray(True), lambda: (V3, V3), lambda: V3),
         rm.ArgumentTypeError, (r"^cond:", r"structure", r"\(\*, \*\)")),
    Case("loops-cond-branch-returns-a-string", lambda: rm.cond(rm.asarray(True), lambda: "a", lambda: V3),
         rm.ArgumentTypeError, (r"^cond:", r"true_fn", r"a str")),
    Case("loops-cond-branch-not-callable", lambda: rm.cond(rm.asarray(True), V3, lambda: V3), rm.ArgumentTypeError,
         (r"^cond:", r"callable", r"true_fn", r"Tensor")),
    Case("loops-switch-index-a-float", lambda: rm.switch(rm.asarray(1.0), [lambda: V3, lambda: V3]), rm.DTypeError,
         (r"^switch:", r"index", r"float32", r"astype")),
    Case("loops-switch-index-a-vector", lambda: rm.switch(rm.asarray([0, 1]), [lambda: V3, lambda: V3]),
         rm.ShapeError, (r"^switch:", r"index", r"\(2,\)")),
    Case("loops-switch-no-branches", lambda: rm.switch(rm.asarray(0), []), rm.ArgumentValueError,
         (r"^switch:", r"branches", r"empty")),
    Case("loops-switch-branches-not-a-list", lambda: rm.switch(rm.asarray(0), lambda: V3), rm.ArgumentTypeError,
         (r"^switch:", r"branches", r"function")),
    Case("loops-switch-branch-shapes-differ",
         lambda: rm.switch(rm.asarray(0), [lambda: V3, lambda: V3, lambda: rm.ones((2, 2))]), rm.ShapeError,
         (r"^switch:", r"branches\[0\]", r"branches\[2\]", r"\(2, 2\)")),
]
