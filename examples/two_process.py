"""Two processes on this machine, joined by `jax.distributed`, run one data-parallel training step
of the GPT-style model (checkpointed per block) and agree with one process.

    python examples/two_process.py [--plan layer] [--timeout 240]

The launcher (this script without `--worker`) picks a free port, starts two workers and, while
they run, computes the same step in a single process on one device. Each worker joins the other
through a coordinator at 127.0.0.1:<port> (`jax.distributed.initialize`, process 0 hosts it),
with the Gloo CPU collectives, so the mesh ("data",) has two devices, one per process. Each
worker makes only its half of the batch (`jax.make_array_from_process_local_data`); the
parameters are the same numbers everywhere (same seed), replicated. XLA's SPMD partitioner sums
the gradients over the two processes. Every worker writes its loss and gradients; the launcher
prints the largest difference from the single process.

A hung worker cannot hang the launcher: the coordinator gives up after `--timeout` seconds, and
the launcher kills both workers when either fails or the time is up.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from remat.bench.config import GPT, inputs

CONFIG = GPT(layers=2, d_model=32, heads=4, seq=16, batch=8, vocab=64)
PROCESSES = 2


def single_process(plan: str) -> tuple[float, list[np.ndarray]]:
    """The reference: the same step on one device, no sharding."""
    import remat as rm
    from remat import models

    params, data = inputs(CONFIG)
    step = rm.jit(rm.value_and_grad(models.gpt_loss), backend="xla", static_argnums=(2, 3))
    loss, grads = step(params, data, plan, CONFIG.heads)
    return float(loss), [np.asarray(g) for g in rm.tree.flatten(grads)[0]]


def worker(rank: int, port: int, plan: str, timeout: int, out: Path) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=PROCESSES,
                               process_id=rank, initialization_timeout=timeout)
    from jax.sharding import Mesh

    import remat as rm
    from remat import parallel

    mesh = Mesh(np.array(jax.devices()), ("data",))
    setup = parallel.data_parallel(mesh, CONFIG.heads)
    params, (tokens, targets) = inputs(CONFIG)
    rows = slice(rank * CONFIG.batch // PROCESSES, (rank + 1) * CONFIG.batch // PROCESSES)
    data = tuple(jax.make_array_from_process_local_data(s, a[rows], a.shape)
                 for s, a in zip(setup.batch_shardings(), (tokens, targets)))
    param_shardings = setup.param_shardings(params)
    params = jax.tree.map(lambda a, s: jax.make_array_from_process_local_data(s, a, a.shape), params, param_shardings)
    step = rm.jit(rm.value_and_grad(setup.loss), backend="xla", static_argnums=(2,),
                  in_shardings=(param_shardings, setup.batch_shardings()),
                  out_shardings=(setup.sharding(), param_shardings))
    loss, grads = step(params, data, plan)
    # Replicated results: NumPy reads this process's copy, which is the whole value.
    np.savez(out, *[np.asarray(g) for g in rm.tree.flatten(grads)[0]], loss=np.asarray(loss),
             devices=len(jax.devices()), local=len(jax.local_devices()))
    jax.distributed.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(plan: str, timeout: int) -> dict:
    """Run both workers and the single-process reference; the largest differences."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"rank{r}.npz" for r in range(PROCESSES)]
        env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}  # one CPU device per process
        workers = [subprocess.Popen(
            [sys.executable, __file__, "--worker", str(r), "--port", str(port), "--plan", plan,
             "--timeout", str(timeout), "--out", str(outs[r])],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(PROCESSES)]
        try:
            reference = single_process(plan)
            logs = wait_all(workers, time.monotonic() + timeout)
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        failed = [r for r, w in enumerate(workers) if w.returncode != 0]
        if failed:
            raise RuntimeError(f"worker {failed[0]} failed (exit code {workers[failed[0]].returncode}):\n"
                               + logs[failed[0]][-3000:])
        results = [dict(np.load(o)) for o in outs]
        out = compare(reference, [(float(r["loss"]), gradients(r)) for r in results])
        out["devices"] = sorted({(int(r["local"]), int(r["devices"])) for r in results})
        return out


def gradients(saved: dict) -> list[np.ndarray]:
    """The gradients a worker saved, in order (`np.savez` names them arr_0, arr_1, ...)."""
    return [saved[f"arr_{i}"] for i in range(sum(k.startswith("arr_") for k in saved))]


def wait_all(workers: list[subprocess.Popen], deadline: float) -> list[str]:
    """Each worker's output; kills every worker as soon as one fails or the deadline passes (a
    worker whose peer died would wait in a collective until the deadline)."""
    logs = [""] * len(workers)
    pending = set(range(len(workers)))
    while pending:
        for r in sorted(pending):
            try:
                logs[r] = workers[r].communicate(timeout=0.2)[0]
            except subprocess.TimeoutExpired:
                continue
            pending.discard(r)
            if workers[r].returncode != 0:
                return logs
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers {sorted(pending)} still running after the time allowed; killed")
    return logs


def compare(reference, results) -> dict:
    loss, grads = reference
    return {
        "loss": loss,
        "loss_diff": max(abs(r_loss - loss) for r_loss, _ in results),
        "grad_diff": max(float(np.abs(a - b).max()) for _, r in results for a, b in zip(r, grads, strict=True)),
        "grad_scale": max(float(np.abs(g).max()) for g in grads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", default="layer", help="checkpoint plan: none, layer, sqrt, dots")
    parser.add_argument("--timeout", type=int, default=240, help="seconds before the workers are killed")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.port, args.plan, args.timeout, args.out)
        return
    r = launch(args.plan, args.timeout)
    print(f"{PROCESSES} processes x 1 CPU device, data parallel, plan {args.plan!r}")
    print("devices seen by each process (local, global): " + ", ".join(map(str, r["devices"])))
    print(f"loss (one process): {r['loss']:.6f}")
    print(f"largest loss difference: {r['loss_diff']:.3g}")
    print(f"largest gradient difference: {r['grad_diff']:.3g} (largest gradient {r['grad_scale']:.3g})")


if __name__ == "__main__":
    main()
