"""Forward mode: every op's JVP from the gradient table (tests/test_grad_ops.py), checked against
central finite differences in float64 and against `jax.jvp`, plain, inside a checkpoint and on
XLA; then `jvp` itself (pytrees, has_aux, vectorized tangents, composition with jit, grad and
vmap), `linearize` (what it keeps), the blocks (checkpoint, loops, custom_vjp) and the coverage
of the op registry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from remat.core import OPS, BlockJVP
from test_grad_ops import SPECS, Spec, _close, _directions, _inputs, nonzero, positive, spread

EXTRA = [
    Spec("while", lambda x: rm.while_loop(lambda c: rm.sum(c[1]) < 3.0, lambda c: (rm.sin(c[0]) * 1.5, c[1] + 1.0),
                                          (x, rm.zeros((3,), x.dtype)))[0],
         lambda x: jax.lax.while_loop(lambda c: jnp.sum(c[1]) < 3.0, lambda c: (jnp.sin(c[0]) * 1.5, c[1] + 1.0),
                                      (x, jnp.zeros((3,), x.dtype)))[0], ((3,),)),
    Spec("scan", lambda c, xs: rm.scan(lambda h, x: (rm.tanh(h * x), h * 2.0), c, xs, checkpoint="step"),
         lambda c, xs: jax.lax.scan(jax.checkpoint(lambda h, x: (jnp.tanh(h * x), h * 2.0)), c, xs),
         ((3,), (4, 3)), tag="step-checkpointed"),
    Spec("scan", lambda c, xs: rm.scan(lambda h, x: (rm.tanh(h * x), h * 2.0), c, xs,
                                       checkpoint=rm.loops.binomial(2)),
         lambda c, xs: jax.lax.scan(lambda h, x: (jnp.tanh(h * x), h * 2.0), c, xs), ((3,), (5, 3)), tag="binomial"),
]
# Ops added after the gradient table was written, until it has rows for them.
NEW_OPS = [
    Spec("cumsum", lambda x: rm.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1), ((3, 4),)),
    Spec("cumprod", lambda x: rm.cumprod(x, axis=0), lambda x: jnp.cumprod(x, axis=0), ((3, 4),), domain=nonzero),
    Spec("sort", lambda x: rm.sort(x, axis=-1), lambda x: jnp.sort(x, axis=-1), ((3, 4),), domain=spread),
    Spec("remainder", rm.remainder, jnp.remainder, ((3, 4), (3, 4)), domain=(spread, positive)),
]
TABLE = SPECS + EXTRA + [s for s in NEW_OPS if s.name not in {t.name for t in SPECS}]
IDS = [s.id for s in TABLE]


def _fd_tangent(spec: Spec, xs, vs, eps=1e-6):
    """(f(x + eps v) - f(x - eps v)) / 2 eps, per output leaf."""
    plus = rm.tree.leaves(spec.rfn(*[x + eps * v for x, v in zip(xs, vs)]))
    minus = rm.tree.leaves(spec.rfn(*[x - eps * v for x, v in zip(xs, vs)]))
    return [(np.asarray(p) - np.asarray(m)) / (2 * eps) for p, m in zip(plus, minus)]


def _tangents(spec: Spec, xs, vs, wrap=lambda f: f):
    out, t = rm.jvp(wrap(spec.rfn), tuple(xs), tuple(vs))
    return rm.tree.leaves(out), rm.tree.leaves(t)


@pytest.mark.parametrize("spec", TABLE, ids=IDS)
def test_jvp_against_finite_differences(spec: Spec):
    xs = _inputs(spec)
    vs = _directions(xs)
    outs, ts = _tangents(spec, xs, vs)
    for o, t, fd in zip(outs, ts, _fd_tangent(spec, xs, vs, spec.fd_eps)):
        assert t.dtype == o.dtype and t.shape == o.shape
        _close(t, fd, max(spec.tol, 1e-6) * 10)


@pytest.mark.parametrize("spec", TABLE, ids=IDS)
def test_jvp_against_jax(spec: Spec):
    xs = _inputs(spec)
    vs = _directions(xs)
    outs, ts = _tangents(spec, xs, vs)
    with jax.enable_x64(True):  # one compiled program: op by op, JAX compiles every op (10 s of make test)
        jout, jt = jax.jit(lambda p, t: jax.jvp(spec.jaxfn, p, t))(tuple(jnp.asarray(np.asarray(x)) for x in xs),
                                                                   tuple(jnp.asarray(np.asarray(v)) for v in vs))
    for o, e in zip(outs, jax.tree_util.tree_leaves(jout)):
        _close(o, e, spec.tol)
    for t, e in zip(ts, jax.tree_util.tree_leaves(jt)):
        assert t.shape == e.shape
        _close(t, e, spec.tol)


def _checkpointed(fn):
    return lambda *xs: rm.checkpoint(fn, *xs)


@pytest.mark.parametrize("spec", TABLE, ids=IDS)
def test_jvp_inside_checkpoint_and_on_xla(spec: Spec):
    """The same tangents through a checkpoint block, and jitted on XLA in float32."""
    xs = _inputs(spec)
    vs = _directions(xs)
    _, expected = _tangents(spec, xs, vs)
    _, ts = _tangents(spec, xs, vs, _checkpointed)
    for t, e in zip(ts, expected):
        _close(t, e, 1e-12)
    xs32, vs32 = [x.astype("float32") for x in xs], [v.astype("float32") for v in vs]
    on_xla = rm.jit(lambda xs, vs: rm.jvp(spec.rfn, tuple(xs), tuple(vs))[1], backend="xla")(xs32, vs32)
    for t, e in zip(rm.tree.leaves(on_xla), expected):
        assert t.shape == e.shape
        _close(t, e, 2e-4, 1e-5)


def test_every_differentiable_op_has_a_jvp_rule():
    """The registry, not a list written here: an op added later without a rule fails this."""
    missing = [name for name, op in OPS.items() if op.differentiable and op.jvp is None]
    assert missing == []
    for name, op in OPS.items():
        assert op.jvp is None or callable(op.jvp) or isinstance(op.jvp, BlockJVP), name


def test_every_differentiable_op_is_in_the_table():
    """Each primitive with a JVP rule is exercised by some row (by name, or inside a composite
    or a block that the row's graph contains)."""
    seen = set()
    for spec in TABLE:
        xs = _inputs(spec)
        graph = rm.make_graph(lambda *xs, spec=spec: rm.jvp(spec.rfn, tuple(xs), tuple(xs)))(*xs)
        seen.update(n.op for n in graph.walk())
    refused = {"scan_binomial"}  # forward mode of a binomial scan's gradient raises (tested below)
    wanted = {name for name, op in OPS.items() if op.jvp is not None} - refused
    assert wanted - seen == set()


# ---------------------------------------------------------------- jvp itself


def test_jvp_pytrees_and_has_aux():
    def f(p, scale):
        return {"y": rm.sin(p["w"]) * scale, "z": p["b"] * p["b"]}, rm.sum(p["w"])

    p = {"w": rm.asarray([0.5, 1.0]), "b": rm.asarray(3.0)}
    t = {"w": rm.asarray([1.0, 2.0]), "b": rm.asarray(1.0)}
    out, tan, aux = rm.jvp(f, (p, rm.asarray(2.0)), (t, rm.asarray(0.0)), has_aux=True)
    np.testing.assert_allclose(np.asarray(tan["y"]), 2.0 * np.cos([0.5, 1.0]) * [1.0, 2.0], rtol=1e-6)
    assert float(tan["z"]) == 6.0
    assert float(aux) == 1.5 and sorted(out) == ["y", "z"]


def test_integer_primal_takes_zero_tangent_and_integer_output_gets_zeros():
    out, t = rm.jvp(lambda x, n: (x * n.astype("float32"), n * 2), (rm.asarray(2.0), rm.asarray(3)),
                    (rm.asarray(1.0), rm.zeros_like(rm.asarray(3))))
    assert float(t[0]) == 3.0
    assert t[1].dtype == np.int32 and int(t[1]) == 0


def test_jvp_of_jvp_and_grad_of_jvp_and_jvp_of_grad():
    f = lambda x: rm.sum(rm.sin(x) * x)  # noqa: E731
    x = rm.asarray([0.3, 1.2])
    v = rm.asarray([1.0, -1.0])
    hvp_fwd = rm.jvp(lambda y: rm.jvp(f, (y,), (v,))[1], (x,), (v,))[1]
    hvp_rev = rm.jvp(rm.grad(f), (x,), (v,))[1]
    grad_of_jvp = rm.grad(lambda y: rm.jvp(f, (y,), (v,))[1])(x)
    jf = lambda x: jnp.sum(jnp.sin(x) * x)  # noqa: E731
    xj, vj = jnp.asarray([0.3, 1.2]), jnp.asarray([1.0, -1.0])
    expected = jax.jvp(jax.grad(jf), (xj,), (vj,))[1]
    _close(hvp_rev, expected, 1e-6)
    _close(grad_of_jvp, expected, 1e-6)
    assert float(hvp_fwd) == pytest.approx(float(jnp.dot(expected, vj)), rel=1e-6)


def test_jvp_under_jit_and_vmap(backend):
    x = rm.asarray(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3))
    per_row = rm.vmap(lambda r: rm.jvp(lambda y: rm.tanh(y) * 2.0, (r,), (rm.ones((3,)),))[1])
    expected = 2.0 * (1 - np.tanh(np.asarray(x)) ** 2)
    np.testing.assert_allclose(np.asarray(rm.jit(per_row, backend=backend)(x)), expected, rtol=1e-6)
    # Tangents vectorized, primal not (how jacfwd works).
    cols = rm.vmap(lambda t: rm.jvp(rm.sin, (x[0],), (t,))[1])(np.eye(3, dtype="float32"))
    np.testing.assert_allclose(np.asarray(cols), np.diag(np.cos(np.asarray(x[0]))), rtol=1e-6)


def test_vmap_of_the_function_vjp_returns():
    """The bug of issue 14: vmap over the cotangents of an eager (and a traced) vjp."""
    x = rm.asarray([0.0, 1.0, 2.0])
    _, back = rm.vjp(rm.sin, x)
    rows = rm.vmap(lambda c: back(c)[0])(np.eye(3, dtype="float32"))
    np.testing.assert_allclose(np.asarray(rows), np.diag(np.cos([0.0, 1.0, 2.0])), rtol=1e-6)
    w = rm.asarray(np.arange(9, dtype="float32").reshape(3, 3) / 9)

    def jac(x):
        _, back = rm.vjp(lambda x: rm.checkpoint(lambda h: rm.tanh(h @ w), x), x)
        return rm.vmap(lambda c: back(c)[0])(np.eye(3, dtype="float32"))

    expected = jax.jacrev(lambda x: jnp.tanh(x @ jnp.asarray(np.asarray(w))))(jnp.asarray([0.0, 1.0, 2.0]))
    _close(rm.jit(jac)(x), expected, 1e-5)
    _close(jac(x), expected, 1e-5)


# ---------------------------------------------------------------- linearize


def test_linearize_keeps_residuals_and_runs_only_the_linear_part():
    x = rm.asarray([0.1, 0.7, 1.3])
    f = lambda x: rm.sin(x) * rm.exp(x)  # noqa: E731
    y, f_jvp = rm.linearize(f, x)
    v = rm.asarray([1.0, 2.0, 3.0])
    np.testing.assert_allclose(np.asarray(y), np.sin(np.asarray(x)) * np.exp(np.asarray(x)), rtol=1e-6)
    _close(f_jvp(v), rm.jvp(f, (x,), (v,))[1], 1e-6)
    graph = rm.make_graph(f_jvp)(v)
    assert graph.count("sin") == graph.count("cos") == graph.count("exp") == 0  # all kept, nothing recomputed
    assert {n.op for n in graph.nodes} <= {"multiply", "add"}


def test_linearize_of_a_checkpoint_keeps_only_its_inputs_or_what_the_policy_saves():
    w = rm.asarray(np.eye(3, dtype="float32") * 0.5)
    x = rm.asarray([0.1, 0.7, 1.3])

    def f(x, policy=None):
        return rm.checkpoint(lambda h: rm.tanh(rm.sin(h) @ w) @ w, x, policy=policy)

    v = rm.ones((3,))
    # Without a policy, the linear part recomputes the first product (the second one's value is
    # not needed for tangents); with dots_saveable it reads the saved product.
    for policy, recomputed_dots in ((None, 1), (rm.policies.dots_saveable, 0)):
        y, f_jvp = rm.linearize(lambda x, policy=policy: f(x, policy), x)
        _close(f_jvp(v), rm.jvp(f, (x,), (v,))[1], 1e-6)
        graph = rm.make_graph(f_jvp)(v)
        (block,) = [n for n in graph.nodes if n.op == "checkpoint"]
        body = block.params["body"]
        # tanh is recomputed either way (from the saved product with the policy); sin only without.
        assert body.count("sin") == (1 if policy is None else 0) and body.count("tanh") == 1
        primal_dots = sum(1 for n in body.nodes if n.op == "matmul" and not _reads_tangent(body, n))
        assert primal_dots == recomputed_dots


def _reads_tangent(body, node) -> bool:
    tangent = {body.inputs[1]}
    for n in body.nodes:
        if any(v in tangent for v in n.inputs):
            tangent.update(n.outputs)
    return any(v in tangent for v in node.inputs)


W3 = np.array([[0.5, -0.2, 0.1], [0.3, 0.4, -0.6], [0.0, 0.2, 0.7]], np.float32)

# (remat function, the same in JAX): loops, a branch and nested checkpoints, whose primal values
# are computed together with their tangents in one block (linearize once raised a KeyError here)
LINEARIZED = {
    "cond": (lambda x: rm.cond(rm.sum(x) > 0, rm.sin, rm.cos, x),
             lambda x: jax.lax.cond(jnp.sum(x) > 0, jnp.sin, jnp.cos, x)),
    "switch": (lambda x: rm.switch(rm.asarray(1), [rm.sin, rm.tanh, rm.cos], x),
               lambda x: jax.lax.switch(1, [jnp.sin, jnp.tanh, jnp.cos], x)),
    "scan": (lambda x: rm.scan(lambda c, _: (rm.sin(c) * x, rm.sum(c)), x, length=3),
             lambda x: jax.lax.scan(lambda c, _: (jnp.sin(c) * x, jnp.sum(c)), x, length=3)),
    "scan step": (lambda x: rm.scan(lambda c, _: (rm.tanh(c @ W3), None), x, length=4, checkpoint="step")[0],
                  lambda x: jax.lax.scan(lambda c, _: (jnp.tanh(c @ W3), None), x, length=4)[0]),
    "scan segments": (lambda x: rm.scan(lambda c, _: (rm.tanh(c @ W3), c), x, length=5,
                                        checkpoint=rm.loops.segments(2)),
                      lambda x: jax.lax.scan(lambda c, _: (jnp.tanh(c @ W3), c), x, length=5)),
    "fori_loop": (lambda x: rm.fori_loop(0, 3, lambda i, c: rm.sin(c) + x, x),
                  lambda x: jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + x, x)),
    "while_loop": (lambda x: rm.while_loop(lambda c: rm.sum(rm.abs(c)) < 10.0, lambda c: c * 1.5 + x, x),
                   lambda x: jax.lax.while_loop(lambda c: jnp.sum(jnp.abs(c)) < 10.0, lambda c: c * 1.5 + x, x)),
    "nested checkpoints": (lambda x: rm.checkpoint(lambda h: rm.checkpoint(lambda g: rm.tanh(g @ W3), h) @ W3, x),
                           lambda x: jnp.tanh(x @ W3) @ W3),
    # found by the fuzzer: a checkpointed scan step whose JVP saves a tangent (the residual the
    # never-more-than-plain guarantee keeps), inside a scan
    "scan step saving a tangent": (
        lambda x: rm.scan(lambda c, _: (c + rm.tanh(rm.mean(_inner_ys(rm, x))), _inner_ys(rm, x)), x, length=2,
                          checkpoint="step")[1],
        lambda x: jax.lax.scan(lambda c, _: (c + jnp.tanh(jnp.mean(_inner_ys(jnp, x))), _inner_ys(jnp, x)), x,
                               length=2)[1]),
    # and a checkpointed step that ignores the tangent of its xs: the primal part must not read it
    "scan step ignoring a tangent": (
        lambda x: rm.scan(lambda c, _: (c, rm.scan(lambda h, x_i: (rm.tanh(h), h), rm.checkpoint(lambda p: 0.5, x),
                                                    x, checkpoint="step")[1]), x, length=2)[1],
        lambda x: jax.lax.scan(lambda c, _: (c, jax.lax.scan(lambda h, x_i: (jnp.tanh(h), h), 0.5, x)[1]), x,
                               length=2)[1]),
}


def _inner_ys(np_, x):
    """The ys of a scan whose carry starts at `x` and whose ys are the carry's sum."""
    def step(h, x_i):
        s = np_.sum(h)
        return np_.tanh(s) * h, s
    return (rm.scan if np_ is rm else jax.lax.scan)(step, x, x)[1]


@pytest.mark.parametrize("name", list(LINEARIZED))
def test_linearize_through_loops_branches_and_nested_checkpoints_matches_jax(name, backend):
    f, jf = LINEARIZED[name]
    x, t = np.array([0.3, -0.2, 0.5], np.float32), np.array([1.0, 0.5, -2.0], np.float32)

    def both(x, t):
        y, f_jvp = rm.linearize(f, x)
        return y, f_jvp(t)

    y, ty = rm.jit(both, backend=backend)(rm.asarray(x), rm.asarray(t))
    jy, jty = jax.jvp(jf, (x,), (t,))
    for got, want in zip(rm.tree.leaves((y, ty)), jax.tree.leaves((jy, jty))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=1e-6)
    _, f_jvp = rm.linearize(f, rm.asarray(x))  # eagerly too
    want = rm.jvp(f, (rm.asarray(x),), (rm.asarray(t),))[1]
    for got, w in zip(rm.tree.leaves(f_jvp(rm.asarray(t))), rm.tree.leaves(want), strict=True):
        _close(got, w, 1e-6)


def test_linearize_under_jit_and_vmap():
    x = rm.asarray([0.1, 0.7])

    def jac(x):
        _, f_jvp = rm.linearize(lambda y: rm.sin(y) * y, x)
        return rm.vmap(f_jvp)(np.eye(2, dtype="float32"))

    expected = np.diag(np.cos([0.1, 0.7]) * [0.1, 0.7] + np.sin([0.1, 0.7]))
    np.testing.assert_allclose(np.asarray(rm.jit(jac)(x)), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jac(x)), expected, rtol=1e-6)


# ---------------------------------------------------------------- blocks


def test_tangent_of_a_checkpoint_is_one_checkpointed_block():
    w = rm.asarray(np.ones((3, 3), "float32"))
    f = lambda x: rm.checkpoint(lambda h: rm.tanh(h @ w), x)  # noqa: E731
    graph = rm.make_graph(lambda x, t: rm.jvp(f, (x,), (t,)))(rm.ones((3,)), rm.ones((3,)))
    assert [n.op for n in graph.nodes if n.op == "checkpoint"] == ["checkpoint"]
    (block,) = [n for n in graph.nodes if n.op == "checkpoint"]
    assert block.params["body"].count("tanh") == 1  # the primal is computed once, with its tangent
    assert graph.count("tanh") == 1


def test_captured_tensor_tangent_flows_through_checkpoint(backend):
    """jvp with respect to a weight the checkpoint body only captures."""
    x = rm.asarray([0.5, -0.2])

    def f(w):
        return rm.checkpoint(lambda h: rm.sin(h * w), x)

    w = rm.asarray([1.5, 2.0])
    t = rm.asarray([1.0, 1.0])
    got = rm.jit(lambda w, t: rm.jvp(f, (w,), (t,))[1], backend=backend)(w, t)
    np.testing.assert_allclose(np.asarray(got), np.cos([0.75, -0.4]) * [0.5, -0.2], rtol=1e-6)


def test_custom_vjp_under_forward_mode_follows_its_rule():
    """The tangent is the transpose of the custom VJP, which is linear in its cotangent (so
    jacfwd agrees with jacrev), not the derivative of fwd's code."""
    scaled = rm.custom_vjp(lambda x: x)
    scaled.defvjp(lambda x: (x, None), lambda _, g: (g * rm.asarray([2.0, 3.0]),))
    x = rm.asarray([1.0, 2.0])
    t = rm.asarray([0.5, 3.0])
    np.testing.assert_allclose(np.asarray(rm.jvp(lambda x: scaled(x) * 1.0, (x,), (t,))[1]), [1.0, 9.0])
    np.testing.assert_allclose(np.asarray(rm.jacfwd(scaled)(x)), np.diag([2.0, 3.0]))
    softmax = rm.nn.softmax
    z = rm.asarray([0.1, 0.5, -0.3])
    _close(rm.jacfwd(softmax)(z), rm.jacrev(softmax)(z), 1e-6)
    _close(rm.jacfwd(softmax)(z), jax.jacfwd(jax.nn.softmax)(jnp.asarray([0.1, 0.5, -0.3])), 1e-6)


def test_binomial_gradient_refuses_forward_mode():
    def loss(c):
        return rm.sum(rm.scan(lambda h, x: (rm.sin(h * x), None), c, rm.ones((4, 3)),
                              checkpoint=rm.loops.binomial(2))[0])

    with pytest.raises(rm.ArgumentTypeError, match=r"binomial\(2\).*forward mode.*segments"):
        rm.jvp(rm.grad(loss), (rm.ones((3,)),), (rm.ones((3,)),))



def test_linearize_of_a_checkpointed_while_loop_matches_jax(backend):
    """JAX's checkpoint test of linearize through a while_loop (issue 26): an int counter and a
    float carry, under each policy, eagerly and jitted; the linear function recomputes the loop
    inside its block (sin and cos both in its program, as in JAX's jaxpr)."""
    def f(x):
        return rm.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, rm.sin(c[1])), (0, x))[1]

    def jf(x):
        return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1])), (0, x))[1]

    expected = np.cos(np.sin(np.sin(4.0))) * np.cos(np.sin(4.0)) * np.cos(4.0)
    y_jax, lin_jax = jax.linearize(jax.checkpoint(jf), jnp.float32(4.0))
    x, t = rm.asarray(4.0), rm.asarray(1.0)
    for policy in (None, rm.policies.dots_saveable, rm.policies.everything_saveable):
        g = lambda x: rm.checkpoint(f, x, policy=policy)  # noqa: B023,E731
        y, lin = rm.linearize(g, x)
        _close(y, y_jax, 1e-6)
        _close(lin(t), lin_jax(jnp.float32(1.0)), 1e-6)
        _close(lin(t), expected, 1e-6)
        _close(rm.jit(lambda x, t: rm.linearize(g, x)[1](t), backend=backend)(x, t), expected, 1e-6)  # noqa: B023
    program = str(rm.make_graph(lambda x, t: rm.linearize(lambda x: rm.checkpoint(f, x), x)[1](t))(x, t))
    assert " sin " in program and " cos " in program and "checkpoint" in program

    # A vector carry and a float loop condition, against jax.linearize.
    v = np.array([0.3, 0.5, 0.7], np.float32)
    tv = np.array([1.0, 2.0, 3.0], np.float32)
    body = lambda c: (rm.sin(c[0]) * 1.5, c[1] + 1.0)  # noqa: E731
    h = lambda x: rm.checkpoint(lambda y: rm.while_loop(lambda c: c[1] < 4.0, body, (y, rm.asarray(0.0)))[0], x)  # noqa: E731
    jbody = lambda c: (jnp.sin(c[0]) * 1.5, c[1] + 1.0)  # noqa: E731
    jh = jax.checkpoint(lambda y: jax.lax.while_loop(lambda c: c[1] < 4.0, jbody, (y, 0.0))[0])
    y_jax, lin_jax = jax.linearize(jh, jnp.asarray(v))
    y, lin = rm.linearize(h, rm.asarray(v))
    _close(y, y_jax, 1e-6)
    _close(lin(rm.asarray(tv)), lin_jax(jnp.asarray(tv)), 1e-6)
    _close(rm.jit(lambda x, t: rm.linearize(h, x)[1](t), backend=backend)(rm.asarray(v), rm.asarray(tv)),
           lin_jax(jnp.asarray(tv)), 1e-6)
