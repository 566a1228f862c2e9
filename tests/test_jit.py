"""rm.jit, rm.make_graph, tracing contexts and their errors."""

import numpy as np
import pytest

import remat as rm


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
