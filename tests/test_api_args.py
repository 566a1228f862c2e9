"""The transformations' arguments, checked where the user gives them: argnums, static arguments
and jit options, has_aux, the callables themselves, in_axes/out_axes, policies. (Compiled
signatures and the jit cache are tested in test_jit.py.)"""

import inspect
import warnings

import numpy as np
import pytest

import remat as rm

X = rm.asarray([1.0, 2.0])
Y = rm.asarray([3.0, 4.0])


def dot(x, y):
    return rm.sum(x * y)


# ---------------------------------------------------------------- argnums


def test_repeated_argnums_are_an_error_not_a_zero_gradient():
    # Before: (zeros, y), the first gradient silently lost.
    with pytest.raises(rm.ArgumentValueError, match=r"grad: argnums=\(0, 0\) names argument 0 more than once"):
        rm.grad(dot, argnums=(0, 0))
    with pytest.raises(rm.ArgumentValueError, match=r"value_and_grad: argnums=\(1, -1\) names argument 1"):
        rm.value_and_grad(dot, argnums=(1, -1))  # -1 is 1 for a function of two arguments


@pytest.mark.parametrize("bad", ["a", 0.0, True, (0, "b"), [0.5], None])
def test_argnums_of_the_wrong_type(bad):
    with pytest.raises(rm.ArgumentTypeError, match=r"grad: argnums must be an int or a tuple of ints, got"):
        rm.grad(dot, argnums=bad)


def test_argnums_out_of_range_fail_at_creation_when_the_signature_says_so():
    with pytest.raises(rm.ArgumentTypeError, match=r"grad: argnums=-5 is out of range: dot takes 2 positional "
                                                   r"arguments \(x, y\), so positions go from -2 to 1"):
        rm.grad(dot, argnums=-5)
    with pytest.raises(rm.ArgumentTypeError, match=r"value_and_grad: argnums=\(0, 2\) is out of range"):
        rm.value_and_grad(dot, argnums=(0, 2))


def test_argnums_out_of_range_fail_at_call_for_functions_taking_star_args():
    g = rm.grad(lambda *xs: rm.sum(xs[0] * xs[1]), argnums=5)
    with pytest.raises(rm.ArgumentTypeError, match=r"grad: argnums=5 needs at least 6 positional arguments, "
                                                   r"but <lambda> was called with 2"):
        g(X, Y)
    with pytest.raises(rm.ArgumentValueError, match=r"names argument 0 more than once"):
        rm.grad(lambda *xs: rm.sum(xs[0] * xs[1]), argnums=(0, -2))(X, Y)


def test_negative_argnums_count_from_the_end():
    np.testing.assert_allclose(rm.grad(dot, argnums=-1)(X, Y), [1.0, 2.0])
    gy, gx = rm.grad(dot, argnums=(-1, 0))(X, Y)
    np.testing.assert_allclose(gy, [1.0, 2.0])
    np.testing.assert_allclose(gx, [3.0, 4.0])


def test_memory_functions_check_argnums():
    x, w = rm.ones((2, 3)), rm.ones((3, 3))

    def loss(x, w):
        return rm.sum(x @ w)

    with pytest.raises(rm.ArgumentValueError, match=r"memory.saved_residuals: argnums=\(1, 1\)"):
        rm.memory.saved_residuals(loss, x, w, argnums=(1, 1))
    with pytest.raises(rm.ArgumentTypeError, match=r"memory.profile: argnums=2 is out of range"):
        rm.memory.profile(loss, x, w, argnums=2)
    with pytest.raises(rm.ArgumentTypeError, match=r"memory.saved_residuals: argnums must be an int .* got 'w'"):
        rm.memory.print_saved_residuals(loss, x, w, argnums="w")
    with pytest.raises(rm.ArgumentValueError, match=r"memory.profile: unknown backend 'gpu'"):
        rm.memory.profile(loss, x, w, backend="gpu")
    only_w = {r.provenance for r in rm.memory.saved_residuals(loss, x, w, argnums=-1)}
    assert only_w == {"argument x"}  # the gradient of w keeps x


def test_grad_keeps_the_signature_of_its_function():
    assert inspect.signature(rm.grad(dot)) == inspect.signature(dot)
    with pytest.raises(rm.ArgumentTypeError, match="static_argnums=5 is out of range: dot takes 2"):
        rm.jit(rm.grad(dot), static_argnums=5)


# ---------------------------------------------------------------- has_aux


@pytest.mark.parametrize("returned, says", [
    (lambda x: rm.sum(x), "a tensor f32\\[\\]"),
    (lambda x: (rm.sum(x), x, x), "a tuple of 3"),
    (lambda x: [rm.sum(x)], "a list of 1"),
])
def test_has_aux_needs_a_pair(returned, says):
    for transform, name in ((rm.grad, "grad"), (rm.value_and_grad, "value_and_grad")):
        with pytest.raises(rm.ArgumentTypeError, match=rf"{name}: has_aux=True needs <lambda> to return a pair "
                                                       rf"\(output, aux\), but it returned {says}"):
            transform(returned, has_aux=True)(X)
    with pytest.raises(rm.ArgumentTypeError, match=rf"vjp: has_aux=True .* returned {says}"):
        rm.vjp(returned, X, has_aux=True)


def test_has_aux_accepts_a_list_pair():
    g, aux = rm.grad(lambda x: [rm.sum(x * x), x + 1.0], has_aux=True)(X)
    np.testing.assert_allclose(g, [2.0, 4.0])
    np.testing.assert_allclose(aux, [2.0, 3.0])


# ---------------------------------------------------------------- callables at creation


@pytest.mark.parametrize("make, name", [
    (lambda: rm.jit(42), "jit"),
    (lambda: rm.grad(42), "grad"),
    (lambda: rm.value_and_grad(42), "value_and_grad"),
    (lambda: rm.vmap(42), "vmap"),
    (lambda: rm.checkpoint(42, X), "checkpoint"),
    (lambda: rm.remat(42), "remat"),
    (lambda: rm.custom_vjp(42), "custom_vjp"),
    (lambda: rm.vjp(42, X), "vjp"),
])
def test_transforming_a_non_callable_fails_at_creation(make, name):
    with pytest.raises(rm.ArgumentTypeError, match=rf"^{name}: expected a callable.*got int 42"):
        make()


def test_a_bad_policy_fails_when_remat_is_applied():
    with pytest.raises(rm.ArgumentValueError, match=r"remat: policy='dots_saveable' is a string"):
        rm.remat(lambda h: h, policy="dots_saveable")


# ---------------------------------------------------------------- jit: static arguments and options


def test_static_arguments_key_on_their_type_as_well_as_their_value(backend):
    # 1 == 1.0 and hash(1) == hash(1.0): before, the second call reused the first program.
    jf = rm.jit(lambda x, n: x * 2.0 if isinstance(n, int) else x * 3.0, static_argnums=1, backend=backend)
    np.testing.assert_allclose(jf(X, 1), [2.0, 4.0])
    np.testing.assert_allclose(jf(X, 1.0), [3.0, 6.0])
    np.testing.assert_allclose(jf(X, 1), [2.0, 4.0])
    assert jf.trace_count == 2
    np.testing.assert_allclose(jf(X, (1,)), [3.0, 6.0])
    np.testing.assert_allclose(jf(X, (1.0,)), [3.0, 6.0])
    assert jf.trace_count == 4  # inside tuples too


def test_unhashable_static_argument_names_it_and_suggests_a_tuple():
    jf = rm.jit(lambda x, sizes: x, static_argnums=1)
    with pytest.raises(rm.ArgumentTypeError, match=r"jit: static argument 'sizes' \(position 1\) of <lambda> "
                                                   r"is a list of 2 \[1, 2\], which is not hashable.*pass a tuple"):
        jf(X, [1, 2])
    np.testing.assert_allclose(jf(X, (1, 2)), [1.0, 2.0])
    by_name = rm.jit(lambda x, *, opts: x, static_argnames="opts")
    with pytest.raises(rm.ArgumentTypeError, match=r"static argument 'opts' .* a dict of 1"):
        by_name(X, opts={"a": 1})


@pytest.mark.parametrize("kwargs, error, says", [
    ({"static_argnums": 5}, rm.ArgumentTypeError, r"jit: static_argnums=5 is out of range: <lambda> takes 2"),
    ({"static_argnums": "a"}, rm.ArgumentTypeError, r"jit: static_argnums must be an int or a tuple of ints, got 'a'"),
    ({"static_argnums": (1, 1)}, rm.ArgumentValueError, r"static_argnums=\(1, 1\) names argument 1 more than once"),
    ({"static_argnames": "m"}, rm.ArgumentValueError, r"static_argnames names 'm', which is not a parameter .* x, n"),
    ({"static_argnames": 3}, rm.ArgumentTypeError, r"static_argnames must be a str or a tuple of str, got 3"),
    ({"backend": "tpu9"}, rm.ArgumentValueError, r"jit: unknown backend 'tpu9'; known backends: numpy, xla"),
])
def test_jit_options_are_checked_at_creation(kwargs, error, says):
    with pytest.raises(error, match=says):
        rm.jit(lambda x, n: x, **kwargs)


def test_static_positions_of_star_args_functions_are_checked_at_call_or_need_counting_from_the_start():
    f = rm.jit(lambda *a: a[0] * float(a[1]), static_argnums=1)
    np.testing.assert_allclose(f(X, 3), [3.0, 6.0])
    with pytest.raises(rm.ArgumentValueError, match=r"static_argnums=-1 counts from the end.*\*args"):
        rm.jit(lambda *a: a[0], static_argnums=-1)


def test_a_static_parameter_is_static_by_position_and_by_keyword():
    calls = []

    def f(x, n):
        calls.append(n)
        return x * float(n)

    by_position, by_name = rm.jit(f, static_argnums=1), rm.jit(f, static_argnames="n")
    np.testing.assert_allclose(by_position(X, n=3), [3.0, 6.0])
    np.testing.assert_allclose(by_name(X, 3), [3.0, 6.0])
    np.testing.assert_allclose(rm.jit(f, static_argnums=-1)(X, 2), [2.0, 4.0])
    assert calls == [3, 3, 2]


def test_jit_of_a_jitted_function_has_its_own_cache():
    # update_wrapper used to copy the inner Jitted's __dict__ (its cache included) into the outer one.
    inner = rm.jit(lambda x: x * 2.0)
    outer = rm.jit(inner, backend="xla")
    np.testing.assert_allclose(outer(X), [2.0, 4.0])
    np.testing.assert_allclose(inner(X), [2.0, 4.0])
    assert (outer.trace_count, inner.trace_count) == (1, 1)
    assert outer.backend == "xla" and inner.backend == "numpy"


def test_custom_vjp_of_a_custom_vjp_does_not_borrow_its_rule():
    inner = rm.custom_vjp(lambda x: x)
    inner.defvjp(lambda x: (x, None), lambda _, g: (g * 10.0,))
    outer = rm.custom_vjp(inner)
    with pytest.raises(rm.ArgumentTypeError, match="has no VJP"):
        rm.grad(lambda x: rm.sum(outer(x)))(X)


# ---------------------------------------------------------------- vmap and vectorized axes


def test_vmap_in_axes_out_of_range_is_an_error_naming_the_argument():
    m = rm.ones((3, 2))
    with pytest.raises(rm.ArgumentValueError, match=r"vmap: in_axes=3 is out of range for row of shape \(3, 2\): "
                                                    r"axes go from -2 to 1"):
        rm.vmap(lambda row: row * 2.0, in_axes=3)(m)
    with pytest.raises(rm.ArgumentValueError, match=r"in_axes=-3 is out of range for b\['w'\]"):
        rm.vmap(lambda a, b: a * b["w"], in_axes=(0, {"w": -3}))(m, {"w": m})
    with pytest.raises(rm.ArgumentValueError, match=r"vmap: in_axes=0 maps over s, a 0-d tensor, which has no "
                                                    r"axis to map; use None"):
        rm.vmap(lambda x, s: x * s)(m, rm.asarray(2.0))
    np.testing.assert_allclose(rm.vmap(lambda x, s: x * s, in_axes=(-1, None))(m, rm.asarray(2.0)), 2 * np.ones((2, 3)))


def test_vmap_structure_mismatch_names_lengths_and_structure_not_tensors():
    m = rm.ones((3, 2))
    with pytest.raises(rm.ArgumentValueError) as info:
        rm.vmap(lambda a, b: a * b, in_axes=(0, 0, 0))(m, m)
    message = str(info.value)
    assert "in_axes is a tuple of 3, args a tuple of 2" in message
    assert "(the arguments: (*, *))" in message
    assert "Tensor(" not in message and "1., 1." not in message
    with pytest.raises(rm.ArgumentValueError, match=r"in_axes\[1\] is a dict with keys \['a'\], args\[1\] a dict "
                                                    r"with keys \['a', 'b'\]"):
        rm.vmap(lambda x, d: x, in_axes=(0, {"a": 0}))(m, {"a": m, "b": m})
    with pytest.raises(rm.ArgumentValueError, match=r"out_axes is a tuple of 2, output a tensor f32\[3,2\]"):
        rm.vmap(lambda x: x, out_axes=(0, 1))(rm.ones((4, 3, 2)))


def test_vmap_out_axes_out_of_range_is_an_error_not_a_wrap():
    m = rm.ones((3, 2))
    # Before: out_axes=4 was taken modulo 2 and gave a (3, 2) result.
    with pytest.raises(rm.ArgumentValueError, match=r"vmap: out_axes=4 is out of range for output, which has 2 axes"):
        rm.vmap(lambda r: r * 2.0, out_axes=4)(m)
    with pytest.raises(rm.ArgumentValueError, match=r"out_axes=-3 is out of range for output\[1\]"):
        rm.vmap(lambda r: (r, r), out_axes=(0, -3))(m)
    assert rm.vmap(lambda r: r * 2.0, out_axes=-1)(m).shape == (2, 3)
    assert rm.vmap(lambda r: r * 2.0, out_axes=1)(m).shape == (2, 3)


def test_vmap_axes_must_be_ints_or_none():
    with pytest.raises(rm.ArgumentTypeError, match=r"vmap: in_axes must be an int, None or a pytree of them, got a "
                                                   r"str 'a' at in_axes\[1\]"):
        rm.vmap(lambda x, y: x, in_axes=(0, "a"))
    with pytest.raises(rm.ArgumentTypeError, match=r"out_axes .* got a float 1.5 at out_axes"):
        rm.vmap(lambda x: x, out_axes=1.5)


def test_vmap_sizes_must_agree_and_something_must_be_mapped():
    with pytest.raises(rm.ArgumentValueError, match=r"must share one size, got 3 for a, 4 for b"):
        rm.vmap(lambda a, b: a + b)(rm.ones((3,)), rm.ones((4,)))
    with pytest.raises(rm.ArgumentValueError, match="no argument is mapped"):
        rm.vmap(lambda a: a, in_axes=None)(rm.ones((3,)))


def test_vectorize_and_devectorize_names():
    v = rm.vectorize(rm.ones((3, 2)), "a")
    with pytest.raises(rm.ArgumentTypeError, match=r"vectorize: the axis name must be a str, got int 3"):
        rm.vectorize(rm.ones((3,)), 3)
    with pytest.raises(rm.ArgumentValueError, match=r"vectorize: name='a': the tensor is already vectorized over 'a'"):
        rm.vectorize(v, "a")
    with pytest.raises(rm.ArgumentValueError, match=r"devectorize: name='b': .* not vectorized over 'b' "
                                                    r"\(it has \['a'\]\)"):
        rm.devectorize(v, "b")
    with pytest.raises(rm.ArgumentTypeError, match=r"devectorize: the axis name must be a str or None, got int 0"):
        rm.devectorize(v, 0)


# ---------------------------------------------------------------- checkpoint policies and bodies


@pytest.mark.parametrize("factory", [rm.policies.save_only_these_names, rm.policies.save_any_names_but_these])
def test_a_policy_factory_is_not_a_policy(factory):
    name = factory.__name__
    with pytest.raises(rm.ArgumentTypeError, match=rf"checkpoint: policy=rm.policies.{name} is the policy factory, "
                                                   rf"not a policy; call it with the names .*{name}\('name', \.\.\.\)"):
        rm.grad(lambda x: rm.sum(rm.checkpoint(lambda h: h * 2.0, x, policy=factory)))(X)
    with pytest.raises(rm.ArgumentTypeError, match=rf"remat: policy=rm.policies.{name} is the policy factory"):
        rm.remat(lambda h: h, policy=factory)


def _named_block(policy):
    def loss(x):
        def body(h):
            a = rm.checkpoint_name(rm.sin(h), "hidden")
            return rm.checkpoint_name(a * 2.0, "out")

        return rm.sum(rm.checkpoint(body, x, policy=policy))

    return loss


@pytest.mark.parametrize("make", [rm.policies.save_only_these_names, rm.policies.save_any_names_but_these])
def test_a_policy_naming_a_missing_value_warns_with_the_names_there_are(make):
    with pytest.warns(rm.policies.UnusedNameWarning, match=r"names 'hiden', but no value in the checkpoint body has "
                                                           r"that name \(names in the body: 'hidden', 'out'\)"):
        g = rm.grad(_named_block(make("hiden")))(X)
    np.testing.assert_allclose(g, 2.0 * np.cos([1.0, 2.0]), rtol=1e-6)
    assert issubclass(rm.policies.UnusedNameWarning, UserWarning)


def test_a_policy_naming_present_values_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rm.grad(_named_block(rm.policies.save_only_these_names("hidden", "out")))(X)


def test_an_eager_checkpoint_body_must_return_tensors_too():
    says = r"checkpoint: the body <lambda> returned a str; a checkpoint body must return a pytree of tensors"
    with pytest.raises(rm.ArgumentTypeError, match=says):
        rm.checkpoint(lambda h: "s", X)  # before: returned 's'
    with pytest.raises(rm.ArgumentTypeError, match=says):
        rm.jit(lambda x: rm.checkpoint(lambda h: "s", x))(X)
    out = rm.checkpoint(lambda h: {"y": h * 2.0, "none": None}, X)
    np.testing.assert_allclose(out["y"], [2.0, 4.0])
