"""Bad inputs to rm.custom_vjp: nondiff_argnums, what fwd returns and what bwd returns (one
cotangent per differentiable argument, of its structure, shape and dtype)."""

from __future__ import annotations

import remat as rm
from bad_inputs import Case

X = rm.asarray([1.0, 2.0])


def _defined(fwd, bwd, fn=lambda x, y: x * y, **kw):
    f = rm.custom_vjp(fn, **kw)
    f.defvjp(fwd, bwd)
    return f


def _grad_xy(f):
    return lambda: rm.grad(lambda x: rm.sum(f(x, x)))(X)


def _grad_x(f):
    return lambda: rm.grad(lambda x: rm.sum(f(x)))(X)


def _scaled(k, x):
    return k * x


def _scaled_bwd(k, res, g):
    return (k * g, g)  # one too many: k is in nondiff_argnums and takes no cotangent


def _pair_bwd(res, g):
    return {"x": g, "y": g}


def _shape_bwd(res, g):
    return (rm.sum(g),)


def _int_bwd(res, g):
    return (g.astype("int32"),)


def _tensor_bwd(res, g):
    return g


def _varargs(*xs):
    return xs[0]


def _fwd_reads_scope():
    def loss(w):
        f = _defined(lambda x: (x * w, None), lambda _, g: (g,), fn=lambda x: x * w)
        return rm.sum(f(X))

    return rm.grad(loss)(X)


_SQUARE = lambda x: x * x  # noqa: E731

CASES: list[Case] = [
    # ---- nondiff_argnums: checked when the function is made, like argnums
    Case("custom-vjp-nondiff-argnums-out-of-range", lambda: rm.custom_vjp(_scaled, nondiff_argnums=2),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"nondiff_argnums=2", r"out of range", r"_scaled takes 2")),
    Case("custom-vjp-nondiff-argnums-str", lambda: rm.custom_vjp(_scaled, nondiff_argnums="k"),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"nondiff_argnums must be an int or a tuple of ints", r"'k'")),
    Case("custom-vjp-nondiff-argnums-repeated", lambda: rm.custom_vjp(_scaled, nondiff_argnums=(0, -2)),
         rm.ArgumentValueError, (r"^custom_vjp:", r"nondiff_argnums=\(0, -2\)", r"more than once")),
    Case("custom-vjp-nondiff-argnums-beyond-the-call",
         _grad_x(_defined(lambda *xs: (xs[0], None), lambda _, g: (g,), fn=_varargs, nondiff_argnums=3)),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"nondiff_argnums=3", r"at least 4 positional arguments",
                                r"_varargs was called with 1")),
    # ---- fwd
    Case("custom-vjp-fwd-not-a-pair", _grad_x(_defined(lambda x: x, lambda _, g: (g,), fn=_SQUARE)),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"fwd <lambda> of <lambda>", r"pair \(output, residuals\)",
                                r"got Tensor")),
    Case("custom-vjp-fwd-reads-a-traced-tensor-from-scope", _fwd_reads_scope, rm.TracerError,
         (r"^custom_vjp:", r"fwd <lambda>", r"shape \(2,\)", r"pass it to <lambda> as an argument")),
    # ---- bwd: one cotangent per differentiable positional argument
    Case("custom-vjp-bwd-too-few-cotangents", _grad_xy(_defined(lambda x, y: (x * y, None), lambda _, g: (g,))),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"bwd rule <lambda> of <lambda>", r"returned a tuple of 1 cotangent,",
                                r"2 differentiable positional arguments \(x, y\)", r"one cotangent per argument")),
    Case("custom-vjp-bwd-cotangent-for-a-nondiff-argument",
         lambda: rm.grad(lambda x: rm.sum(_defined(lambda k, x: (k * x, None), _scaled_bwd, fn=_scaled,
                                                   nondiff_argnums=0)(2.0, x)))(X),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"bwd rule _scaled_bwd of _scaled", r"a tuple of 2 cotangents",
                                r"1 differentiable positional argument \(x; k is in nondiff_argnums\)")),
    Case("custom-vjp-bwd-returns-a-tensor", _grad_x(_defined(lambda x: (x, None), _tensor_bwd, fn=lambda x: x)),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"bwd rule _tensor_bwd", r"returned a tensor f32\[2\],",
                                r"1 differentiable positional argument \(x\)", r"a tuple")),
    Case("custom-vjp-bwd-wrong-structure",
         lambda: rm.grad(lambda x: rm.sum(_defined(lambda p: (p[0] * p[1], None), lambda _, g: (_pair_bwd(_, g),),
                                                   fn=lambda p: p[0] * p[1])((x, x))))(X),
         rm.ArgumentTypeError, (r"^custom_vjp:", r"bwd rule <lambda>", r"structure \{'x': \*, 'y': \*\}",
                                r"argument p", r"has structure \(\*, \*\)")),
    Case("custom-vjp-bwd-wrong-shape", _grad_x(_defined(lambda x: (x, None), _shape_bwd, fn=lambda x: x)),
         rm.ShapeError, (r"^custom_vjp:", r"bwd rule _shape_bwd", r"shape \(\) for argument x of shape \(2,\)")),
    Case("custom-vjp-bwd-int-cotangent", _grad_x(_defined(lambda x: (x, None), _int_bwd, fn=lambda x: x)),
         rm.DTypeError, (r"^custom_vjp:", r"bwd rule _int_bwd", r"dtype int32 for argument x of dtype float32")),
]
