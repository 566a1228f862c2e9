"""rm.jit, rm.make_graph, tracing contexts and their errors."""

import gc
import sys
import threading
import time

import numpy as np
import pytest

import remat as rm

X = rm.asarray([1.0, 2.0])
Y = rm.asarray([3.0, 4.0])


def test_one_trace_per_signature():
    calls = []

    def f(x, y):
        calls.append(1)
        return x * y

    jf = rm.jit(f)
    a, b = rm.ones((2, 3)), rm.ones((2, 3))
    jf(a, b)
    jf(a * 2.0, b)
    assert len(calls) == 1 and jf.trace_count == 1
    jf(rm.ones((3, 3)), rm.ones((3, 3)))  # new shape
    jf(rm.ones((2, 3), "float64"), rm.ones((2, 3), "float64"))  # new dtype
    jf({"k": a}["k"], b)  # same signature again
    assert len(calls) == 3


def test_cache_key_includes_pytree_structure():
    jf = rm.jit(lambda t: rm.sum(rm.stack(rm.tree.leaves(t))))
    x = rm.ones((2,))
    jf((x, x))
    jf([x, x])
    jf({"a": x, "b": x})
    jf({"a": x, "b": x})
    assert jf.trace_count == 3


def test_static_argnums_are_part_of_the_key():
    jf = rm.jit(lambda x, n, mode: x * float(n) if mode == "mul" else x + float(n), static_argnums=(1, 2))
    x = rm.ones((2,))
    np.testing.assert_allclose(jf(x, 3, "mul"), [3.0, 3.0])
    np.testing.assert_allclose(jf(x, 3, "add"), [4.0, 4.0])
    np.testing.assert_allclose(jf(x, 3, "mul"), [3.0, 3.0])
    assert jf.trace_count == 2


def test_results_keep_their_structure():
    out = rm.jit(lambda x: {"double": x * 2.0, "pair": (x, x + 1.0)})(rm.ones((2,)))
    assert set(out) == {"double", "pair"} and isinstance(out["pair"], tuple)
    assert isinstance(out["double"], rm.Tensor)
    np.testing.assert_allclose(out["pair"][1], [2.0, 2.0])


def test_inputs_may_be_numpy_arrays_and_python_scalars():
    out = rm.jit(lambda x, s: x * s)(np.ones(3, np.float32), 2.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [2.0] * 3)


def test_lower_as_text_and_compile():
    jf = rm.jit(lambda x: rm.tanh(x))
    lowered = jf.lower(rm.ones((2,)))
    assert lowered.as_text() == "graph(a:f32[2]) {\n  b:f32[2] = tanh a\n  return b\n}"
    compiled = lowered.compile()
    np.testing.assert_allclose(compiled(rm.zeros((2,))), [0.0, 0.0])


def test_unknown_backend_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown backend 'tpu9'.*numpy, xla"):
        rm.jit(lambda x: x, backend="tpu9")


def test_jit_inside_a_transformation_is_inlined():
    inner = rm.jit(lambda x: rm.sin(x))
    g = rm.grad(lambda x: rm.sum(inner(x)))(rm.zeros((3,)))
    np.testing.assert_allclose(g, [1.0, 1.0, 1.0])


def test_a_10000_node_graph_runs():
    def chain(x):
        for _ in range(10_000):
            x = x + 1.0
        return x

    g = rm.make_graph(chain)(rm.zeros(()))
    assert len(g.nodes) == 10_000
    assert float(rm.jit(chain)(rm.zeros(()))) == 10_000.0


def test_evaluator_frees_buffers_after_last_use():
    x = rm.ones((256,))  # 1 KiB per buffer

    def f(x):
        for _ in range(50):
            x = rm.sin(x)
        return x

    compiled = rm.jit(f).lower(x).compile()
    compiled(x)
    # The caller's input is not counted; each sin writes over its dying input, so one buffer serves.
    assert compiled.last_memory.peak == 1024
    assert compiled.last_memory.live == 1024


def test_a_run_keeps_counts_not_a_list_per_node_unless_profiled():
    """A long loop runs a node millions of times: a plain run keeps its peak, not the live bytes
    after every node (a binomial RNN of 61,440 steps held more in that list than in its arrays);
    `rm.memory.profile` still records one point per node."""
    f = lambda x: rm.fori_loop(0, 500, lambda i, c: rm.sin(c), x)  # noqa: E731
    x = rm.ones((256,))
    compiled = rm.jit(f).lower(x).compile()
    compiled(x)
    assert compiled.last_memory.timeline == [] and compiled.last_memory.peak >= 1024
    assert len(rm.memory.profile(f, x, grad=False).timeline) > 0


@pytest.mark.parametrize("block", ["checkpoint", "custom_vjp"])
def test_a_block_bound_eagerly_never_writes_into_the_callers_array(block):
    """A block node run on its own (a graph emitted eagerly: the eager VJP's backward under vmap
    did) counted its operands as its own buffers, and its body's first elementwise op wrote its
    result into the caller's array (fuzz seeds 6976, 9044: wrong values after it)."""
    from remat.autodiff import emit
    from remat.tensor import Tensor

    body = lambda h: rm.sin(h) * 2.0  # noqa: E731
    if block == "checkpoint":
        f = lambda x: rm.checkpoint(body, x)  # noqa: E731
    else:
        f = rm.custom_vjp(body)
        f.defvjp(lambda h: (body(h), h), lambda h, g: (g * 2.0 * rm.cos(h),))
    arr = np.array([0.5, 1.0, 2.0])
    graph = rm.make_graph(f)(arr)
    assert [n.op for n in graph.nodes] == [block]
    (out,) = emit(graph, [Tensor._concrete(arr)])
    np.testing.assert_array_equal(arr, [0.5, 1.0, 2.0])
    np.testing.assert_allclose(np.asarray(out), np.sin(arr) * 2.0)


def test_elementwise_ops_reuse_dying_buffers_but_not_shared_ones():
    x = rm.ones((256,))

    def f(x):
        a = rm.sin(x)  # new buffer
        b = rm.cos(a)  # a dies here: b is written into it
        c = rm.exp(b)  # b is still read below, so c needs its own buffer
        return c + b  # both die here: the sum reuses one of them

    compiled = rm.jit(f).lower(x).compile()
    out = compiled(x)
    np.testing.assert_allclose(out, np.exp(np.cos(np.sin(1.0))) + np.cos(np.sin(1.0)), rtol=1e-6)
    assert compiled.last_memory.peak == 2 * 1024


# ---------------------------------------------------------------- tracing errors


def test_bool_of_a_traced_tensor_names_where():
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TypeError, match=r"rm\.where"):
        rm.jit(f)(rm.ones(()))


def test_escaped_tracer_is_a_clear_error():
    leaked = []

    def f(x):
        leaked.append(x * 2.0)
        return x

    rm.jit(f)(rm.ones((2,)))
    with pytest.raises(TypeError, match=r"traced inside `jit\(f\)`.*escaped tracer"):
        leaked[0] + 1.0
    with pytest.raises(TypeError, match="escaped tracer"):
        rm.jit(lambda y: y + leaked[0])(rm.ones((2,)))


def test_error_names_op_shapes_and_user_line():
    def f(x, y):
        return x + y  # the line the error points at

    with pytest.raises(ValueError, match=r"add: shapes \(4, 8\) and \(3,\) do not broadcast.*test_jit.py:\d+"):
        rm.jit(f)(rm.ones((4, 8)), rm.ones((3,)))


def test_next_trace_works_after_an_error():
    with pytest.raises(ValueError):
        rm.jit(lambda x: x @ rm.ones((5, 5)))(rm.ones((2, 3)))
    assert rm.trace.current_trace() is None
    np.testing.assert_allclose(rm.jit(lambda x: x * 2.0)(rm.ones((2,))), [2.0, 2.0])


def test_non_array_argument_leaf_is_a_type_error():
    with pytest.raises(TypeError, match="static_argnums"):
        rm.jit(lambda x, s: x)(rm.ones(()), "hello")


def test_traced_function_returning_a_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="returned a str"):
        rm.jit(lambda x: "nope")(rm.ones(()))


def test_make_graph_on_nested_traces_captures_outer_tensors():
    inner_graphs = []

    def f(x):
        inner_graphs.append(rm.make_graph(lambda y: y * x)(rm.ones((2,))))
        return x

    rm.jit(f)(rm.ones((2,)))
    (g,) = inner_graphs
    assert len(g.inputs) == 2  # y, then the captured x of the enclosing trace


def test_a_buffer_seen_through_a_live_view_is_not_overwritten():
    def f(x):
        a = rm.sin(x)
        view = rm.reshape(a, (16, 16))  # NumPy returns a view of a's buffer
        b = rm.cos(a)  # a dies here, but its buffer lives on in the view
        return b, view

    x = rm.asarray(np.linspace(0, 1, 256, dtype=np.float32))
    b, view = rm.jit(f)(x)
    np.testing.assert_allclose(np.asarray(view).ravel(), np.sin(np.asarray(x)), rtol=1e-6)
    np.testing.assert_allclose(b, np.cos(np.sin(np.asarray(x))), rtol=1e-6)


def test_errors_raised_outside_shape_rules_also_point_at_the_user_line():
    with pytest.raises(ValueError, match=r"axis 2 is out of range for a 2-d tensor \(at test_jit.py:\d+\)$"):
        rm.sum(rm.ones((2, 2)), axis=2)
    with pytest.raises(ValueError, match=r"squeeze: .* \(at test_jit.py:\d+\)$"):
        rm.jit(lambda x: rm.squeeze(x, 0))(rm.ones((2, 2)))


def test_keyword_arguments_are_traced_arguments_too():
    calls = []

    def f(x, *, scale, bias=None):
        calls.append(1)
        return x * scale + (0.0 if bias is None else bias)

    jf = rm.jit(f)
    x = rm.ones((2,))
    np.testing.assert_allclose(jf(x, scale=rm.asarray(3.0)), [3.0, 3.0])
    np.testing.assert_allclose(jf(x, scale=rm.asarray(4.0)), [4.0, 4.0])  # same signature: no retrace
    np.testing.assert_allclose(jf(x, scale=rm.asarray(4.0), bias=rm.ones((2,))), [5.0, 5.0])
    assert len(calls) == 2
    graph = jf.lower(x, scale=rm.asarray(3.0)).graph
    assert [v.shape for v in graph.inputs] == [(2,), ()]


def test_static_argnames_make_keyword_arguments_python_values():
    calls = []

    def f(x, *, training: bool):
        calls.append(training)
        return x * 2.0 if training else x  # a Python `if`: training must be static

    jf = rm.jit(f, static_argnames="training")
    x = rm.ones((2,))
    np.testing.assert_allclose(jf(x, training=True), [2.0, 2.0])
    np.testing.assert_allclose(jf(x, training=False), [1.0, 1.0])
    np.testing.assert_allclose(jf(x, training=True), [2.0, 2.0])
    assert calls == [True, False]
    with pytest.raises(TypeError, match=r"rm\.where"):  # not static: traced, and `if` cannot use it
        rm.jit(f)(x, training=True)


# ---------------------------------------------------------------- compiled programs


def test_compiled_program_rejects_another_signature(backend):
    jf = rm.jit(lambda x, s=None: x * 2.0 if s is None else x * s, backend=backend)
    compiled = jf.lower(rm.ones((3,))).compile()
    np.testing.assert_allclose(compiled(rm.asarray([1.0, 2.0, 3.0])), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(compiled(np.ones(3, np.float32)), [2.0] * 3)
    cases = [
        ((rm.ones((5,)),), {}, r"\(f32\[5\]\)"),
        ((rm.ones((3,), "float64"),), {}, r"\(f64\[3\]\)"),
        ((rm.ones((3,)), rm.ones((3,))), {}, r"\(f32\[3\], f32\[3\]\)"),
        ((), {}, r"\(\)"),
        ((rm.ones((3,)),), {"s": rm.ones(())}, r"\(f32\[3\], s=f32\[\]\)"),
        (((rm.ones((3,)),),), {}, r"\(\(f32\[3\],\)\)"),
        (("x",), {}, r"\(str\)"),
    ]
    takes = r"jit\(<lambda>\): the compiled program takes \(f32\[3\]\) but was called with "
    for args, kwargs, got in cases:
        with pytest.raises(rm.ArgumentTypeError, match=takes + got):
            compiled(*args, **kwargs)


def test_compiled_program_with_static_and_keyword_arguments(backend):
    jf = rm.jit(lambda x, n, *, scale: x * float(n) * scale, static_argnums=1, backend=backend)
    compiled = jf.lower(X, 3, scale=rm.asarray(2.0)).compile()
    np.testing.assert_allclose(compiled(Y, scale=rm.asarray(1.0)), [9.0, 12.0])
    with pytest.raises(rm.ArgumentTypeError, match=r"takes \(f32\[2\], scale=f32\[\]\) but was called with "
                                                   r"\(f32\[2\], weak i32\[\], scale=f32\[\]\) \(static arguments "
                                                   r"were fixed"):
        compiled(Y, 3, scale=rm.asarray(1.0))


# ---------------------------------------------------------------- the jit cache


def test_the_cache_is_bounded_least_recently_used_first():
    jf = rm.jit(lambda x: x + 1.0)
    assert jf.cache_size == 64
    for n in range(1, 66):  # 65 signatures: the first is evicted
        jf(rm.ones((n,)))
    assert jf.trace_count == 65
    jf(rm.ones((65,)))
    assert jf.trace_count == 65
    jf(rm.ones((1,)))
    assert jf.trace_count == 66

    small = rm.jit(lambda x: x + 1.0)
    small.cache_size = 2
    a, b, c = rm.ones((1,)), rm.ones((2,)), rm.ones((3,))
    small(a), small(b), small(a)  # a is now the most recently used
    small(c)  # evicts b
    small(a)
    assert small.trace_count == 3
    np.testing.assert_allclose(small(b), [2.0, 2.0])
    assert small.trace_count == 4


def test_clear_cache_and_clear_caches():
    f, g = rm.jit(lambda x: x * 2.0), rm.jit(lambda x: x * 3.0, backend="xla")
    f(X), g(X)
    f.clear_cache()
    f(X), g(X)
    assert (f.trace_count, g.trace_count) == (2, 1)
    rm.clear_caches()
    np.testing.assert_allclose(f(X), [2.0, 4.0])
    np.testing.assert_allclose(g(X), [3.0, 6.0])
    assert (f.trace_count, g.trace_count) == (3, 2)


def test_no_output_is_kept_alive_after_a_call(backend):
    # The NumPy evaluator's Memory (kept as `last_memory`) held every output's buffer.
    jf = rm.jit(lambda x: (x * 2.0, rm.sin(x)), backend=backend)
    for _ in range(2):  # cold, then warm
        a, b = jf(rm.ones((1000,)))
        values = a._value, b._value
        del a, b
        gc.collect()
        assert [sys.getrefcount(v) for v in values] == [3, 3]  # the tuple, and getrefcount's argument
        del values
    compiled = jf.lower(rm.ones((4,))).compile()
    out = compiled(rm.ones((4,)))[0]
    value = out._value
    del out
    gc.collect()
    assert sys.getrefcount(value) == 2
    if backend == "numpy":
        assert compiled.last_memory.peak > 0  # the counts outlive the buffers


def test_numpy_outputs_are_freed_when_the_user_drops_them():
    import tracemalloc

    jf = rm.jit(lambda x: rm.exp(x) + 1.0)
    x = rm.ones((1 << 20,))  # 4 MiB per buffer
    jf(x)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = jf(x)
        held = tracemalloc.get_traced_memory()[0] - before
        del out
        after = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held >= 4 << 20
    assert after < 64 << 10


@pytest.mark.parametrize("n_signatures", [1, 3])
def test_concurrent_cold_calls_trace_each_signature_once(backend, n_signatures):
    traced = []

    def f(x):
        traced.append(x.shape)
        time.sleep(0.05)  # hold the trace open so the other threads arrive while it runs
        return x * 2.0

    jf = rm.jit(f, backend=backend)
    n_threads = 8
    inputs = [rm.asarray(np.full(1 + i % n_signatures, i, np.float32)) for i in range(n_threads)]
    barrier, results, errors = threading.Barrier(n_threads), [None] * n_threads, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = np.asarray(jf(inputs[i]))
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    assert jf.trace_count == n_signatures and len(traced) == n_signatures
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r, np.full(1 + i % n_signatures, 2.0 * i, np.float32))


def test_a_failed_fill_lets_the_next_call_trace_again():
    attempts = []

    def f(x):
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("first trace fails")
        return x + 1.0

    jf = rm.jit(f)
    with pytest.raises(ValueError, match="first trace fails"):
        jf(X)
    np.testing.assert_allclose(jf(X), [2.0, 3.0])
    assert jf.trace_count == 2


# ---------------------------------------------------------------- donated arguments


def _sgd(p, g):
    return {"w": p["w"] - 0.1 * g, "b": p["b"]}


def test_xla_donation_gives_up_the_argument_buffers_as_jax_does():
    import jax.numpy as jnp

    p, g = {"w": jnp.ones((256,)), "b": jnp.zeros((3,))}, jnp.ones((256,))
    out = rm.jit(_sgd, backend="xla", donate_argnums=0)(p, g)
    np.testing.assert_allclose(np.asarray(out["w"]), 0.9, rtol=1e-6)
    assert p["w"].is_deleted() and not g.is_deleted()  # donated, as jax.jit deletes it
    q = {"w": jnp.ones((256,)), "b": jnp.zeros((3,))}
    rm.jit(_sgd, backend="xla", donate_argnames="g")(q, g)
    assert g.is_deleted() and not q["w"].is_deleted()


def test_numpy_donation_lets_the_evaluator_write_the_result_into_the_argument():
    p, g = {"w": np.ones(1000, np.float32), "b": np.zeros(3, np.float32)}, np.ones(1000, np.float32)
    donated = rm.jit(_sgd, donate_argnums=(0,)).lower(p, g).compile()
    out = donated(p, g)
    np.testing.assert_allclose(np.asarray(out["w"]), 0.9, rtol=1e-6)
    assert np.shares_memory(np.asarray(out["w"]), p["w"])  # the new weights in the old ones' buffer
    plain = rm.jit(_sgd).lower(p, g).compile()
    q = {"w": np.ones(1000, np.float32), "b": np.zeros(3, np.float32)}
    assert not np.shares_memory(np.asarray(plain(q, g)["w"]), q["w"])
    # A donated argument is the run's: counted, then freed or written into (here: the result).
    assert donated.last_memory.peak == plain.last_memory.peak + p["w"].nbytes + p["b"].nbytes


def test_donating_a_static_argument_is_an_error():
    with pytest.raises(rm.ArgumentValueError, match=r"jit: 1 is both static and donated"):
        rm.jit(lambda x, n: x * n, static_argnums=1, donate_argnums=1)
    with pytest.raises(rm.ArgumentValueError, match=r"jit: donate_argnames names 'z', which is not a parameter"):
        rm.jit(lambda x, n: x * n, donate_argnames="z")
