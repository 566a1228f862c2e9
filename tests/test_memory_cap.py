"""A hard memory cap with no plan (remat/backends/capped.py): the evaluator evicts what it can
recompute and recomputes it when read, never counts more than the cap, and computes bit for
bit what the uncapped run computes."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import fuzz_programs as fp
import remat as rm
from remat.backends import numpy as evaluator
from remat.backends.capped import Cap, CappedMemory, _laid_out
from remat.planner.cost import WEIGHTS, node_cost

KIB = 1024


def _leaves(out) -> list[np.ndarray]:
    return [np.asarray(t) for t in rm.tree.leaves(out)]


def _mlp_loss(ws, x):
    h = x
    for w in ws:
        h = h + rm.tanh(h @ w)
    return rm.sum(h * h)


@pytest.fixture(scope="module")
def mlp():
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((32, 32)).astype(np.float32) * 0.2 for _ in range(8)]
    x = rng.standard_normal((128, 32)).astype(np.float32)
    step = rm.value_and_grad(_mlp_loss)
    plain = rm.jit(step).lower(ws, x).compile()
    return step, ws, x, _leaves(plain(ws, x)), plain.last_memory.peak


# ---------------------------------------------------------------- which value goes, and when it comes back


def _three(x):
    a = rm.sin(x)  # read again last
    b = rm.cos(x)  # read again next
    c = rm.exp(x)  # no room for it beside a and b
    d = b * c
    return rm.sum(d) + rm.sum(a)


def test_the_value_read_furthest_ahead_is_evicted_and_recomputed_where_it_is_read():
    x = rm.ones((1024,))
    assert rm.memory.profile(_three, x, grad=False).peak_bytes == 12 * KIB  # a, b and c at once
    p = rm.memory.profile(_three, x, grad=False, memory_cap=9 * KIB)  # two of them, and some headroom
    events = [(e.label.split()[0], e.evicted, e.recomputed) for e in p.timeline]
    at = "(test_memory_cap.py:"
    assert [(op, [v.split()[0] for v in ev], [v.split()[0] for v in rc]) for op, ev, rc in events] == [
        ("sin", [], []), ("cos", [], []), ("exp", ["sin"], []), ("multiply", [], []), ("sum", [], []),
        ("sum", [], ["sin"]), ("add", [], [])]
    assert all(at in v for _, ev, rc in events for v in ev + rc)
    assert p.peak_bytes <= 9 * KIB and (p.evictions, p.recomputations) == (1, 1)
    assert "cap 9.0 KiB: 1 evictions, 1 recomputations" in str(p)


def _costly_and_cheap(x, w):
    costly = rm.tanh(x @ w)  # a matrix product: dear to make again
    cheap = x + 1.0  # one element each: cheap
    room = rm.exp(x)  # no room for it beside both
    return rm.sum(room) + rm.sum(costly * cheap)  # both read again at the same node


def test_of_two_values_read_at_the_same_node_the_cheaper_one_is_evicted():
    x, w = rm.ones((64, 64)), rm.ones((64, 64)) / 64.0
    p = rm.memory.profile(_costly_and_cheap, x, w, grad=False, memory_cap=2 * 16 * KIB + 2 * KIB)
    evicted = [v.split()[0] for e in p.timeline for v in e.evicted]
    recomputed = [v.split()[0] for e in p.timeline for v in e.recomputed]
    assert evicted == ["add"] and recomputed == ["add"]


def _chain(x):
    h1 = rm.sin(x)
    h2 = rm.cos(h1)
    h3 = rm.exp(h2 * 0.5)  # h1, h2 and h2 * 0.5 are let go here: their last reader has run
    big = rm.ones((4096,)) * rm.sum(h3)  # no room for h3 beside it
    return rm.sum(big) + rm.sum(h3)


def test_a_value_whose_operands_were_let_go_is_recomputed_through_them_in_order():
    x = rm.ones((1024,))
    cap = 17 * KIB
    p = rm.memory.profile(_chain, x, grad=False, memory_cap=cap)
    assert p.peak_bytes <= cap
    assert [[v.split()[0] for v in e.evicted] for e in p.timeline if e.evicted] == [["exp"]]
    # read again by the last sum: h3 from x, through h1, h2 and h2 * 0.5, in the order they run
    assert [[v.split()[0] for v in e.recomputed] for e in p.timeline if e.recomputed] == [
        ["sin", "cos", "multiply", "exp"]]
    np.testing.assert_array_equal(np.asarray(rm.jit(_chain, memory_cap=cap)(x)), np.asarray(rm.jit(_chain)(x)))


# ---------------------------------------------------------------- gradients, bit for bit, under the cap


@pytest.mark.parametrize("fraction", [0.7, 0.5, 0.4])
def test_a_capped_gradient_is_bit_identical_and_never_counts_more_than_the_cap(mlp, fraction):
    step, ws, x, reference, peak = mlp
    cap = int(peak * fraction)
    compiled = rm.jit(step, memory_cap=cap).lower(ws, x).compile()
    got = _leaves(compiled(ws, x))
    memory = compiled.last_memory
    assert isinstance(memory, CappedMemory) and memory.cap == cap
    assert memory.peak <= cap
    assert memory.evictions > 0 and memory.recomputations > 0 and memory.recompute_cost > 0
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)


def test_the_memory_an_outside_measure_sees_falls_with_the_cap(mlp):
    """tracemalloc counts every NumPy buffer, the temporaries inside an op too: the evaluator's
    count is not its own only."""
    step, ws, x, _, peak = mlp

    def traced(**kw):
        compiled = rm.jit(step, **kw).lower(ws, x).compile()
        compiled(ws, x)
        tracemalloc.start()
        compiled(ws, x)
        high = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return high

    plain, capped = traced(), traced(memory_cap=int(peak * 0.35))
    assert capped < 0.6 * plain
    assert capped <= int(peak * 0.35) + 4 * 128 * 32 * 4  # the cap, and a few of NumPy's temporaries


def test_random_values_are_made_again_bit_for_bit():
    def loss(w, x, key):
        h = x
        for i in range(6):
            keep = rm.random.uniform(rm.random.fold_in(key, i), h.shape) > 0.2  # dropout
            h = h + rm.where(keep, rm.tanh(h @ w), 0.0) / 0.8
        return rm.sum(h * h)

    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((32, 32)).astype(np.float32) * 0.3, rng.standard_normal((64, 32)).astype(np.float32)
    key = rm.random.key(7)
    step = rm.grad(loss)
    plain = rm.jit(step).lower(w, x, key).compile()
    want = np.asarray(plain(w, x, key))
    capped = rm.jit(step, memory_cap=int(plain.last_memory.peak * 0.6)).lower(w, x, key).compile()
    np.testing.assert_array_equal(np.asarray(capped(w, x, key)), want)
    assert capped.last_memory.recomputations > 0


def test_checkpoints_loops_and_second_order_run_under_the_cap():
    def layer(h, w):
        return h + rm.tanh(h @ w)

    def loss(w, x):
        h = rm.checkpoint(layer, x, w)
        for _ in range(4):
            h = layer(h, w)
        h, _ = rm.scan(lambda c, _: (layer(c, w), None), h, length=2)
        return rm.sum(h * h)

    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((32, 32)).astype(np.float32) * 0.2, rng.standard_normal((64, 32)).astype(np.float32)
    for fn in (rm.grad(loss), rm.grad(lambda w, x: rm.sum(rm.grad(loss)(w, x) ** 2))):
        want, plain = _run(fn, (w, x))
        got, capped, cap = _run_under(fn, (w, x), plain.peak * 0.6)
        assert capped.peak <= cap < plain.peak and capped.evictions > 0 and capped.recomputations > 0
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- too small a cap


def test_a_cap_below_one_nodes_need_says_the_least_cap_for_that_point():
    x = rm.ones((1024,))
    f = lambda x: rm.sum(rm.sin(x) * rm.cos(x))  # noqa: E731  # sin, cos and their product: 8 KiB at once
    with pytest.raises(rm.CapTooSmall, match=r"memory_cap=5000 bytes is too small for (cos|multiply) \(") as e:
        rm.jit(f, memory_cap=5000)(x)
    assert e.value.smallest_cap == 8 * KIB
    assert "needs memory_cap >= 8192 bytes" in str(e.value)
    assert isinstance(e.value, rm.ArgumentValueError)
    np.testing.assert_array_equal(np.asarray(rm.jit(f, memory_cap=e.value.smallest_cap)(x)), np.asarray(f(x)))


# ---------------------------------------------------------------- the scope, and what is refused


def test_the_scope_caps_eager_gradients_and_jitted_numpy_functions(mlp):
    step, ws, x, reference, peak = mlp
    cap = int(peak * 0.4)
    jitted = rm.jit(step).lower(ws, x).compile()
    with rm.memory.cap(cap):
        eager = _leaves(step(ws, x))
        jitted(ws, x)
    assert jitted.last_memory.peak <= cap and jitted.last_memory.evictions > 0
    for a, b in zip(eager, reference):
        np.testing.assert_array_equal(a, b)
    jitted(ws, x)  # outside the scope: no cap
    assert not isinstance(jitted.last_memory, CappedMemory) and jitted.last_memory.peak == peak


def test_nested_scopes_and_a_jitted_cap_keep_the_smallest(mlp):
    step, ws, x, _, peak = mlp
    small, large = int(peak * 0.4), int(peak * 0.8)
    own = rm.jit(step, memory_cap=large).lower(ws, x).compile()
    with rm.memory.cap(small), rm.memory.cap(large):
        own(ws, x)
    assert own.last_memory.cap == small
    with rm.memory.cap(peak * 10):
        own(ws, x)
    assert own.last_memory.cap == large


def test_a_cap_is_the_numpy_evaluators():
    with pytest.raises(rm.ArgumentValueError, match="memory_cap given with backend='xla'"):
        rm.jit(lambda x: x, backend="xla", memory_cap="1MiB")
    with pytest.raises(rm.ArgumentValueError, match="memory_cap given with backend='xla'"):
        rm.memory.profile(lambda x: rm.sum(x), rm.ones((4,)), backend="xla", memory_cap="1MiB")
    f = rm.jit(lambda x: x * 2.0, backend="xla")
    with rm.memory.cap("1MiB"), pytest.raises(rm.ArgumentValueError, match="XLA program called inside"):
        f(rm.ones((4,)))


@pytest.mark.parametrize("value, error, message", [
    (0.5, rm.ArgumentValueError, "is a fraction; a cap is bytes"),
    ("50%", rm.ArgumentValueError, "is a fraction; a cap is bytes"),
    (True, rm.ArgumentTypeError, "has type bool; pass an int of bytes or a string"),
    ([1], rm.ArgumentTypeError, "has type list"),
    (0, rm.ArgumentValueError, "memory_cap=0 is not a positive number of bytes"),
    ("12 apples", rm.ArgumentValueError, "is not an amount of memory"),
])
def test_a_cap_is_an_amount_of_bytes(value, error, message):
    with pytest.raises(error, match=message):
        rm.jit(lambda x: x, memory_cap=value)
    with pytest.raises(error, match="memory.cap: memory_cap="):
        with rm.memory.cap(value):
            pass


def test_a_scope_needs_a_cap():
    with pytest.raises(rm.ArgumentTypeError, match="memory.cap: memory_cap=None caps nothing"):
        with rm.memory.cap(None):
            pass


def test_without_a_cap_the_plain_evaluator_runs():
    compiled = rm.jit(lambda x: rm.sin(x) * 2.0).lower(rm.ones((8,))).compile()
    compiled(rm.ones((8,)))
    assert type(compiled.last_memory) is evaluator.Memory


def test_the_profile_picture_marks_the_cap_and_the_recomputations(tmp_path):
    p = rm.memory.profile(_three, rm.ones((1024,)), grad=False, memory_cap=9 * KIB)
    fig = rm.memory._figure({"capped": p}, None)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "the memory cap" in labels
    assert "nodes whose operands were recomputed (1 nodes run again)" in labels


# ---------------------------------------------------------------- random programs under random caps


def _run(fn, args, cap=None):
    compiled = rm.jit(fn, memory_cap=cap).lower(*args).compile()
    return _leaves(compiled(*args)), compiled.last_memory


def _run_under(fn, args, cap):
    """`fn(*args)` under `cap`, or under the cap the error names when `cap` is too small for
    some point of the program (a larger cap may meet a larger need further on: a loop keeps
    more of its buffers at once)."""
    cap = max(int(cap), 1)
    for _ in range(24):
        try:
            return (*_run(fn, args, cap), cap)
        except rm.CapTooSmall as e:
            assert e.smallest_cap > cap
            cap = e.smallest_cap
    pytest.fail(f"no cap found below {cap} bytes")


# A few programs here, and 79: a value written into a dying operand's transposed buffer, made
# again in a buffer of its own, summed one ulp apart until recomputations kept layouts
# (`capped._laid_out`). A longer campaign in the claims tier (`make check`); seed 3 is left to it:
# its loops need several tries to find a cap (7 s).
HERE = {*range(12), 79} - {3}
CAMPAIGN = [s if s in HERE else pytest.param(s, marks=pytest.mark.claims) for s in range(112)]


@pytest.mark.filterwarnings("ignore::remat.policies.UnusedNameWarning")  # a generated policy may name nothing
@pytest.mark.parametrize("seed", CAMPAIGN)
def test_random_programs_under_random_caps_compute_what_they_compute_uncapped(seed):
    program = fp.generate(seed)
    _, everything = fp._transforms(program, "remat", rm)
    args = [rm.asarray(x) for x in program.inputs]
    want, memory = _run(everything, args)
    for fraction in np.random.default_rng(seed).uniform(0.2, 0.9, size=2):
        got, capped, cap = _run_under(everything, args, memory.peak * fraction)
        assert capped.peak <= cap
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_a_recomputed_buffer_takes_the_layout_of_the_first_computation():
    transposed = np.empty((3, 1, 4)).transpose(2, 1, 0)  # the layout a donated buffer may have
    again = np.arange(12.0).reshape(4, 1, 3).copy()  # made again, in C order
    laid = _laid_out(again, transposed.strides)
    assert (laid.strides[0], laid.strides[2]) == (8, 32) and np.array_equal(laid, again)  # axis 1: one element
    assert _laid_out(again, again.strides) is again  # the same layout: no copy
    assert _laid_out(again, (24, 999, 8)) is again  # an axis of one element: its stride is no layout
    assert _laid_out(again, None) is again  # never let go: nothing to keep
    view = again[:, :, ::2]
    assert _laid_out(view, (16, 16, 8)) is view  # a view: its base's layout decides


def test_a_cap_is_given_to_the_backend_as_bytes_and_the_planners_numpy_costs():
    cap = rm.jit(lambda x: x, memory_cap="2KiB").memory_cap
    assert isinstance(cap, Cap) and cap.bytes == 2048
    g = rm.make_graph(lambda a, b: rm.tanh(a @ b))(rm.ones((256, 256)), rm.ones((256, 256)))
    costs = [cap.cost(n) for n in g.nodes]
    assert costs == [node_cost(n, WEIGHTS["numpy"]) for n in g.nodes]
    assert costs[0] > costs[1] > 0  # the product dearer than the tanh


@pytest.mark.claims
def test_the_benchmark_runs_each_model_under_its_cap_bit_for_bit(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_cap.py"
    out = tmp_path / "cap.md"
    done = subprocess.run([sys.executable, str(script), "--quick", "--rounds", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    assert sum(r.startswith("| memory_cap |") for r in rows) == 2
    assert rows and all(r.endswith("| bit-identical |") for r in rows)
