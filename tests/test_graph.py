"""The IR: golden printed programs and the SSA checker."""

import numpy as np
import pytest

import remat as rm
from remat.graph import Graph, GraphError, Node, Var, check


def test_golden_small_function():
    def f(x, w):
        h = rm.tanh(x @ w + 1.0)
        return rm.sum(h, axis=1), h[0]

    g = rm.make_graph(f)(rm.ones((4, 8)), rm.ones((8, 3)))
    assert str(g) == """\
graph(a:f32[4,8], b:f32[8,3]) {
  c:f32[4,3] = matmul a b
  d:f32[4,3] = add c 1.0
  e:f32[4,3] = tanh d
  f:f32[4] = sum[axes=(1,)] e
  g:f32[1,3] = slice[start=(0,0) step=(1,1) stop=(1,3)] e
  h:f32[3] = reshape[shape=(3,)] g
  return f, h
}"""


def test_golden_checkpoint_block_is_indented():
    g = rm.make_graph(lambda x, w: rm.checkpoint(lambda h: rm.sin(h @ w), x))(rm.ones((2, 3)), rm.ones((3, 3)))
    assert str(g) == """\
graph(a:f32[2,3], b:f32[3,3]) {
  c:f32[2,3] = checkpoint[saved=(0,)] a b
    body(d:f32[2,3], e:f32[3,3]) {
      f:f32[2,3] = matmul d e
      g:f32[2,3] = sin f
      return g
    }
  return c
}"""


def test_concrete_tensors_become_constants_of_the_trace_that_reads_them():
    w = rm.ones((3, 3))
    g = rm.make_graph(lambda x: rm.checkpoint(lambda h: rm.sin(h @ w), x))(rm.ones((2, 3)))
    (block,) = g.nodes
    assert len(block.inputs) == 1 and not g.constants
    assert [v.shape for v in block.params["body"].constants] == [(3, 3)]


def test_small_constants_print_their_values():
    g = rm.make_graph(lambda x: x + np.array([1.0, 2.0], np.float32))(rm.ones((2,)))
    assert "const [1.,2.]" in str(g)


def test_dtypes_print_short():
    g = rm.make_graph(lambda i, b: (i + 1, rm.logical_not(b)))(
        rm.asarray(np.arange(3, dtype=np.int64)), rm.asarray([True])
    )
    assert "a:i64[3]" in str(g) and "b:bool[1]" in str(g)


def test_check_accepts_traced_graphs():
    def f(x, w):
        return rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))

    args = rm.ones((2, 3)), rm.ones((3, 3))
    check(rm.make_graph(f)(*args))
    check(rm.make_graph(rm.value_and_grad(f, (0, 1)))(*args))
    check(rm.make_graph(rm.grad(rm.grad(lambda x: rm.sum(rm.sin(x)) ** 2.0 * 1.0 + 0.0)))(rm.asarray(1.0)))


def _var(shape=(2,)):
    return Var(shape, np.float32)


def test_check_rejects_use_before_definition():
    a, b, c = _var(), _var(), _var()
    g = Graph([a], [c], [Node("add", [a, b], [c], {})])
    with pytest.raises(GraphError, match="uses a Var before it is defined"):
        check(g)


def test_check_rejects_double_definition():
    a, b = _var(), _var()
    g = Graph([a], [b], [Node("sin", [a], [b], {}), Node("cos", [a], [b], {})])
    with pytest.raises(GraphError, match="defined twice"):
        check(g)


def test_check_rejects_wrong_shapes():
    a, b = _var((2,)), _var((3,))
    g = Graph([a], [b], [Node("sin", [a], [b], {})])
    with pytest.raises(GraphError, match=r"node 0 \(sin\)"):
        check(g)


def test_check_rejects_unknown_ops_and_undefined_outputs():
    a, b = _var(), _var()
    with pytest.raises(GraphError, match="unknown op 'frobnicate'"):
        check(Graph([a], [b], [Node("frobnicate", [a], [b], {})]))
    with pytest.raises(GraphError, match="never defined"):
        check(Graph([a], [b], []))


def test_check_looks_inside_blocks():
    x, w = rm.ones((2, 3)), rm.ones((3, 3))
    g = rm.make_graph(lambda x: rm.checkpoint(lambda h: rm.tanh(h @ w), x))(x)
    body = g.nodes[0].params["body"]
    body.nodes[0].outputs[0].shape = (7, 7)  # corrupt the body
    with pytest.raises(GraphError, match="matmul"):
        check(g)


def test_walk_and_count_see_sub_graphs():
    w = rm.ones((3, 3))
    g = rm.make_graph(lambda x: rm.sin(rm.checkpoint(lambda h: rm.sin(h @ w), x)))(rm.ones((2, 3)))
    assert [n.op for n in g.walk()] == ["checkpoint", "matmul", "sin", "sin"]
    assert g.count("sin") == 2


def test_dead_code_is_dropped():
    g = rm.make_graph(lambda x: (rm.exp(x), rm.sin(x))[0])(rm.ones((2,)))
    assert [n.op for n in g.nodes] == ["exp"]
