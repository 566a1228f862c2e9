"""Eager reverse mode wastes nothing: `rm.grad` called outside `jit` evaluates exactly what the
jitted gradient does, and the function eager `rm.vjp` returns runs the backward pass alone, on the
residuals its forward pass kept. Evaluation is counted at the NumPy backend's table entry for an op
(every eager op and every program node goes through it)."""

from __future__ import annotations

import numpy as np
import pytest

import remat as rm
from remat.backends import numpy as evaluator


@pytest.fixture
def count(monkeypatch):
    """`count(op)`: how many times `op` has been evaluated since the test began."""
    calls: dict[str, int] = {}
    for op in ("sin", "cos", "tanh"):
        impl = evaluator.IMPLS[op]

        def counted(*args, _op=op, _impl=impl, **kwargs):
            calls[_op] = calls.get(_op, 0) + 1
            return _impl(*args, **kwargs)

        monkeypatch.setitem(evaluator.IMPLS, op, counted)

    def read(op: str) -> int:
        return calls.get(op, 0)

    read.reset = calls.clear
    return read


def sin_sin(x):
    return rm.sin(rm.sin(x))


def saving_everything(x):
    return rm.sum(rm.checkpoint(lambda h: rm.tanh(rm.sin(h) * 2.0), x, policy=rm.policies.everything_saveable))


CASES = {"checkpointed": rm.remat(sin_sin), "plain": sin_sin, "policy": saving_everything}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "grad_has_aux"])
def test_eager_gradients_evaluate_what_jit_does(name, transform, count):
    fn = CASES[name]
    make = {"grad": lambda f: rm.grad(f), "value_and_grad": lambda f: rm.value_and_grad(f),
            "grad_has_aux": lambda f: rm.grad(lambda x: (f(x), x * 2.0), has_aux=True)}[transform]
    x = rm.asarray(3.0)
    eager = make(fn)(x)
    counts = [count(op) for op in ("sin", "cos", "tanh")]
    count.reset()
    jitted = rm.jit(make(fn))(x)
    assert [count(op) for op in ("sin", "cos", "tanh")] == counts
    np.testing.assert_allclose(np.asarray(rm.tree.leaves(eager)), np.asarray(rm.tree.leaves(jitted)))


def test_the_issue_example_evaluates_sin_once(count):
    # the primal output is not wanted, so the checkpointed body runs only as the recomputation
    g = rm.grad(rm.remat(lambda x: rm.sin(rm.sin(x))))(3.0)
    assert count("sin") == 1
    assert float(g) == pytest.approx(np.cos(np.sin(3.0)) * np.cos(3.0), rel=1e-6)


def test_vjp_backward_runs_no_forward_op(count):
    x = rm.asarray([0.5, 1.0, 2.0])
    y, back = rm.vjp(sin_sin, x)
    assert (count("sin"), count("cos")) == (2, 0)
    np.testing.assert_allclose(y, np.sin(np.sin(np.asarray(x))), rtol=1e-6)
    want = np.cos(np.sin(np.asarray(x))) * np.cos(np.asarray(x))
    for _ in range(2):  # each call, the backward alone, on the kept residuals
        (g,) = back(rm.ones((3,)))
        np.testing.assert_allclose(g, want, rtol=1e-6)
    assert (count("sin"), count("cos")) == (2, 4)


def test_vjp_of_a_checkpoint_recomputes_only_in_the_backward(count):
    x = rm.asarray(3.0)
    _, back = rm.vjp(rm.remat(sin_sin), x)
    assert count("sin") == 2
    back(rm.asarray(1.0))
    assert count("sin") == 3  # the recomputation of the inner sin, as in rm.jit(rm.value_and_grad(...))
    count.reset()
    rm.jit(rm.value_and_grad(rm.remat(sin_sin)))(x)
    assert count("sin") == 3


def _arrays_held(fn) -> list[np.ndarray]:
    """The arrays (and tensors' values) a closure keeps alive, looking into lists and tuples."""
    found, todo = [], [c.cell_contents for c in fn.__closure__]
    while todo:
        x = todo.pop()
        if isinstance(x, (list, tuple)):
            todo.extend(x)
        elif isinstance(x, rm.Tensor):
            todo.append(x._value)
        elif isinstance(x, np.ndarray):
            found.append(x)
    return found


def test_vjp_keeps_only_what_the_backward_reads():
    # the backward of tanh(x * 3) * 2 reads tanh's output only: neither x nor x * 3 is kept
    x = rm.asarray(np.linspace(0.0, 1.0, 5, dtype=np.float32))
    _, back = rm.vjp(lambda x: rm.tanh(x * 3.0) * 2.0, x)
    (held,) = _arrays_held(back)
    np.testing.assert_allclose(held, np.tanh(np.asarray(x) * 3.0), rtol=1e-6)


def test_vjp_pytrees_aux_and_vectorized_primals():
    p = {"a": rm.asarray([1.0, 2.0]), "b": rm.asarray(3.0)}
    out, back, aux = rm.vjp(lambda p: ((p["a"] * p["b"], rm.sin(p["b"])), {"n": p["b"] * 2.0}), p, has_aux=True)
    assert float(aux["n"]) == 6.0 and np.asarray(out[1]) == pytest.approx(np.sin(3.0))
    (g,) = back((rm.asarray([1.0, 1.0]), rm.asarray(2.0)))
    np.testing.assert_allclose(g["a"], [3.0, 3.0])
    assert float(g["b"]) == pytest.approx(3.0 + 2.0 * np.cos(3.0), rel=1e-6)
    xv = rm.vectorize(rm.asarray([[1.0, 2.0], [3.0, 4.0]]), "batch")
    y, back = rm.vjp(lambda x: rm.sum(rm.sin(x)), xv)
    (g,) = back(rm.ones(()))
    assert g.vectorized_axes == (("batch", 2),)
    np.testing.assert_allclose(rm.devectorize(g, "batch"), np.cos([[1.0, 2.0], [3.0, 4.0]]), rtol=1e-6)


def test_the_backward_under_jit_and_vmap():
    x = rm.asarray([0.5, 1.0])
    _, back = rm.vjp(lambda x: rm.sin(x) * x, x)
    jac = np.diag(np.cos(np.asarray(x)) * np.asarray(x) + np.sin(np.asarray(x)))
    np.testing.assert_allclose(rm.jit(lambda c: back(c)[0])(rm.ones((2,))), jac.sum(0), rtol=1e-6)
    np.testing.assert_allclose(rm.vmap(lambda c: back(c)[0])(np.eye(2, dtype=np.float32)), jac, rtol=1e-6)
    np.testing.assert_allclose(rm.grad(lambda c: rm.sum(back(c)[0] ** 2))(rm.ones((2,))), 2 * jac.sum(0) * np.diag(jac),
                               rtol=1e-6)


def test_the_backward_checks_its_cotangent():
    _, back = rm.vjp(lambda x: (x * 2.0, rm.sum(x)), rm.ones((2,)))
    with pytest.raises(rm.ShapeError, match=r"vjp: cotangent\[0\] has shape \(3,\), but its output has shape \(2,\)"):
        back((rm.ones((3,)), rm.asarray(1.0)))
    with pytest.raises(rm.ArgumentTypeError, match=r"vjp: cotangent structure \(\*\) differs from the output's "
                                                   r"\(\*, \*\)"):
        back((rm.ones((2,)),))
    (g,) = back((np.ones(2), 1))  # float64 and int leaves: taken in the outputs' dtypes, as before
    assert g.dtype == np.float32 and np.asarray(g).tolist() == [3.0, 3.0]


def test_saved_residuals_leave_out_the_seeded_cotangent():
    # a non-scalar output is differentiated with a cotangent of ones: an input of the backward
    # pass, not a value it keeps from the forward
    rows = rm.memory.saved_residuals(lambda x: rm.sin(x) * 2.0, rm.ones((3,)))
    assert [(r.provenance, r.shape) for r in rows] == [("argument x", (3,))]
    rows = rm.memory.saved_residuals(lambda x: {"a": x * 2.0, "b": rm.tanh(x)}, rm.ones((4,)))
    assert [r.kind for r in rows] == ["output"] and rows[0].provenance.startswith("output of tanh")
