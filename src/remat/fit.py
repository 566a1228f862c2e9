"""`remat fit`: the largest batch (or depth, or sequence) that trains under a hard memory cap, for remat
without checkpoints, with one per layer and with the planner (`memory_budget=` from the cap),
beside PyTorch (eager, with and without `torch.utils.checkpoint` per layer) and JAX (`jit`
unrolled, and `lax.scan` with `jax.checkpoint` per step).

A *try* trains one size for a few steps (`value_and_grad` and an SGD update of the parameters)
in a process of its own, under limits the OS enforces (`LIMIT`): a watchdog in this process
that kills the try (SIGKILL) as soon as its resident memory passes the cap, read every 2 ms, and
`RLIMIT_DATA`, set in the child before it starts, as a backstop the kernel holds even if the
watchdog lagged. cgroup v2's `memory.max` would be the natural limit, but a process may only use
it where it can write to the cgroup tree, which is seldom the case (not on the machine this was
written on). RLIMIT_DATA (or RLIMIT_AS) at the cap itself is not an honest limit: it counts
memory reserved, not used, and the runtimes reserve generously. Measured with 256 MiB resident or
less: JAX's `lax.scan` step could not start a thread under RLIMIT_DATA = 256 MiB (its data
segment was 277 MiB), remat on NumPy's data segment is 140 MiB for 57 MiB resident (OpenBLAS's
buffers), and JAX's address space is 1.5 GiB (so RLIMIT_AS would stop it before it starts). The
resident size is what a cgroup charges, and what the watchdog reads. A try that is killed,
raises or exits non-zero does not fit; the search goes on.

The cap counts the whole process, as a container's limit would: the interpreter and the
framework's runtime (its resident size before any array is made is reported), the inputs, the
compiled step and the step's memory. The search doubles the size until a try does not fit, then
bisects (`largest`).

The models and their inputs are `remat.bench`'s (`remat.bench.config`); each framework's loss is
the one `remat bench` measures (`remat.bench.impl_*`).

A try runs as `python -m remat.fit '<json>'` and prints one JSON line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import remat as rm
from remat.bench import MEMORY_JOB
from remat.bench.config import GPT, MLP, RNN, ScannedGPT, ScannedMLP, inputs, size_from_dict, size_to_dict
from remat.bench.rss import rss
from remat.budget import parse_budget
from remat.errors import ArgumentTypeError, ArgumentValueError

MiB = 2**20
LR = 1e-3  # SGD's step; the value is irrelevant to memory and time, but the update is real
# The planner's budget is this share of what the process has left: the rest is for what the
# budget does not count (the SGD update's new parameters, the interpreter's temporaries, the
# allocator's slack).
PLANNER_SHARE = 0.85
# The planner's strategy=: the chain DP, as these models are chains of layers. "auto" would also
# run the MILP, which loads SciPy (37 MiB resident, counted under the cap) and took 12 s to plan
# the 16-layer MLP against the chain's 0.24 s, for the same fit.
STRATEGY = "chain"
POLL = 0.002  # seconds between the watchdog's readings of a try's resident memory
FRAMEWORKS = ("remat-numpy", "remat-xla", "torch", "jax")
DEFAULT_FRAMEWORKS = ("remat-numpy", "torch", "jax")
# `remat fit --quick`: remat alone (PyTorch and JAX take 190-235 MiB resident before any array,
# and 3-5 s to start a try), under a cap small enough that few doublings reach it.
QUICK_FRAMEWORKS = ("remat-numpy",)
QUICK_CAP = "160MiB"
MODELS = ("mlp", "gpt", "rnn")
LIMIT = (f"a watchdog that kills a try whose resident memory (VmRSS) passes the cap, read every {POLL * 1000:g} "
         "ms, with RLIMIT_DATA = 2 × cap + 256 MiB as the kernel's backstop")


def backstop(cap: int) -> int:
    """RLIMIT_DATA of a try: room for what the runtimes reserve and never touch (see the module's
    docstring), yet a bound the kernel holds should the watchdog be late."""
    return 2 * cap + 256 * MiB

# What a search may vary, per model (the first by default), and what its time is given per.
VARIES = {"mlp": ("batch", "depth"), "gpt": ("batch", "seq"), "rnn": ("steps",)}
UNIT = {"batch": "sample", "depth": "layer", "seq": "position", "steps": "step"}

# The models at 1 of what the search varies. Quick sizes keep `remat fit --quick` under two
# minutes on two cores.
BASE = {
    ("mlp", "batch", False): MLP(depth=32, width=256, batch=1),
    ("mlp", "batch", True): MLP(depth=16, width=128, batch=1),
    # Deep and thin: an activation (2048, 128) float32 is 1 MiB, a layer's weights 64 KiB.
    ("mlp", "depth", False): MLP(depth=1, width=128, batch=2048),
    ("mlp", "depth", True): MLP(depth=1, width=64, batch=1024),
    # Attention scores dominate: (batch, 4, 128, 128) float32 is 256 KiB per sample and block.
    ("gpt", "batch", False): GPT(layers=8, d_model=64, heads=4, seq=128, batch=1, vocab=256),
    ("gpt", "batch", True): GPT(layers=4, d_model=32, heads=2, seq=64, batch=1, vocab=64),
    # Long sequences: the scores (4, 4, seq, seq) float32 of a block grow as seq².
    ("gpt", "seq", False): GPT(layers=8, d_model=64, heads=4, seq=1, batch=4, vocab=256),
    ("gpt", "seq", True): GPT(layers=4, d_model=32, heads=2, seq=1, batch=4, vocab=64),
    # One carry (32, 256) float32 is 32 KiB: the steps' carries dominate, not the inputs (2 KiB a step).
    ("rnn", "steps", False): RNN(steps=1, width=256, inputs=16, batch=32),
    ("rnn", "steps", True): RNN(steps=1, width=128, inputs=8, batch=16),
}


def varied(model: str, vary: str | None) -> str:
    """What the search over `model` varies: `vary`, else the model's default; checked."""
    if model not in MODELS:
        raise ArgumentValueError(f"fit: unknown model {model!r}; known: {', '.join(MODELS)}")
    if vary is None:
        return VARIES[model][0]
    if vary not in VARIES[model]:
        raise ArgumentValueError(f"fit: the {model} model cannot vary {vary!r}; it varies "
                                 + " or ".join(map(repr, VARIES[model])))
    return vary


@dataclass(frozen=True)
class Entry:
    """One row: a framework and a plan (`remat.bench`'s plan names, or "budget": the planner with
    `memory_budget=` from the cap); `scanned`: the model as one scan over its stacked layers."""

    framework: str
    plan: str
    label: str
    scanned: bool = False


def entries(model: str, frameworks: list[str]) -> list[Entry]:
    """The rows of `model` for `frameworks` (in that order)."""
    if model == "rnn":
        ck, ck_name, plan, plan_name = "step", "per step", "binomial", "binomial"
    else:
        ck, ck_name, plan, plan_name = "layer", "per layer", "budget", "planner (budget from the cap)"
    table = {
        "remat-numpy": [Entry("remat-numpy", "none", "remat · none"),
                        Entry("remat-numpy", ck, f"remat · {ck_name}"),
                        Entry("remat-numpy", plan, f"remat · {plan_name}")],
        "remat-xla": [Entry("remat-xla", "none", "remat XLA · none"),
                      Entry("remat-xla", plan, f"remat XLA · {plan_name}")],
        "torch": [Entry("torch", "none", "PyTorch · none"), Entry("torch", ck, f"PyTorch · checkpoint {ck_name}")],
        "jax": [Entry("jax", "none", "JAX · scan" if model == "rnn" else "JAX · jit unrolled"),
                Entry("jax", "step", "JAX · scan + checkpoint", scanned=True)],
    }
    return [e for f in frameworks for e in table[f]]


def size_at(model: str, n: int, quick: bool = False, scanned: bool = False, vary: str | None = None):
    """`model`'s size with what the search varies (`vary`: batch, depth, seq or steps) set to
    `n`; `scanned`: the same model as one scan over stacked layers (JAX's `lax.scan` row)."""
    vary = varied(model, vary)
    size = dataclasses.replace(BASE[model, vary, quick], **{vary: n})
    if scanned and isinstance(size, GPT):
        return ScannedGPT(**dataclasses.asdict(size))
    if scanned and isinstance(size, MLP):
        return ScannedMLP(**dataclasses.asdict(size))
    return size


# ---------------------------------------------------------------- the search


def largest(fits: Callable[[int], bool], start: int = 1, limit: int = 2**24,
            tolerance: float = 0.0) -> tuple[int, list[int]]:
    """`(n, tried)`: the largest `n` in [start, limit] with `fits(n)`, assuming that whatever fits
    at n fits below it (0 if `start` does not fit), and the sizes tried in order. Doubles from
    `start` until a size does not fit, then bisects until the gap is at most `tolerance × n`
    (0: exact), so about log2(n / start) + log2(1 / tolerance) tries.

    >>> largest(lambda n: n <= 37)
    (37, [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37])
    """
    tried: list[int] = []

    def ok(n: int) -> bool:
        tried.append(n)
        return fits(n)

    if start > limit or not ok(start):
        return 0, tried
    lo, hi = start, None
    while hi is None:
        n = min(2 * lo, limit)
        if n == lo:
            return lo, tried
        lo, hi = (n, None) if ok(n) else (lo, n)
    while hi - lo > max(1, math.floor(tolerance * lo)):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo, tried


# ---------------------------------------------------------------- one try, seen from outside


@dataclass
class Try:
    """What one try gave: `fits`; `why` it did not; its figures when it did (seconds per step,
    bytes of peak resident memory, of the runtime before the inputs, of the planner's budget)."""

    n: int
    fits: bool
    why: str = ""
    times: list[float] = dataclasses.field(default_factory=list)
    peak: int = 0
    runtime: int = 0
    budget: int | None = None
    loss: float | None = None
    watchdog_peak: int = 0

    @property
    def per_sample(self) -> float:
        return statistics.median(self.times) / self.n if self.times else math.nan


def _limit_child(cap: int) -> Callable[[], None]:
    def set_limit() -> None:  # runs in the child between fork and exec: nothing it allocates counts
        resource.setrlimit(resource.RLIMIT_DATA, (backstop(cap), backstop(cap)))

    return set_limit


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError):  # gone between two readings
        return 0


def run_child(args: list[str], cap: int, timeout: float, env: dict | None = None) -> tuple[int, str, str, int, bool]:
    """Run `python args...` under the cap: `(exit code, stdout, stderr, largest RSS seen, killed
    by the watchdog)`. The exit code is negative for a signal (-9: killed); a try past `timeout`
    seconds is killed too (and reported by the caller)."""
    env = {**os.environ, **(env or {})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = _popen([sys.executable, *args], out, err, env, cap)
        seen, killed, deadline = 0, False, time.monotonic() + timeout
        while True:
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = _rss_of(proc.pid)
            seen = max(seen, rss)
            if rss > cap or time.monotonic() > deadline:
                killed = killed or rss > cap
                os.kill(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                status = -signal.SIGKILL
                break
            time.sleep(POLL)
        code = status if status < 0 else os.waitstatus_to_exitcode(status)
        proc.returncode = code  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read(), seen, killed


def _popen(cmd, out, err, env, cap):
    return subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=_limit_child(cap))


def try_size(model: str, entry: Entry, n: int, cap: int, quick: bool = False, steps: int = 3,
             timeout: float = 300.0, vary: str | None = None) -> Try:
    """Train `model` at size `n` (of what `vary` names) as `entry` says, in a child process under
    `cap` bytes."""
    size = size_at(model, n, quick, entry.scanned, vary)
    job = {"framework": entry.framework, "plan": entry.plan, "size": size_to_dict(size), "cap": cap, "steps": steps}
    start = time.monotonic()
    code, out, err, seen, killed = run_child(["-m", "remat.fit", json.dumps(job)], cap, timeout, MEMORY_JOB)
    if killed:
        return Try(n, False, f"killed by the watchdog at {seen / MiB:.0f} MiB resident", watchdog_peak=seen)
    if code == -signal.SIGKILL and time.monotonic() - start > timeout:
        return Try(n, False, f"took over {timeout:g} s", watchdog_peak=seen)
    if code:
        return Try(n, False, _reason(code, err), watchdog_peak=seen)
    res = json.loads(out.strip().splitlines()[-1])
    if res["peak"] > cap:  # the process's own high-water mark: past the cap between two readings
        return Try(n, False, f"peaked at {res['peak'] / MiB:.1f} MiB, past the cap between the watchdog's readings",
                   watchdog_peak=seen)
    return Try(n, True, times=res["times"], peak=res["peak"], runtime=res["runtime"], budget=res.get("budget"),
               loss=res["loss"], watchdog_peak=seen)


def _reason(code: int, err: str) -> str:
    if "MemoryError" in err or "bad_alloc" in err or "Cannot allocate memory" in err or "out of memory" in err.lower():
        return "out of memory (RLIMIT_DATA)"
    if "is below the smallest peak this step can reach" in err:
        return "the planner found no plan within the budget"
    if code < 0:
        return f"died of signal {signal.Signals(-code).name}"
    last = [line for line in err.strip().splitlines() if line.strip()]
    return f"exit {code}: {last[-1][:200] if last else 'no message'}"


# ---------------------------------------------------------------- one try, seen from inside


def _vmhwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def child(job: dict) -> dict:
    """Build the step of `job` and train `job["steps"]` steps after one warm-up step."""
    framework, plan, cap = job["framework"], job["plan"], job["cap"]
    _import(framework)
    runtime = rss()
    size = size_from_dict(job["size"])
    step, budget = _build(framework, size, plan, cap)
    loss = step()  # the warm-up: the first run of a compiled step sets up its runtime
    times = []
    for _ in range(job["steps"]):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    return {"times": times, "peak": _vmhwm(), "runtime": runtime, "budget": budget, "loss": loss}


def _import(framework: str) -> None:
    """Load the framework before the runtime's size is read, so that it counts in it."""
    if framework in ("remat-xla", "jax"):
        import jax.numpy as jnp

        jnp.zeros(1).block_until_ready()
    if framework == "torch":
        import torch

        # On two busy cores, OpenMP's spinning threads made PyTorch's steps 10-100x slower (2.6 s
        # against 0.02 s with one thread, the machine's load at 8); the other runtimes' pools block.
        torch.set_num_threads(1)


def _build(framework: str, size, plan: str, cap: int) -> tuple[Callable[[], float], int | None]:
    params, data = inputs(size)
    if framework == "torch":
        return _torch_step(size, plan, params, data), None
    if framework == "jax":
        return _jax_step(size, plan, params, data), None
    return _remat_step(size, plan, params, data, framework.split("-")[1], cap)


def _nbytes(tree) -> int:
    return sum(int(getattr(x, "nbytes", 0)) for x in rm.tree.leaves(tree))


def _remat_step(size, plan: str, params, data, backend: str, cap: int):
    from remat.bench import impl_remat

    if backend == "xla":
        params, data = rm.tree.map(impl_remat._device, params), rm.tree.map(impl_remat._device, data)
    budget = None
    if plan == "budget":
        # The budget counts the step's inputs (already resident) and what it allocates: all that
        # is left under the cap but a margin (PLANNER_SHARE) for what it does not count.
        _warm_planner()
        # Traced once first: the graph's Python objects (more the deeper the model) are then part
        # of what the process holds when the budget is read, not a surprise on top of it.
        rm.make_graph(rm.value_and_grad(impl_remat.loss_fn(size, "none")))(params, data)
        budget = math.floor(PLANNER_SHARE * rm.memory.available(cap)) + _nbytes((params, data))
        grad = rm.value_and_grad(impl_remat.loss_fn(size, "none"), memory_budget=budget, strategy=STRATEGY)
    else:
        grad = impl_remat.step_function(size, plan)

    def train(p, d):
        loss, g = grad(p, d)
        return loss, rm.tree.map(lambda a, b: a - LR * b, p, g)

    compiled = rm.jit(train, backend=backend).lower(params, data).compile()
    state = [params]

    def step() -> float:
        loss, state[0] = compiled(state[0], data)
        if backend == "xla":
            import jax

            jax.block_until_ready([t._value for t in rm.tree.leaves(state[0])])
        return float(loss)

    return step, budget


def _warm_planner() -> None:
    """Plan a tiny step first, so that the planner's own code and solver (SciPy's MILP: 37 MiB
    resident once loaded) are part of what the process holds when the budget is taken from it
    (without this, the planned step's budget was 57 MiB too generous and it fitted less than
    the step without checkpoints)."""
    import numpy as np

    layer = lambda h: h + rm.tanh(h)  # noqa: E731
    chain = lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x)))))))  # noqa: E731
    grad = rm.value_and_grad(chain, memory_budget=0.8, strategy=STRATEGY)  # as the example of plan_step
    rm.jit(grad)(np.ones(4096, np.float32))


def _jax_step(size, plan: str, params, data):
    import jax

    from remat.bench import impl_jax

    fn = impl_jax.loss_fn(size, plan)

    def train(p, d):
        loss, g = jax.value_and_grad(fn)(p, d)
        return loss, jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g)

    params, data = jax.device_put((params, data))
    compiled = jax.jit(train, donate_argnums=0).lower(params, data).compile()
    state = [params]

    def step() -> float:
        loss, state[0] = compiled(state[0], data)
        jax.block_until_ready(state[0])
        return float(loss)

    return step


def _torch_step(size, plan: str, params, data):
    import torch

    from remat.bench import impl_torch

    params, data = impl_torch._tensors(params, True), impl_torch._tensors(data, False)
    leaves = impl_torch._leaves(params)
    fn = impl_torch.loss_fn(size, plan, params, data)

    def step() -> float:
        loss = fn()
        grads = torch.autograd.grad(loss, leaves)
        with torch.no_grad():  # SGD in place, as torch.optim.SGD does
            for p, g in zip(leaves, grads):
                p.add_(g, alpha=-LR)
        return float(loss.detach())

    return step


# ---------------------------------------------------------------- the run


@dataclass
class Row:
    """One entry's search: the largest size that fits, and every try."""

    entry: Entry
    n: int
    tries: list[Try]

    @property
    def best(self) -> Try | None:
        return next((t for t in self.tries if t.n == self.n and t.fits), None)

    @property
    def stopped_by(self) -> str:
        fails = [t for t in self.tries if not t.fits and t.n > self.n]
        return min(fails, key=lambda t: t.n).why if fails else ""


def search(model: str, entry: Entry, cap: int, quick: bool = False, log=None, vary: str | None = None,
           **kw) -> Row:
    """The largest size of `model` (of what `vary` names) that trains under `cap` as `entry` says."""
    vary = varied(model, vary)
    tries: dict[int, Try] = {}

    def fits(n: int) -> bool:
        tries[n] = t = try_size(model, entry, n, cap, quick, vary=vary, **kw)
        if log:
            log(f"{entry.label}: {vary} {n}: " + (f"fits, peak {t.peak / MiB:.0f} MiB" if t.fits else t.why))
        return t.fits

    n, tried = largest(fits, start=START[model, vary, quick], tolerance=TOLERANCE[quick])
    return Row(entry, n, [tries[k] for k in tried])


# Where the doubling starts: about what the step without checkpoints fits under the default cap,
# so that few tries are spent far below the answer.
START = {("mlp", "batch", False): 256, ("mlp", "batch", True): 1024, ("mlp", "depth", False): 64,
         ("mlp", "depth", True): 64, ("gpt", "batch", False): 4, ("gpt", "batch", True): 16,
         ("gpt", "seq", False): 64, ("gpt", "seq", True): 64, ("rnn", "steps", False): 256,
         ("rnn", "steps", True): 256}
TOLERANCE = {False: 0.1, True: 0.25}  # the search stops within this share of the size


def parse_cap(cap) -> int:
    """`cap` ("512MiB", an int of bytes) in bytes."""
    parsed = parse_budget(cap, "fit")
    if parsed.bytes is None:
        raise ArgumentValueError(f"fit: cap={cap!r} is a fraction; pass an amount of memory, e.g. '512MiB'")
    return parsed.bytes


def missing(framework: str) -> str | None:
    """Why `framework` cannot run here (None: it can)."""
    need = {"torch": "torch", "jax": "jax", "remat-xla": "jax"}.get(framework)
    return f"{need} is not installed" if need and importlib.util.find_spec(need) is None else None


def run(cap="512MiB", model: str = "mlp", frameworks=None, quick: bool = False, out: str | None = None,
        plot: str | None = None, reference: bool = True, vary: str | None = None) -> tuple[str, list[Row]]:
    """Search every entry of `model` under `cap` for the largest `vary` (batch, depth, seq or
    steps: `VARIES`), print the markdown table (and write it to `out`, the picture to `plot`);
    returns the table and the rows. `reference`: also time the step without checkpoints at the
    planner's size with the cap raised (the "uncapped" step)."""
    cap_bytes = parse_cap(cap)
    vary = varied(model, vary)
    if isinstance(frameworks, str):
        raise ArgumentTypeError(f"fit: frameworks must be a list of names, got {frameworks!r}; use [{frameworks!r}]")
    frameworks = list(frameworks or DEFAULT_FRAMEWORKS)
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad:
        raise ArgumentValueError(f"fit: unknown framework {bad[0]!r}; known: {', '.join(FRAMEWORKS)}")
    skipped = {f: missing(f) for f in frameworks if missing(f)}
    start = time.perf_counter()
    log = lambda msg: print(f"  [{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)  # noqa: E731
    rows = [search(model, e, cap_bytes, quick, log, vary, timeout=60.0 if quick else 600.0)
            for e in entries(model, [f for f in frameworks if f not in skipped])]
    ref = _reference(model, rows, quick, log, vary) if reference else None
    text = report(model, cap_bytes, quick, rows, skipped, ref, vary)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    if plot:
        log(f"picture written to {draw(model, cap_bytes, quick, rows, plot, vary)}")
    log("done")
    return text, rows


def _reference(model: str, rows: list[Row], quick: bool, log, vary: str) -> Try | None:
    """The step without checkpoints at the size the planner (else the best remat row) reached,
    under a cap raised to what the machine has free: the time per sample the planner's is
    compared with."""
    remat_rows = [r for r in rows if r.entry.framework.startswith("remat") and r.best]
    planned = [r for r in remat_rows if r.entry.plan in ("budget", "binomial")] or remat_rows
    if not planned:
        return None
    row = max(planned, key=lambda r: r.n)
    roomy = max(parse_cap("1GiB"), rm.memory.available() // 2)  # still a limit: never a try without one
    t = try_size(model, Entry(row.entry.framework, "none", "uncapped"), row.n, roomy, quick,
                 timeout=60.0 if quick else 600.0, vary=vary)
    log(f"uncapped, no checkpoint, {vary} {row.n} (limit {roomy / MiB:.0f} MiB): "
        + (f"peak {t.peak / MiB:.0f} MiB" if t.fits else t.why))
    t.label = row.entry.label  # type: ignore[attr-defined]
    return t if t.fits else None


# ---------------------------------------------------------------- printing and drawing


def describe(model: str, quick: bool, vary: str | None = None) -> str:
    vary = varied(model, vary)
    text = BASE[model, vary, quick].describe().split(" (")[0]  # the parenthesis gives a size at N = 1
    shown = {"depth": "1 layers", "seq": "sequence 1", "steps": "1 steps"}.get(vary, f"{vary} 1")
    return text.replace(shown, shown.replace("1", "N", 1))


def _flags(model: str, quick: bool, vary: str) -> str:
    return f"{' --quick' if quick else ''} --model {model}" + ("" if vary == VARIES[model][0] else f" --vary {vary}")


def report(model: str, cap: int, quick: bool, rows: list[Row], skipped: dict, ref: Try | None,
           vary: str | None = None) -> str:
    """The markdown table of `rows`, with the limit and the model above it."""
    var = varied(model, vary)
    unit = UNIT[var]
    base = next((r for r in rows if r.entry.framework == "remat-numpy" and r.entry.plan == "none"), None)
    head = [f"remat fit{_flags(model, quick, var)} --cap {cap / MiB:g}MiB: the largest {var} N "
            f"that trains (value_and_grad and an SGD update) under the cap, each try a process of its own. "
            f"Model: {describe(model, quick, var)}. Limit: {LIMIT}. The cap counts the whole process: "
            "'runtime' is its resident size with the framework loaded, before any array. Time: the median "
            f"of the timed steps at the largest N, per {unit}."]
    head += [f"Not run: {f} ({why})." for f, why in skipped.items()]
    cols = ["framework · plan", f"largest {var}", "× remat none", f"ms per {unit}",
            "peak MiB", "runtime MiB", "tries", "the next size"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        best = r.best
        times = f"{best.per_sample * 1e3:.3f}" if best else "n/a"
        ratio = f"{r.n / base.n:.2f}x" if base and base.n else "n/a"
        lines.append("| " + " | ".join([r.entry.label, str(r.n), ratio, times,
                                        f"{best.peak / MiB:.0f}" if best else "n/a",
                                        f"{best.runtime / MiB:.0f}" if best else "n/a",
                                        str(len(r.tries)), r.stopped_by or "not reached"]) + " |")
    notes = []
    planner = next((r for r in rows if r.entry.plan in ("budget", "binomial") and r.best), None)
    if ref and planner:
        ratio = planner.best.per_sample / ref.per_sample
        notes.append(f"Time: {planner.entry.label} at {var} {planner.n} takes {ratio:.2f}x the time per "
                     f"{unit} of the step without checkpoints at the same {var} "
                     f"with the cap raised (peak {ref.peak / MiB:.0f} MiB, {ref.per_sample * 1e3:.3f} ms).")
    if planner and planner.best.budget:
        notes.append(f"The planner's memory_budget at the largest {var}: {planner.best.budget / MiB:.0f} MiB "
                     f"(rm.memory.available(cap) × {PLANNER_SHARE} + the inputs).")
    return "\n\n".join([" ".join(head), "\n".join(lines), " ".join(notes)]).rstrip()


def draw(model: str, cap: int, quick: bool, rows: list[Row], path, vary: str | None = None) -> Path:
    """A picture: the largest size per framework and plan, and its time per sample (or layer,
    position, step)."""
    vary = varied(model, vary)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.best] or rows
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.5 * len(rows) + 1.6), sharey=True)
    labels = [r.entry.label for r in rows]
    colours = [_COLOURS.get(r.entry.framework, "grey") for r in rows]
    left.barh(labels, [r.n for r in rows], color=colours)
    for i, r in enumerate(rows):
        left.text(r.n, i, f" {r.n}", va="center", fontsize=8)
    left.set_xlabel(f"largest {vary} that trains under {cap / MiB:g} MiB")
    left.invert_yaxis()
    right.barh(labels, [r.best.per_sample * 1e3 if r.best else 0 for r in rows], color=colours)
    right.set_xlabel(f"ms per {UNIT[vary]} at that size")
    fig.suptitle(f"remat fit{_flags(model, quick, vary)}: {describe(model, quick, vary)}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_COLOURS = {"remat-numpy": "tab:blue", "remat-xla": "tab:cyan", "torch": "tab:orange", "jax": "tab:green"}


def main(argv: list[str]) -> int:
    """A try, in its own process: print its figures as one JSON line."""
    print(json.dumps(child(json.loads(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
