"""Per-device memory of the GPT-style training step (gradients of `models.gpt_loss`), on one device
and data parallel over 8, under each checkpoint plan (one executable; on the CPU its backward
blocks are conditionals, so checkpoints keep their promise).

    python benchmarks/sharded_memory.py [--json]

Runs on 8 simulated CPU devices (XLA_FLAGS is set here before JAX starts). How it is measured,
per device (data parallelism makes every device alike):

- **peak**: the parameters (replicated: every device holds them whole) and what the step's
  executable holds beyond its arguments, by XLA's own buffer report (`Compiled.last_memory`:
  temporaries + outputs, per device for a partitioned executable).
- **params + grads**: the bytes of the parameters and of their gradients (replicated too; the
  test checks the gradients' shards are the whole arrays).
- **activations** (one device): peak - params - grads: the batch's activations and temporaries.

The bound of issue 16: peak on each of 8 devices <= activations / 8 + params + grads, + 10%.
"""

from __future__ import annotations

import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402 (JAX reads XLA_FLAGS when it starts)
import json  # noqa: E402
import math  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import remat as rm  # noqa: E402
from remat import models, parallel  # noqa: E402
from remat.bench.config import GPT, PLAN_NAMES, inputs  # noqa: E402

# Activations dominate: one block's are ~15 MiB at batch 32 x 64 tokens, its weights 0.2 MiB.
CONFIG = GPT(layers=4, d_model=64, heads=4, seq=64, batch=32, vocab=64)
DEVICES = 8
PLANS = ("none", "layer", "sqrt", "dots")


def _shard_bytes(a, device) -> int:
    return sum(math.prod(s.data.shape) * a.dtype.itemsize for s in a.addressable_shards if s.device == device)


def measure(plan: str, setup: parallel.Setup | None) -> dict:
    """One gradient step of `plan`, on one device (`setup` None) or laid out by `setup`."""
    params, data = inputs(CONFIG)
    device = jax.devices()[0]
    if setup is None:
        params, data = jax.device_put((params, data), device)
        step = rm.jit(rm.grad(models.gpt_loss), backend="xla", static_argnums=(2, 3))
        args = (params, data, plan, CONFIG.heads)
    else:
        shardings = (setup.param_shardings(params), setup.batch_shardings())
        params, data = jax.device_put((params, data), shardings)
        step = rm.jit(rm.grad(setup.loss), backend="xla", static_argnums=(2,), in_shardings=shardings,
                      out_shardings=shardings[0])
        args = (params, data, plan)
    compiled = step.lower(*args).compile()
    dynamic = [a for a in args if not isinstance(a, (str, int))]
    grads = compiled(*dynamic)
    leaves = [rm.asarray(g)._value for g in rm.tree.flatten(grads)[0]]
    nbytes = sum(a.nbytes for a in jax.tree.leaves(params))
    return {
        "peak": compiled.last_memory.peak, "params": nbytes, "grads": sum(g.nbytes for g in leaves),
        "grads_whole_on_each_device": all(_shard_bytes(g, device) == g.nbytes for g in leaves),
    }


def data_parallel_setup() -> parallel.Setup:
    return parallel.data_parallel(Mesh(np.array(jax.devices()[:DEVICES]), ("data",)), CONFIG.heads)


def table(plans=PLANS) -> list[dict]:
    rows = []
    for plan in plans:
        one, many = measure(plan, None), measure(plan, data_parallel_setup())
        fixed = one["params"] + one["grads"]
        activations = one["peak"] + one["params"] - fixed
        bound = activations / DEVICES + fixed
        rows.append({"plan": plan, "one_peak": one["peak"] + one["params"], "activations": activations, "fixed": fixed,
                     "dp_peak": many["peak"] + one["params"], "dp_activations": many["peak"] + one["params"] - fixed,
                     "bound": bound,
                     "grads_whole_on_each_device": many["grads_whole_on_each_device"]})
    none = rows[0]
    for r in rows:
        r["one_ratio"] = r["activations"] / none["activations"]
        r["dp_ratio"] = r["dp_activations"] / none["dp_activations"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON (last line)")
    parser.add_argument("--plans", default=",".join(PLANS))
    args = parser.parse_args()
    rows = table(args.plans.split(","))
    mib = 2.0**20
    print(f"{CONFIG.describe()}; gradient step, XLA; data parallel over {DEVICES} CPU devices")
    print(f"params + grads: {rows[0]['fixed'] / mib:.2f} MiB (replicated)")
    print(f"{'plan':<14} {'1 device':>9} {'activ.':>9} {'8 dev. peak':>11} {'bound':>9} {'peak/bound':>10} "
          f"{'activ. vs none: 1 dev.':>22} {'8 dev.':>7}")
    for r in rows:
        print(f"{PLAN_NAMES[r['plan']]:<14} {r['one_peak'] / mib:>9.2f} {r['activations'] / mib:>9.2f} "
              f"{r['dp_peak'] / mib:>11.2f} {r['bound'] / mib:>9.2f} {r['dp_peak'] / r['bound']:>10.2f} "
              f"{r['one_ratio']:>22.2f} {r['dp_ratio']:>7.2f}")
    print("(MiB per device; bound = activations / 8 + params + grads)")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
