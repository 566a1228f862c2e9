"""The staged XLA runner at scale: work that grows linearly with depth (bounded stages, each
distinct one compiled once, running memory totals) and arguments handed to XLA without a
Python-side copy per array. Wall-clock figures are in benchmarks/xla_first_call.py and
benchmarks/call_overhead.py; these tests pin the structure behind them."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import remat as rm  # noqa: E402
from remat.backends import xla  # noqa: E402
from remat.graph import Graph, Var  # noqa: E402
from remat.models import residual_mlp_loss, residual_mlp_params  # noqa: E402


def step_graph(depth: int, plan="layer", width=8, batch=4):
    params = residual_mlp_params(depth, width)
    x = rm.asarray(np.ones((batch, width)), "float32")
    graph = rm.make_graph(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, plan)))(params, x)
    return graph, params, x


def stage_size(stage: xla.Stage) -> int:
    return sum(1 for _ in stage.graph.walk())


# ---------------------------------------------------------------- linear in depth


def test_no_stage_grows_with_depth(monkeypatch):
    """XLA's compile time grows faster than a program's length: the forward pass of a deep
    model must not become one executable (3,000 layers took 24 s to compile as one)."""
    monkeypatch.setattr(xla, "STAGE_NODES", 40)  # chunks of 8 blocks of 5 nodes
    shallow = xla.plan(step_graph(16)[0], staged=True)
    deep = xla.plan(step_graph(64)[0], staged=True)
    assert len(deep) == 64 + 8 and len(shallow) == 16 + 2
    assert max(map(stage_size, deep)) == max(map(stage_size, shallow)) <= 40 + 5 + 4  # a chunk, a block, the loss
    assert len({s.key for s in deep}) == len({s.key for s in shallow}) <= 4


def test_a_shallow_forward_pass_stays_one_stage():
    """An executable per block would cost a dispatch each: 20% of a small model's step."""
    stages = xla.plan(step_graph(24)[0], staged=True)
    assert len(stages) == 24 + 1
    assert sum(n.op == "checkpoint" for n in stages[0].graph.nodes) == 24


def test_each_distinct_stage_is_compiled_once(monkeypatch):
    monkeypatch.setattr(xla, "STAGE_NODES", 20)
    compiles = []
    real = jax.stages.Lowered.compile
    monkeypatch.setattr(jax.stages.Lowered, "compile", lambda self, *a, **k: compiles.append(1) or real(self, *a, **k))
    runner = xla.compile(step_graph(16)[0], staged=True)
    assert len(runner.program.stages) == 16 + 4
    assert len(compiles) == runner.executables <= 4


class CountingVar(Var):
    """A Var that counts how often its shape is read: the unit of the memory bookkeeping's work."""

    reads = 0

    @property
    def shape(self):
        CountingVar.reads += 1
        return self._shape

    @shape.setter
    def shape(self, value):
        self._shape = value


def chain(n: int) -> list[xla.Stage]:
    """n stages, each making one value that stays alive to the end (as a forward pass's saved
    activations do), then one stage reading all of them."""
    made = [CountingVar((4, 8), np.float32) for _ in range(n)]
    stages = [xla.Stage(Graph([made[i - 1]] if i else [], [made[i]], []), [], (), ()) for i in range(n)]
    stages.append(xla.Stage(Graph(made, [CountingVar((), np.float32)], []), made, (), ()))
    return stages


def test_stage_memory_bookkeeping_is_linear_in_the_number_of_stages():
    CountingVar.reads = 0
    memory = xla.StageMemory(chain(400), [0] * 401, set())
    assert memory.live[:3] == [128, 256, 384] and memory.live[-1] == 4 and max(memory.live) == 400 * 128
    assert CountingVar.reads <= 3 * 401  # re-summing every live value at every stage read 80,000


def recount(stages: list[xla.Stage], temps: list[int], external: set) -> tuple[list[int], list[int]]:
    """What StageMemory reports, counted the slow, obvious way: sum every live value after each stage."""
    live, high, alive, held = [], [], set(), 0
    for stage, temp in zip(stages, temps):
        outs = sum(v.nbytes for v in stage.graph.outputs)
        donated = sum(stage.graph.inputs[k].nbytes for k in stage.donate)
        high.append(held + temp + outs - donated)
        alive = (alive - set(stage.dead)) | set(stage.graph.outputs)
        held = sum(v.nbytes for v in alive if v not in external)
        live.append(held)
    return live, high


@pytest.mark.parametrize("plan", ["layer", "sqrt", "dots", "none"])
def test_stage_memory_equals_a_recount(plan):
    graph = step_graph(9, plan, width=6, batch=5)[0]
    runner = xla.compile(graph, staged=True)
    memory = runner._memory
    temps = [xla._temp_bytes(executable) for _, executable in runner._steps]
    assert (memory.live, memory.high) == recount(runner.program.stages, temps, set(graph.inputs) | set(graph.constants))
    assert memory.peak >= max(memory.live) > 0


# ---------------------------------------------------------------- arguments


@pytest.fixture
def device_puts(monkeypatch):
    calls: list[int] = []
    real = jax.device_put

    def counting(x, *args, **kwargs):
        calls.append(len(x) if isinstance(x, list) else 1)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(jax, "device_put", counting)
    return calls


def test_numpy_arguments_go_to_the_executable_without_device_put(device_puts):
    """A Python-side `jax.device_put` per array cost ~28 us a leaf (512 leaves: 15 ms, against
    1.2 ms for `jax.jit`); the executable takes NumPy arrays itself, as `jax.jit` passes them."""
    leaves = {f"p{i}": np.full((3,), i, np.float32) for i in range(64)}
    f = rm.jit(lambda t: sum(rm.sum(v) for v in t.values()), backend="xla")
    assert float(f(leaves)) == 3 * sum(range(64))
    device_puts.clear()
    assert float(f(leaves)) == 3 * sum(range(64))
    assert device_puts == []


def test_arguments_several_stages_read_go_to_the_device_once_together(device_puts):
    graph, params, x = step_graph(5)
    args = [np.asarray(a) for a in rm.tree.leaves((params, x))]
    runner = xla.compile(graph, staged=True)
    device_puts.clear()
    loss, *grads = runner(*args)
    assert device_puts == [len(args)]  # every weight is read forward and backward, x too
    expected = rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, "layer")))(params, x)
    np.testing.assert_allclose(np.asarray(loss), np.asarray(expected[0]), rtol=1e-6)


def aligned(values) -> np.ndarray:
    """A float32 array at a 64-byte boundary: one XLA:CPU's device_put would share, not copy."""
    buf = np.empty(len(values) + 16, np.float32)
    start = (-buf.ctypes.data % 64) // 4
    a = buf[start : start + len(values)]
    a[:] = values
    return a


@pytest.mark.parametrize("staged", [True, False], ids=["staged", "fused"])
def test_an_argument_returned_as_it_is_does_not_share_the_callers_memory(staged):
    x, y = aligned(range(1024)), aligned(range(1024))
    out, also, doubled = rm.jit(lambda x, y: (x, y, y * 2), backend="xla", staged=staged)(x, y)
    assert all(isinstance(t._value, jax.Array) for t in (out, also, doubled))
    x[:] = -1  # the caller's arrays change; the results do not
    y[:] = -1
    np.testing.assert_array_equal(np.asarray(out), np.arange(1024))
    np.testing.assert_array_equal(np.asarray(also), np.arange(1024))
    np.testing.assert_array_equal(np.asarray(doubled), 2 * np.arange(1024))


def test_arguments_of_another_dtype_are_converted():
    graph = rm.make_graph(lambda x: x * 2)(rm.ones((3,)))
    (out,) = xla.compile(graph)(np.arange(3, dtype=np.float64))
    assert out.dtype == np.float32 and np.asarray(out).tolist() == [0, 2, 4]


def test_a_warm_call_makes_no_tensor_per_argument(monkeypatch):
    """The signature of NumPy and JAX arguments is read off the arrays: a Tensor per leaf on
    every call cost more than XLA's own call."""
    leaves = [np.full((2,), i, np.float32) for i in range(32)] + [jax.numpy.ones((2,), np.int32)]
    f = rm.jit(lambda xs: rm.sum(rm.stack(xs[:-1])) + rm.sum(xs[-1]).astype("float32"), backend="xla")
    assert float(f(leaves)) == 2 * sum(range(32)) + 2
    made = []
    real = rm.Tensor._concrete.__func__
    monkeypatch.setattr(rm.Tensor, "_concrete", classmethod(lambda cls, *a: made.append(1) or real(cls, *a)))
    out = f(leaves)
    assert len(made) <= 2  # the result (and its relabelled copy), not one per argument
    assert float(out) == 2 * sum(range(32)) + 2 and f.trace_count == 1
