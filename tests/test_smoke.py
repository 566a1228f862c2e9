import numpy as np

import remat as rm


def test_tanh_matmul_graph_prints_like_a_program():
    g = rm.make_graph(lambda x, w: rm.tanh(x @ w))(rm.ones((4, 8)), rm.ones((8, 3)))
    assert str(g) == (
        "graph(a:f32[4,8], b:f32[8,3]) {\n"
        "  c:f32[4,3] = matmul a b\n"
        "  d:f32[4,3] = tanh c\n"
        "  return d\n"
        "}"
    )


def test_grad_of_checkpoint_matches_plain():
    w = rm.asarray(np.random.default_rng(0).normal(size=(3, 3)), "float32")

    def f(x, ck):
        layer = lambda h: rm.tanh(h @ w)  # noqa: E731
        return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

    x = rm.ones((2, 3))
    np.testing.assert_allclose(rm.grad(f)(x, True), rm.grad(f)(x, False), rtol=1e-6)
