"""rm.optim: sgd (momentum, Nesterov, L2 decay), adam and adamw against NumPy written from the
papers' formulas over several steps and pytrees of parameters, against values worked out by
hand (what optax and PyTorch give), inside rm.jit on both backends, with schedules, masks and
low-precision parameters."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
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


# ---------------------------------------------------------------- schedules: optax's, bit for bit
# (issue 26). The reference is JAX running optax's schedule and AdamW code, written out below with
# optax 0.2.8's operations in its order (optax/schedules/_schedule.py, _join.py, transform.py),
# and optax itself where it is installed. Under a jit, XLA rewrites the program (x / c becomes
# x * (1 / c), a multiply-add one rounding): remat's XLA program is compared with the jitted
# reference, its NumPy one (op by op, no fused multiply-add) with JAX run op by op.


class JaxOptax:
    """optax's schedules and AdamW as optax writes them, on JAX."""

    @staticmethod
    def polynomial_schedule(init_value, end_value, power, transition_steps, transition_begin=0):
        def schedule(count):
            count = jnp.clip(count - transition_begin, 0, transition_steps)
            return (init_value - end_value) * ((1 - count / transition_steps) ** power) + end_value
        return schedule

    @staticmethod
    def linear_schedule(init_value, end_value, transition_steps, transition_begin=0):
        return JaxOptax.polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)

    @staticmethod
    def cosine_decay_schedule(init_value, decay_steps, alpha=0.0, exponent=1.0):
        def schedule(count):
            count = jnp.minimum(count, float(decay_steps))
            cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / float(decay_steps)))
            return init_value * ((1 - alpha) * cosine**exponent + alpha)
        return schedule

    @staticmethod
    def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0, staircase=False,
                          end_value=None):
        def schedule(count):
            k = count - transition_begin
            p = jnp.floor(k / transition_steps) if staircase else k / transition_steps
            value = jnp.where(k <= 0, init_value, init_value * jnp.power(decay_rate, p))
            bound = jnp.maximum if decay_rate < 1.0 else jnp.minimum
            return value if end_value is None else bound(value, end_value)
        return schedule

    @staticmethod
    def join_schedules(schedules, boundaries):
        def schedule(step):
            out = schedules[0](step)
            for boundary, fn in zip(boundaries, schedules[1:]):
                out = jnp.where(step < boundary, out, fn(step - boundary))
            return out
        return schedule

    @staticmethod
    def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps, end_value=0.0, exponent=1.0):
        alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
        return JaxOptax.join_schedules(
            [JaxOptax.linear_schedule(init_value, peak_value, warmup_steps),
             JaxOptax.cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)], [warmup_steps])

    @staticmethod
    def adamw_step(schedule, weight_decay, b1=0.9, b2=0.999, eps=1e-8):
        """One optax.adamw step (scale_by_adam, add_decayed_weights, scale_by_learning_rate, apply_updates)
        on (params, count, mu, nu)."""
        def step(p, g, count, mu, nu):
            mu = (1 - b1) * (g**1) + b1 * mu
            nu = (1 - b2) * (g**2) + b2 * nu
            count_inc = count + 1
            mu_hat = mu / (1 - b1**count_inc).astype(mu.dtype)
            nu_hat = nu / (1 - b2**count_inc).astype(nu.dtype)
            u = mu_hat / (jnp.sqrt(nu_hat + 0.0) + eps) + weight_decay * p
            u = jnp.array(-schedule(count), dtype=u.dtype) * u
            return (p + u).astype(p.dtype), count_inc, mu, nu
        return step


SCHEDULES = {
    "warmup_cosine": lambda m: m.warmup_cosine_decay_schedule(0.0, 3e-4, 100, 1000, end_value=3e-5),
    "warmup_cosine_exponent": lambda m: m.warmup_cosine_decay_schedule(1e-5, 3e-4, 37, 1000, 1e-6, exponent=1.5),
    "cosine": lambda m: m.cosine_decay_schedule(1e-3, 777, alpha=0.1),
    "linear": lambda m: m.linear_schedule(1e-3, 1e-5, 333, 10),
    "polynomial": lambda m: m.polynomial_schedule(1e-3, 1e-5, 3, 333, 10),
    "exponential": lambda m: m.exponential_decay(1e-3, 50, 0.9, 20, end_value=1e-4),
    "exponential_staircase": lambda m: m.exponential_decay(1e-3, 50, 0.9, 20, staircase=True),
}
COUNTS = np.arange(0, 1200, 7, dtype=np.int32)


def _optax_or_none():
    try:
        import optax
    except ImportError:
        return None
    return optax


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_on_xla_are_optaxs_bit_for_bit(name):
    """Every count through one compiled program, as a training loop runs it: the same operations
    in the same order, so the same float32 rates (before, the count entered a float32 cast of the
    user's own making, and rm.optim had no schedules)."""
    jitted = jax.jit(jax.vmap(SCHEDULES[name](JaxOptax)))
    want = np.asarray(jitted(jnp.asarray(COUNTS)))
    got = np.asarray(rm.jit(rm.vmap(SCHEDULES[name](rm.optim)), backend="xla")(rm.asarray(COUNTS)))
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    optax = _optax_or_none()
    if optax is not None:  # optax itself, where installed
        np.testing.assert_array_equal(got, np.asarray(jax.jit(jax.vmap(SCHEDULES[name](optax)))(jnp.asarray(COUNTS))))


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_on_numpy_are_optaxs_run_op_by_op(name):
    """On NumPy each op rounds once, as JAX's eager ops do; cos and pow are NumPy's, not XLA's,
    and differ from them in the last bit (measured: 1 ulp), or in a few bits for a fractional
    power (XLA's pow(x, 1.5) is exp(1.5 log x): measured 9 ulp from NumPy's)."""
    fn = SCHEDULES[name](rm.optim)
    want = np.array([np.asarray(SCHEDULES[name](JaxOptax)(jnp.int32(c))) for c in COUNTS[::3]])
    got = np.array([np.asarray(fn(rm.asarray(c))) for c in COUNTS[::3]])
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_max_ulp(got, want, maxulp=16 if name == "warmup_cosine_exponent" else 1)


def _warmup_cosine(m):
    return m.warmup_cosine_decay_schedule(0.0, 1e-2, 4, 12, end_value=1e-4)


def _adamw_steps(backend: str):
    """Twelve AdamW steps with a warm-up and cosine decay, remat's on `backend` beside the jitted
    reference's: yields (parameters, state) and the reference's (parameters, count, mu, nu)."""
    rng = np.random.default_rng(0)
    p = rng.normal(size=(64,)).astype(np.float32)
    grads = rng.normal(size=(12, 64)).astype(np.float32)
    ref = jax.jit(JaxOptax.adamw_step(_warmup_cosine(JaxOptax), 0.1))
    opt = rm.optim.adamw(_warmup_cosine(rm.optim), weight_decay=0.1)
    step = rm.jit(opt.update, backend=backend)
    want = (jnp.asarray(p), jnp.int32(0), jnp.zeros(64), jnp.zeros(64))
    got, state = rm.asarray(p), opt.init(rm.asarray(p))
    for g in grads:
        want = ref(want[0], jnp.asarray(g), *want[1:])
        got, state = step(rm.asarray(g), state, got)
        yield (got, state), want


def test_adamw_with_warmup_cosine_is_optaxs_bit_for_bit_on_xla():
    """One compiled step on XLA gives optax's float32 parameters and moments bit for bit (the
    moment sums are written in optax's operand order, which decides which product XLA fuses into
    a multiply-add)."""
    for (got, state), want in _adamw_steps("xla"):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want[0]))
        np.testing.assert_array_equal(np.asarray(state.mu), np.asarray(want[2]))
        np.testing.assert_array_equal(np.asarray(state.nu), np.asarray(want[3]))
    optax = _optax_or_none()
    if optax is not None:
        rng = np.random.default_rng(0)
        p, grads = rng.normal(size=(64,)).astype(np.float32), rng.normal(size=(12, 64)).astype(np.float32)
        o = optax.adamw(_warmup_cosine(optax), weight_decay=0.1)
        ostep = jax.jit(lambda g, s, p: (lambda u, s: (optax.apply_updates(p, u), s))(*o.update(g, s, p)))
        q, s = jnp.asarray(p), o.init(jnp.asarray(p))
        for g in grads:
            q, s = ostep(jnp.asarray(g), s, q)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(q))


def test_adamw_with_warmup_cosine_on_numpy_is_optaxs_to_a_few_ulp():
    """NumPy rounds a multiply and an add separately where XLA fuses them into one rounding, so
    the same steps agree to a few ulp of float32 after twelve steps (measured: 3), not bit for bit."""
    *_, ((got, _), want) = _adamw_steps("numpy")
    np.testing.assert_array_max_ulp(np.asarray(got), np.asarray(want[0]), maxulp=4)


def test_a_float64_schedule_rate_is_cast_to_float32_parameters_as_optax_casts_it():
    """optax casts the step size to the update's dtype; a float64 rate must not widen a float32
    step (it would round the product differently)."""
    p = rm.asarray(np.linspace(-1, 1, 5), "float32")
    g = rm.asarray(np.linspace(0.3, -0.7, 5), "float32")
    rate64 = rm.optim.adam(lambda count: rm.asarray(1e-2 / 3, "float64"))
    rate32 = rm.optim.adam(lambda count: rm.asarray(np.float32(1e-2 / 3)))
    got = rate64.update(g, rate64.init(p), p)[0]
    assert got.dtype == rm.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(rate32.update(g, rate32.init(p), p)[0]))


def test_schedule_arguments_are_checked():
    with pytest.raises(rm.ArgumentValueError, match=r"^cosine_decay_schedule: decay_steps must be positive, got 0"):
        rm.optim.cosine_decay_schedule(1.0, 0)
    with pytest.raises(rm.ArgumentTypeError, match=r"^linear_schedule|^polynomial_schedule: transition_steps"):
        rm.optim.linear_schedule(1.0, 0.0, 2.5)
    with pytest.raises(rm.ArgumentValueError, match=r"^join_schedules: 2 schedules need 1 boundaries, got 2"):
        rm.optim.join_schedules([rm.optim.constant_schedule(1.0)] * 2, [1, 2])
