"""rm.optim: sgd (momentum, Nesterov, L2 decay), adam and adamw against NumPy written from the
papers' formulas over several steps and pytrees of parameters, against values worked out by
hand (what optax and PyTorch give), inside rm.jit on both backends, with schedules, masks and
low-precision parameters."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pytest

import remat as rm
from conftest import run_on

STEPS = 5


class Block(NamedTuple):
    w: object
    g: object


def make_params(dtype="float64", seed=0):
    rng = np.random.default_rng(seed)
    arr = lambda *shape: rng.normal(size=shape).astype(dtype)  # noqa: E731
    return {"w": arr(3, 4), "b": arr(4), "blocks": [Block(arr(2, 2), arr(3)), Block(arr(2, 2), arr(3))]}


def grad_sequence(params, steps=STEPS, seed=1):
    rng = np.random.default_rng(seed)
    return [rm.tree.map(lambda p: rng.normal(size=p.shape).astype(p.dtype), params) for _ in range(steps)]


def leaves(t):
    return [np.asarray(x) for x in rm.tree.leaves(t)]


# ---------------------------------------------------------------- references, from the formulas


def ref_sgd(p, gs, lr, momentum=None, nesterov=False, wd=0.0):
    p, b, out = p.copy(), np.zeros_like(p), []
    for g in gs:
        g = g + wd * p
        if momentum is not None:
            b = momentum * b + g
            g = g + momentum * b if nesterov else b
        p = p - lr * g
        out.append(p)
    return out


def ref_adam(p, gs, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    """Kingma and Ba, Algorithm 1; with `wd`, Loshchilov and Hutter's AdamW (decay scaled by lr)."""
    p, m, v, out = p.copy(), np.zeros_like(p), np.zeros_like(p), []
    for t, g in enumerate(gs, start=1):
        lr_t = lr(t - 1) if callable(lr) else lr
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        p = p - lr_t * (m_hat / (np.sqrt(v_hat) + eps) + wd * p)
        out.append(p)
    return out


def run_steps(opt, params, grads_seq):
    state = opt.init(params)
    history = []
    for g in grads_seq:
        params, state = opt.update(g, state, params)
        history.append(params)
    return history, state


def assert_matches_reference(history, params, grads_seq, ref, rtol):
    per_leaf = [ref(p, [leaves(g)[i] for g in grads_seq]) for i, p in enumerate(leaves(params))]
    for step, got in enumerate(history):
        for i, x in enumerate(leaves(got)):
            np.testing.assert_allclose(x, per_leaf[i][step], rtol=rtol, atol=rtol, err_msg=f"step {step}, leaf {i}")


SGD_CASES = {
    "plain": dict(lr=0.1),
    "momentum": dict(lr=0.05, momentum=0.9),
    "nesterov": dict(lr=0.05, momentum=0.9, nesterov=True),
    "weight_decay": dict(lr=0.1, momentum=0.5, wd=0.01),
}
ADAM_CASES = {
    "adam": (dict(lr=1e-2), lambda c: rm.optim.adam(c["lr"])),
    "adam-betas": (dict(lr=3e-3, b1=0.5, b2=0.9, eps=1e-6),
                   lambda c: rm.optim.adam(c["lr"], b1=c["b1"], b2=c["b2"], eps=c["eps"])),
    "adamw": (dict(lr=1e-2, wd=0.1), lambda c: rm.optim.adamw(c["lr"], weight_decay=c["wd"])),
}


def make_sgd(c):
    return rm.optim.sgd(c["lr"], momentum=c.get("momentum"), nesterov=c.get("nesterov", False),
                        weight_decay=c.get("wd", 0.0))


@pytest.mark.parametrize("case", SGD_CASES)
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 2e-6)])
def test_sgd_matches_the_formulas_over_steps(case, dtype, rtol):
    c = SGD_CASES[case]
    params = make_params(dtype)
    grads_seq = grad_sequence(params)
    history, state = run_steps(make_sgd(c), params, grads_seq)
    ref = lambda p, gs: ref_sgd(p, gs, c["lr"], c.get("momentum"), c.get("nesterov", False), c.get("wd", 0.0))  # noqa: E731
    assert_matches_reference(history, params, grads_seq, ref, rtol)
    assert int(state.count) == STEPS
    assert (state.momentum is None) == ("momentum" not in c)


@pytest.mark.parametrize("case", ADAM_CASES)
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 2e-5)])
def test_adam_and_adamw_match_the_formulas_over_steps(case, dtype, rtol):
    c, make = ADAM_CASES[case]
    params = make_params(dtype)
    grads_seq = grad_sequence(params)
    history, state = run_steps(make(c), params, grads_seq)
    kw = {k: c[k] for k in ("b1", "b2", "eps") if k in c}
    ref = lambda p, gs: ref_adam(p, gs, c["lr"], wd=c.get("wd", 0.0), **kw)  # noqa: E731
    assert_matches_reference(history, params, grads_seq, ref, rtol)
    assert int(state.count) == STEPS
    assert all(x.dtype == np.dtype(dtype) for x in leaves(history[-1]) + leaves(state.mu) + leaves(state.nu))


def test_the_pytree_of_params_keeps_its_structure():
    params = make_params("float32")
    new, state = rm.optim.adamw(1e-3).update(grad_sequence(params, 1)[0], rm.optim.adamw(1e-3).init(params), params)
    assert isinstance(new["blocks"][1], Block) and isinstance(state.mu["blocks"], list)
    assert rm.tree.flatten(new)[1] == rm.tree.flatten(params)[1] == rm.tree.flatten(state.nu)[1]
    assert [x.shape for x in leaves(new)] == [x.shape for x in leaves(params)]


# ---------------------------------------------------------------- by hand: what optax and PyTorch give


def test_adam_two_steps_by_hand():
    """p = 1, g = 0.5 then 0.25, lr 0.1, default betas and eps, in float64:
    step 1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25, p = 1 - 0.1 * 0.5 / (0.5 + 1e-8);
    step 2: m = 0.07, v = 0.00031225, m^ = 0.07 / 0.19, v^ = 0.00031225 / 0.001999."""
    opt = rm.optim.adam(0.1)
    p = rm.asarray([1.0], "float64")
    state = opt.init(p)
    p, state = opt.update(rm.asarray([0.5], "float64"), state, p)
    assert float(p[0]) == pytest.approx(0.900000002, abs=1e-12)
    p, state = opt.update(rm.asarray([0.25], "float64"), state, p)
    by_hand = 0.900000002 - 0.1 * (0.07 / 0.19) / (math.sqrt(0.00031225 / 0.001999) + 1e-8)
    assert float(p[0]) == pytest.approx(by_hand, abs=1e-12) and float(p[0]) == pytest.approx(0.8067820405, abs=1e-9)
    assert float(state.mu[0]) == pytest.approx(0.07) and float(state.nu[0]) == pytest.approx(0.00031225)


def test_adamw_decay_is_decoupled_and_scaled_by_the_learning_rate():
    """optax.adamw(0.1, weight_decay=0.5) and torch.optim.AdamW(lr=0.1, weight_decay=0.5) both
    take the first step 2 - 0.1 * (1 + 0.5 * 2) = 1.8 for p = 2, g = 1 (Adam's first step is
    sign(g)); with g = 0 it is the decay alone: 2 - 0.1 * 0.5 * 2 = 1.9."""
    opt = rm.optim.adamw(0.1, weight_decay=0.5, eps=0.0)  # eps=0: Adam's first step is exactly sign(g)
    p = rm.asarray([2.0], "float64")
    p, _ = opt.update(rm.asarray([1.0], "float64"), opt.init(p), p)
    assert float(p[0]) == pytest.approx(1.8, abs=1e-15)
    opt = rm.optim.adamw(0.1, weight_decay=0.5)
    p = rm.asarray([2.0], "float64")
    p, _ = opt.update(rm.asarray([0.0], "float64"), opt.init(p), p)
    assert float(p[0]) == pytest.approx(1.9, abs=1e-12)


def test_sgd_nesterov_by_hand():
    """torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True) and optax.sgd(0.1, 0.9, nesterov=True),
    p = 1, g = 1 twice: b = 1, step 1 + 0.9 = 1.9; b = 1.9, step 1 + 0.9 * 1.9 = 2.71.
    Heavy ball: steps 1 and 1.9."""
    for nesterov, expected in ((True, [0.81, 0.539]), (False, [0.9, 0.71])):
        opt = rm.optim.sgd(0.1, momentum=0.9, nesterov=nesterov)
        p = rm.asarray([1.0], "float64")
        state = opt.init(p)
        for want in expected:
            p, state = opt.update(rm.asarray([1.0], "float64"), state, p)
            assert float(p[0]) == pytest.approx(want, abs=1e-12)


def test_sgd_weight_decay_is_added_to_the_gradient():
    """PyTorch's SGD: g + wd p feeds the momentum: p = 2, g = 1, wd = 0.5, lr = 0.1 -> 2 - 0.1 * 2 = 1.8."""
    opt = rm.optim.sgd(0.1, momentum=0.9, weight_decay=0.5)
    p = rm.asarray([2.0], "float64")
    p, state = opt.update(rm.asarray([1.0], "float64"), opt.init(p), p)
    assert float(p[0]) == pytest.approx(1.8) and float(state.momentum[0]) == pytest.approx(2.0)


# ---------------------------------------------------------------- schedules and masks


def test_a_schedule_gets_the_number_of_steps_taken():
    seen = []

    def schedule(count):
        seen.append(int(count))
        return 0.1 / (1.0 + count.astype("float64"))

    params = make_params("float64")
    grads_seq = grad_sequence(params)
    history, _ = run_steps(rm.optim.adam(schedule), params, grads_seq)
    assert seen == list(range(STEPS))
    assert_matches_reference(history, params, grads_seq, lambda p, gs: ref_adam(p, gs, lambda c: 0.1 / (1 + c)), 1e-12)


@pytest.mark.parametrize("how", ["tree", "callable"])
def test_adamw_mask_spares_what_it_marks_false(how):
    params = make_params("float64")
    marks = rm.tree.map(lambda p: p.ndim > 1, params)  # decay matrices, not vectors
    mask = marks if how == "tree" else (lambda p: rm.tree.map(lambda x: x.ndim > 1, p))
    grads_seq = grad_sequence(params)
    history, _ = run_steps(rm.optim.adamw(1e-2, weight_decay=0.1, mask=mask), params, grads_seq)
    for i, (p, decayed) in enumerate(zip(leaves(params), rm.tree.leaves(marks))):
        want = ref_adam(p, [leaves(g)[i] for g in grads_seq], 1e-2, wd=0.1 if decayed else 0.0)[-1]
        np.testing.assert_allclose(leaves(history[-1])[i], want, rtol=1e-12)


# ---------------------------------------------------------------- traced: one jit program per step


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_update_inside_jit_on_both_backends_equals_eager(backend, name):
    opt = rm.optim.sgd(0.05, momentum=0.9, nesterov=True) if name == "sgd" else rm.optim.adamw(1e-2)
    params = make_params("float32")
    grads_seq = grad_sequence(params)
    eager, _ = run_steps(opt, params, grads_seq)
    traces = []
    step = rm.jit(lambda g, s, p: traces.append(1) or opt.update(g, s, p), backend=backend)
    state, p = opt.init(params), params
    for g in grads_seq:
        p, state = step(g, state, p)
    assert len(traces) == 1  # one trace for every step: the state's structure and types never change
    for got, want in zip(leaves(p), leaves(eager[-1])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert int(state.count) == STEPS


def test_a_training_step_is_one_program_and_the_loss_falls(backend):
    """Least squares: loss, gradients and the Adam update in one jit step."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = x @ np.arange(1.0, 6.0, dtype=np.float32) + 0.5
    opt = rm.optim.adam(0.1)

    def loss_fn(params, x, y):
        return rm.mean((x @ params["w"] + params["b"] - y) ** 2)

    def step(params, state, x, y):
        loss, grads = rm.value_and_grad(loss_fn)(params, x, y)
        params, state = opt.update(grads, state, params)
        return params, state, loss

    params = {"w": rm.zeros((5,)), "b": rm.zeros(())}
    state = opt.init(params)
    step = rm.jit(step, backend=backend)
    losses = []
    for _ in range(300):
        params, state, loss = step(params, state, x, y)
        losses.append(float(loss))
    assert losses[-1] < 1e-3 * losses[0]
    np.testing.assert_allclose(np.asarray(params["w"]), np.arange(1.0, 6.0), atol=1e-2)


def test_low_precision_params_keep_their_dtype_and_step_in_float32():
    """bfloat16 parameters and moments; the step itself is worked out in float32 and rounded once
    (in bfloat16, 1 - 0.999**t would be 0 for the first steps and the step inf)."""
    params = {"w": rm.asarray(np.linspace(-1, 1, 8), "bfloat16")}
    opt = rm.optim.adam(1e-2)
    grads = {"w": rm.asarray(np.linspace(0.5, -0.5, 8), "bfloat16")}
    new, state = opt.update(grads, opt.init(params), params)
    assert new["w"].dtype == state.mu["w"].dtype == state.nu["w"].dtype == rm.bfloat16
    p32, g32 = np.asarray(params["w"]).astype(np.float32), np.asarray(grads["w"]).astype(np.float32)
    want = ref_adam(p32.astype(np.float64), [g32.astype(np.float64)], 1e-2)[0].astype(rm.bfloat16)
    np.testing.assert_array_equal(np.asarray(new["w"]).astype(np.float32), want.astype(np.float32))
    assert np.isfinite(np.asarray(run_on("xla", lambda p, g: opt.update(g, opt.init(p), p)[0], params, grads)["w"]
                                  ).astype(np.float32)).all()


def test_optimizers_print_their_name():
    assert repr(rm.optim.adamw(1e-3)) == "<optimizer adamw>" and rm.optim.sgd(0.1).name == "sgd"
