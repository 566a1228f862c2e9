"""Checkpoint policies: what each saves, what the gradient then recomputes, and that the
gradient itself never changes."""

from collections import Counter

import numpy as np
import pytest

import remat as rm
from conftest import run_on
from remat import policies as P

NAMES = ("a", "b", "c", "d")


def f32(rng, *shape):
    return rm.asarray(rng.normal(0, 0.5, shape), "float32")


def four_named(x, ws):
    """Four layers, each output tagged: every tagged value is needed by the gradient (the next
    matmul's VJP reads it; the last one feeds the loss's multiply)."""
    h = x
    for w, name in zip(ws, NAMES):
        h = rm.checkpoint_name(rm.tanh(h @ w), name)
    return rm.mean(h * h)


def loss_with(policy):
    return lambda x, ws: rm.checkpoint(lambda h: four_named(h, ws), x, policy=policy)


@pytest.fixture
def args(rng):
    return f32(rng, 3, 4), [f32(rng, 4, 4) for _ in NAMES]


def named_residuals(fn, *args):
    return [r.provenance for r in rm.memory.saved_residuals(fn, *args) if r.kind == "named"]


def block(fn, *args):
    (node,) = [n for n in rm.make_graph(fn)(*args).nodes if n.op == "checkpoint"]
    return node


# ---------------------------------------------------------------- what each policy saves


@pytest.mark.parametrize("k", [3, 2, 1, 0])
def test_allow_list_saves_exactly_the_names_it_lists(args, k):
    policy = P.save_only_these_names(*NAMES[:k])
    assert named_residuals(loss_with(policy), *args) == [f"named {n!r}" for n in NAMES[:k]]
    assert block(loss_with(policy), *args).params.get("num_residuals", 0) == k


@pytest.mark.parametrize("k", [3, 2, 1, 0])
def test_deny_list_saves_every_other_name(args, k):
    policy = P.save_any_names_but_these(*NAMES[:k])
    assert named_residuals(loss_with(policy), *args) == [f"named {n!r}" for n in NAMES[k:]]
    assert block(loss_with(policy), *args).params["num_residuals"] == 4 - k


def test_default_saves_nothing_but_the_inputs(args):
    residuals = rm.memory.saved_residuals(loss_with(None), *args)
    assert [r.kind for r in residuals] == ["argument"] * 5
    assert "num_residuals" not in block(loss_with(None), *args).params


def test_a_saved_name_is_not_recomputed(args):
    # Saving 'a' stands for the tanh it renames: the recomputation starts at the second layer.
    plain = rm.make_graph(rm.value_and_grad(four_named))(*args)
    for k in range(5):
        graph = rm.make_graph(rm.value_and_grad(loss_with(P.save_only_these_names(*NAMES[:k]))))(*args)
        assert graph.count("tanh") - plain.count("tanh") == 4 - k


def dense_stack(x, ws):
    h = x
    for w in ws:
        h = h + rm.tanh(h @ w + 1.0)
    return rm.sum(h * h)


def recomputed(policy, x, ws) -> Counter:
    """Ops the checkpointed gradient runs beyond those of the plain gradient."""
    ck = lambda x, ws: rm.checkpoint(lambda h: dense_stack(h, ws), x, policy=policy)  # noqa: E731
    ops = lambda fn: Counter(n.op for n in rm.make_graph(rm.value_and_grad(fn))(x, ws).walk())  # noqa: E731
    extra = ops(ck) - ops(dense_stack)
    return Counter({op: n for op, n in extra.items() if op not in ("checkpoint", "barrier")})


def test_dots_saveable_saves_the_products_and_recomputes_only_elementwise_ops(args):
    x, ws = args
    residuals = rm.memory.saved_residuals(lambda x, ws: rm.checkpoint(
        lambda h: dense_stack(h, ws), x, policy=P.dots_saveable), x, ws)
    assert [r.provenance.split(" at ")[0] for r in residuals if r.kind == "output"] == ["output of matmul"] * 4
    # per layer: the bias add, tanh, and the residual add (the next product's VJP reads h)
    assert recomputed(P.dots_saveable, x, ws) == Counter({"add": 8, "tanh": 4})
    assert recomputed(P.nothing_saveable, x, ws) == Counter({"matmul": 4, "add": 8, "tanh": 4})


def test_tensordot_products_are_dots_too(rng):
    x, w = f32(rng, 2, 3, 4), f32(rng, 4, 5)

    def loss(x, w):
        return rm.sum(rm.checkpoint(lambda h: rm.sin(rm.tensordot(h, w, axes=1)), x, policy=P.dots_saveable))

    assert [r.provenance.split(" at ")[0] for r in rm.memory.saved_residuals(loss, x, w)][-1] == "output of matmul"


def test_everything_saveable_recomputes_nothing(args):
    x, ws = args
    assert recomputed(P.everything_saveable, x, ws) == Counter()


def test_only_values_the_gradient_needs_are_saved(rng):
    # tanh's VJP reads only its derivative 1 - y*y, which depends on primal values alone: saving
    # everything saves that one value (as JAX saves the primal part of tanh's JVP), not x or y.
    x, w = f32(rng, 3, 4), f32(rng, 4, 4)
    node = block(lambda x, w: rm.checkpoint(lambda h: rm.tanh(h @ w + 1.0), x, policy=P.everything_saveable), x, w)
    body = node.params["body"]
    assert node.params["num_residuals"] == 1
    assert body.nodes[[v for n in body.nodes for v in n.outputs].index(body.outputs[1])].op == "subtract"


def test_a_callable_policy_sees_op_inputs_outputs_and_params(args):
    seen = []

    def policy(op, inputs, outputs, params):
        seen.append((op, [v.shape for v in inputs], [v.shape for v in outputs], dict(params)))
        return op == "checkpoint_name" and params["name"] in ("b", "d")

    assert named_residuals(loss_with(policy), *args) == ["named 'b'", "named 'd'"]
    assert ("matmul", [(3, 4), (4, 4)], [(3, 4)], {}) in seen
    assert ("checkpoint_name", [(3, 4)], [(3, 4)], {"name": "a"}) in seen


def test_the_block_prints_its_residual_count_and_policy(rng):
    x, w = f32(rng, 2, 3), f32(rng, 3, 3)
    policy = P.save_only_these_names("h")
    graph = rm.make_graph(lambda x, w: rm.checkpoint(
        lambda h: rm.sin(rm.checkpoint_name(h @ w, "h")), x, policy=policy))(x, w)
    assert str(graph).splitlines()[1] == (
        "  c:f32[2,3] d:f32[2,3] = checkpoint[num_residuals=1 policy=save_only_these_names('h') "
        "saved=(0,)] a b"
    )
    rm.graph.check(graph)


# ---------------------------------------------------------------- gradients never change

POLICIES = [
    None, P.nothing_saveable, P.everything_saveable, P.dots_saveable,
    P.save_only_these_names("a", "c"), P.save_any_names_but_these("b"),
    lambda op, inputs, outputs, params: op == "tanh",
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: getattr(p, "__name__", str(p)))
def test_gradients_are_identical_under_every_policy(backend, args, policy):
    grad = lambda fn: run_on(backend, rm.value_and_grad(fn, (0, 1)), *args)  # noqa: E731
    want, got = grad(four_named), grad(loss_with(policy))
    for a, b in zip(rm.tree.leaves(want), rm.tree.leaves(got)):
        if backend == "numpy":
            np.testing.assert_array_equal(a, b)  # the same ops on the same values
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", POLICIES[2:], ids=lambda p: getattr(p, "__name__", str(p)))
@pytest.mark.filterwarnings("ignore::remat.policies.UnusedNameWarning")  # the names are four_named's
def test_grad_of_grad_under_a_policy(rng, policy):
    x, w = f32(rng, 3, 4), f32(rng, 4, 4)

    def make(ck):
        def inner(x, w):
            def layer(h):
                a = rm.checkpoint_name(rm.sin(h @ w), "a")
                return rm.tanh(a @ w) * a

            return rm.sum(rm.checkpoint(layer, x, policy=policy) if ck else layer(x))

        return lambda x, w: rm.sum(rm.grad(inner, (0, 1))(x, w)[1] ** 2)

    want, got = rm.grad(make(False), (0, 1))(x, w), rm.grad(make(True), (0, 1))(x, w)
    for a, b in zip(want, got):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    rm.graph.check(rm.make_graph(rm.grad(make(True), (0, 1)))(x, w))


def test_nested_blocks_with_policies(backend, rng):
    x, w, v = f32(rng, 3, 4), f32(rng, 4, 4), f32(rng, 4, 4)

    def make(policy, ck=True):
        def loss(x, w, v):
            inner = lambda h: rm.sin(h @ v)  # noqa: E731
            outer = lambda h: rm.tanh((rm.checkpoint(inner, h, policy=policy) if ck else inner(h)) @ w)  # noqa: E731
            return rm.sum(rm.checkpoint(outer, x, policy=policy) if ck else outer(x))

        return loss

    want = run_on(backend, rm.grad(make(None, False), (0, 1, 2)), x, w, v)
    for policy in (P.dots_saveable, P.everything_saveable):
        got = run_on(backend, rm.grad(make(policy), (0, 1, 2)), x, w, v)
        for a, b in zip(want, got):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_remat_decorator_takes_a_policy(args):
    x, ws = args

    @rm.remat
    def plain(h):
        return four_named(h, ws)

    saving = rm.remat(lambda h: four_named(h, ws), policy=P.save_only_these_names("a"))
    assert named_residuals(saving, x) == ["named 'a'"]
    assert named_residuals(plain, x) == []


def test_checkpoint_name_is_the_identity_in_value_and_gradient(rng):
    x = f32(rng, 5)
    np.testing.assert_array_equal(np.asarray(rm.checkpoint_name(x, "x")), np.asarray(x))
    g = rm.grad(lambda x: rm.sum(rm.sin(rm.checkpoint_name(x, "x"))))(x)
    np.testing.assert_array_equal(np.asarray(g), np.cos(np.asarray(x)))


# ---------------------------------------------------------------- the policy values


def test_policies_are_hashable_values_with_readable_names():
    assert P.save_only_these_names("a", "b") == P.save_only_these_names("a", "b")
    assert hash(P.save_only_these_names("a")) == hash(P.save_only_these_names("a"))
    assert P.save_only_these_names("a") != P.save_any_names_but_these("a")
    assert len({P.dots_saveable, P.dots_saveable, P.nothing_saveable}) == 2
    assert repr(P.dots_saveable) == "dots_saveable"
    assert repr(P.save_any_names_but_these("x", "y")) == "save_any_names_but_these('x', 'y')"
    assert rm.policies is P


@pytest.mark.parametrize("bad, error", [
    ("dots_saveable", ValueError), ("save_everything", ValueError), (3, TypeError), ([P.dots_saveable], TypeError),
])
def test_a_policy_that_is_not_one_names_policy(bad, error):
    with pytest.raises(error, match="policy"):
        rm.checkpoint(lambda h: rm.sin(h), rm.ones((2,)), policy=bad)


def test_a_string_naming_a_policy_points_at_it():
    with pytest.raises(ValueError, match=r"rm\.policies\.dots_saveable"):
        rm.remat(rm.sin, policy="dots_saveable")(rm.ones((2,)))


def test_names_must_be_strings():
    with pytest.raises(TypeError, match="save_only_these_names.*str"):
        P.save_only_these_names("a", 1)


def test_a_policy_must_answer_with_a_bool():
    f = lambda x: rm.sum(rm.checkpoint(rm.sin, x, policy=lambda *a: "yes"))  # noqa: E731
    with pytest.raises(TypeError, match="policy .* returned str for sin"):
        rm.make_graph(f)(rm.ones((2,)))


def test_an_unhashable_callable_policy_is_refused():
    class Unhashable:
        __hash__ = None

        def __call__(self, *a):
            return False

    with pytest.raises(TypeError, match="policy must be hashable"):
        rm.checkpoint(rm.sin, rm.ones((2,)), policy=Unhashable())


# ---------------------------------------------------------------- issue 13: more of JAX's policies


def test_a_policy_can_save_what_a_derivative_rule_computes_the_cos_of_sin():
    # JAX's test_remat_custom_policy_save_cos: the cosines are computed in the forward pass and
    # saved; the backward pass runs neither sin nor cos.
    import jax
    import jax.numpy as jnp

    save_cos = lambda op, *_: op == "cos"  # noqa: E731
    f = rm.remat(lambda x: rm.sin(rm.sin(x)), policy=save_cos)
    graph = rm.make_graph(rm.grad(lambda x: rm.sum(f(x))))(rm.ones(3))
    forward, backward = [n for n in graph.nodes if n.op == "checkpoint"]
    assert forward.params["body"].count("cos") == 2 and forward.params["num_residuals"] == 2
    assert backward.params["body"].count("sin") == 0 and backward.params["body"].count("cos") == 0
    assert [r.provenance.split(" at ")[0] for r in rm.memory.saved_residuals(lambda x: rm.sum(f(x)), rm.ones(3))] \
        == ["output of cos", "output of cos"]
    jf = jax.remat(lambda x: jnp.sin(jnp.sin(x)), policy=lambda prim, *_, **__: str(prim) == "cos")
    _, f_lin = jax.linearize(jf, 1.0)
    assert " cos " not in str(f_lin.func.args[0]) and " sin " not in str(f_lin.func.args[0])
    for order in (1, 2, 3):
        got, want = f, jf
        for _ in range(order):
            got, want = rm.grad(got), jax.grad(want)
        np.testing.assert_allclose(got(rm.asarray(0.7)), want(0.7), rtol=1e-5)


def test_saving_a_derivative_value_keeps_no_more_than_the_plain_gradient(rng):
    x = f32(rng, 8, 8)
    every = lambda x: rm.sum(rm.checkpoint(lambda h: rm.exp(rm.sin(h)) * h, x, policy=P.everything_saveable))  # noqa
    plain = lambda x: rm.sum(rm.exp(rm.sin(x)) * x)  # noqa: E731
    size = lambda fn: sum(r.nbytes for r in rm.memory.saved_residuals(fn, x))  # noqa: E731
    assert size(every) <= size(plain)
    np.testing.assert_allclose(rm.grad(every)(x), rm.grad(plain)(x), rtol=1e-5)


def test_dots_with_no_batch_dims_saveable_saves_the_unbatched_product_as_jax_does(rng):
    import jax
    import jax.numpy as jnp
    from jax._src.ad_checkpoint import saved_residuals

    w, b, x = f32(rng, 3, 3), f32(rng, 2, 3, 3), f32(rng, 2, 4, 3)
    loss = lambda x: rm.sum(rm.checkpoint(lambda h: rm.sin(h @ w) @ b, x, policy=P.dots_with_no_batch_dims_saveable))  # noqa
    outputs = [r.shape for r in rm.memory.saved_residuals(loss, x) if r.kind == "output"]
    jp = jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    jw, jb = np.asarray(w), np.asarray(b)
    jloss = lambda x: jnp.sum(jax.checkpoint(lambda h: jnp.sin(h @ jw) @ jb, policy=jp)(x))  # noqa: E731
    want = [a.shape for a, why in saved_residuals(jloss, np.asarray(x)) if why.startswith("output")]
    assert outputs == want == [(2, 4, 3)]
    assert repr(P.dots_with_no_batch_dims_saveable) == "dots_with_no_batch_dims_saveable"
    assert P.dots_with_no_batch_dims_saveable("matmul", [rm.Var((4, 3, 2), "float32"), rm.Var((2, 5), "float32")],
                                              [], {})
    assert not P.dots_with_no_batch_dims_saveable("matmul", [rm.Var((4, 3, 2), "float32"),
                                                             rm.Var((4, 2, 5), "float32")], [], {})


def test_save_from_both_policies_saves_what_either_saves(args):
    both = P.save_from_both_policies(P.save_only_these_names("a"), P.save_only_these_names("c"))
    assert named_residuals(loss_with(both), *args) == ["named 'a'", "named 'c'"]
    mixed = P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("a"))
    assert repr(mixed) == "save_from_both_policies(dots_saveable, save_only_these_names('a'))"
    assert mixed == P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("a"))
    assert hash(mixed) == hash(P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("a")))
    kinds = [r.provenance.split(" at ")[0] for r in rm.memory.saved_residuals(loss_with(mixed), *args)]
    assert "named 'a'" in kinds and "output of matmul" in kinds


def test_save_from_both_policies_warns_about_a_name_the_body_lacks(args):
    with pytest.warns(P.UnusedNameWarning, match=r"save_only_these_names\('zz'\) names 'zz'"):
        rm.grad(loss_with(P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("zz"))))(*args)


LOOP_AFTER_A_SORT = {
    "fori_loop": lambda x: rm.fori_loop(0, 1, lambda i, c: rm.tanh(c), rm.sort(x)),
    "scan": lambda x: rm.scan(lambda c, _: (rm.tanh(c), c), rm.sort(x), None, length=2)[1],
    "vmap(fori_loop)": lambda x: rm.vmap(lambda p: rm.fori_loop(0, 1, lambda i, c: rm.tanh(c), rm.sort(p)))(x),
}


@pytest.mark.parametrize("name", list(LOOP_AFTER_A_SORT))
def test_a_policy_keeping_what_recomputes_a_loops_residuals(name, backend, rng):
    """A loop's VJP reads per-step residuals its replay makes and the body does not: the block
    keeps what recomputes them (here the sorted values; the sort's indices alone crashed the
    backward block with a KeyError, fuzz seed 1743)."""
    body = LOOP_AFTER_A_SORT[name]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    want = rm.grad(lambda x: rm.sum(rm.tanh(body(x))))(x)
    for policy in (P.everything_saveable, P.dots_saveable, P.nothing_saveable):
        f = rm.grad(lambda x, policy=policy: rm.sum(rm.tanh(rm.checkpoint(body, x, policy=policy))))
        np.testing.assert_allclose(np.asarray(run_on(backend, f, x)), np.asarray(want), rtol=1e-6)


def _three_dots_per_step(W):
    def step(x, _):
        x = rm.sin(x @ W)
        x = rm.sin(x @ W)
        return rm.sin(x @ W), None

    return rm.sum(rm.scan(step, rm.ones((5,)), None, length=2)[0])


def _assert_plain_numbers(backend, f, plain, W) -> None:
    """`f` (a value_and_grad) gives `plain`'s value and gradient: the same bits on NumPy."""
    for got, want in zip(run_on(backend, f, W), run_on(backend, rm.value_and_grad(plain), W)):
        if backend == "numpy":
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        else:
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def _block_counts(graph, *ops) -> list[tuple[int, ...]]:
    """Per checkpoint block of `graph` (forward, then backward), how often each op occurs in it."""
    return [tuple(n.params["body"].count(op) for op in ops) for n in graph.nodes if n.op == "checkpoint"]


@pytest.mark.parametrize("policy, forward, backward", [
    (P.dots_saveable, (3, 3, 0), (6, 2, 3)),  # the products are saved per step; sin of the carry is not
    (P.everything_saveable, (3, 3, 3), (6, 0, 0)),  # the cosines too, as derivative values
])
def test_a_policy_reaches_into_a_scan_in_its_block(policy, forward, backward, backend):
    """JAX's "dots outside scan": the policy is applied per step, so the backward block runs
    only the transposed products (two per forward one), not the loop's forward products again
    (it ran 3 + 6 matmuls: the whole loop recomputed, then its gradient)."""
    W = rm.asarray(np.random.default_rng(0).normal(size=(5, 5)).astype(np.float32) * 0.3)
    f = rm.value_and_grad(lambda W: rm.checkpoint(_three_dots_per_step, W, policy=policy))
    assert _block_counts(rm.make_graph(f)(W), "matmul", "sin", "cos") == [forward, backward]
    _assert_plain_numbers(backend, f, _three_dots_per_step, W)


def test_a_scan_under_the_default_policy_is_recomputed_whole():
    """No policy saves nothing: the backward block runs the loop forward again (3 + 6 matmuls)."""
    W = rm.asarray(np.eye(5, dtype=np.float32))
    f = rm.value_and_grad(lambda W: rm.checkpoint(_three_dots_per_step, W))
    assert _block_counts(rm.make_graph(f)(W), "matmul") == [(3,), (9,)]


def test_a_policy_inside_a_scan_step_saves_the_products_per_step():
    """JAX's "dots inside scan": a checkpointed step under dots_saveable keeps its products."""
    W = rm.asarray(np.eye(5, dtype=np.float32))

    def loss(W):
        def step(x, _):
            return rm.checkpoint(lambda x: rm.sin(rm.sin(rm.sin(x @ W) @ W) @ W), x, policy=P.dots_saveable), None

        return rm.sum(rm.scan(step, rm.ones((5,)), None, length=2)[0])

    graph = rm.make_graph(rm.grad(loss))(W)
    backward_scan = [n for n in graph.nodes if n.op == "scan"][-1]
    assert backward_scan.params["body"].count("matmul") == 6


def _three_dots_in_a_branch(W):
    def dots(x):
        x = rm.sin(x @ W)
        x = rm.sin(x @ W)
        return rm.sin(x @ W)

    x = rm.ones((5,))
    return rm.sum(rm.cond(rm.sum(x) > 0, dots, lambda x: x, x))


@pytest.mark.parametrize("policy, backward", [
    (None, (8, 2, 3)),  # the branch recomputed: 3 products, then 5 for the gradient
    (P.dots_saveable, (5, 2, 3)),  # JAX's "dots outside cond": the products saved, not recomputed
    (P.everything_saveable, (5, 0, 0)),
])
def test_a_policy_reaches_into_a_cond_in_its_block(policy, backward, backend):
    """The branch taken outputs what its policy saves (the other branch zeros in those slots, as
    JAX joins its branches' residuals), and the cond's gradient reads them instead of running the
    branch forward again. Five products backward: two per forward one, but one for the first,
    whose input is a constant."""
    W = rm.asarray(np.random.default_rng(1).normal(size=(5, 5)).astype(np.float32) * 0.3)
    f = rm.value_and_grad(lambda W: rm.checkpoint(_three_dots_in_a_branch, W, policy=policy))
    forward = (3, 3, 3 if policy is P.everything_saveable else 0)
    assert _block_counts(rm.make_graph(f)(W), "matmul", "sin", "cos") == [forward, backward]
    _assert_plain_numbers(backend, f, _three_dots_in_a_branch, W)


@pytest.mark.parametrize("policy", [P.dots_saveable, P.everything_saveable])
@pytest.mark.parametrize("inner", [_three_dots_per_step, _three_dots_in_a_branch], ids=["scan", "cond"])
def test_transforms_of_a_block_whose_policy_reached_inside(inner, policy):
    """Forward mode, per-example gradients and second order through the rewritten loop or
    branch give the plain function's numbers (linearize under everything_saveable raised a
    KeyError: its JVP block's policy reached into the loop and tied primal to tangent values)."""
    W = np.random.default_rng(2).normal(size=(5, 5)).astype(np.float32) * 0.3
    Ws = np.stack([W, 0.5 * W, -W])
    dW = np.ones_like(W)
    blocked = lambda W: rm.checkpoint(inner, W, policy=policy)  # noqa: E731
    for f in (lambda g: rm.jvp(g, (W,), (dW,))[1], lambda g: rm.linearize(g, W)[1](dW),
              lambda g: rm.vmap(rm.grad(g))(Ws), lambda g: rm.jvp(rm.grad(g), (W,), (dW,))[1],
              lambda g: rm.grad(lambda W: rm.sum(rm.grad(g)(W) ** 2))(W)):
        np.testing.assert_allclose(np.asarray(f(blocked)), np.asarray(f(inner)), rtol=2e-5, atol=1e-6)
