"""Train the GPT-style model on 8 devices with AdamW, data parallel or data + tensor parallel
(`remat.parallel`), checkpointed, and compare every step with the same training on one device.

    python examples/sharded_gpt.py [--setup dp|tp] [--plan layer] [--steps 30]

Without a machine of 8 accelerators, XLA simulates 8 CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=8`, set here before JAX starts). `dp` splits
the batch over a mesh ("data",) of 8; `tp` uses a mesh ("data", "model") of 4 x 2: the batch over
"data" and, in each block, the attention heads and the MLP's hidden units over "model" (Megatron
style). The parameters, the AdamW moments and the new parameters stay sharded on the devices from
step to step; only the loss comes back to the host.
"""

from __future__ import annotations

import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402 (JAX reads XLA_FLAGS when it starts)
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import remat as rm  # noqa: E402
from remat import models, parallel  # noqa: E402
from remat.bench.config import GPT, inputs  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt_adamw import CHARS, batches  # noqa: E402 (the same text, cut the same way)

CONFIG = GPT(layers=2, d_model=32, heads=4, seq=32, batch=16, vocab=len(CHARS))


def make_setup(kind: str) -> parallel.Setup:
    devices = np.array(jax.devices()[:8])
    if kind == "dp":
        return parallel.data_parallel(Mesh(devices, ("data",)), CONFIG.heads)
    return parallel.tensor_parallel(Mesh(devices.reshape(4, 2), ("data", "model")), CONFIG.heads)


def optimizer():
    return rm.optim.adamw(3e-3, weight_decay=0.01)


def sharded_training(setup: parallel.Setup, plan: str, data) -> tuple[list[float], dict]:
    """The loss at every step and the final parameters (in `models.gpt_loss`'s layout)."""
    opt = optimizer()
    params = setup.layout(inputs(CONFIG)[0])
    param_sh = setup.param_shardings(params)
    params = jax.device_put(params, param_sh)
    state = opt.init(params)
    state_sh = type(state)(setup.sharding(), param_sh, param_sh)  # count, mu, nu

    def step(params, state, batch):
        loss, grads = rm.value_and_grad(setup.loss)(params, batch, plan)
        params, state = opt.update(grads, state, params)
        return params, state, loss

    step = rm.jit(step, backend="xla", in_shardings=(param_sh, state_sh, setup.batch_shardings()),
                  out_shardings=(param_sh, state_sh, setup.sharding()))
    losses = []
    for batch in data:
        params, state, loss = step(params, state, batch)
        losses.append(float(loss))
    return losses, setup.standard(rm.tree.map(np.asarray, params))


def one_device_training(plan: str, data) -> tuple[list[float], dict]:
    opt = optimizer()

    def step(params, state, batch):
        loss, grads = rm.value_and_grad(models.gpt_loss)(params, batch, plan, CONFIG.heads)
        params, state = opt.update(grads, state, params)
        return params, state, loss

    step = rm.jit(step, backend="xla")
    params = inputs(CONFIG)[0]
    state = opt.init(params)
    losses = []
    for batch in data:
        params, state, loss = step(params, state, batch)
        losses.append(float(loss))
    return losses, rm.tree.map(np.asarray, params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", default="tp", choices=["dp", "tp"])
    parser.add_argument("--plan", default="layer", help="checkpoint plan: none, layer, sqrt, dots")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    setup = make_setup(args.setup)
    data = batches(args.steps, CONFIG)
    sharded, params = sharded_training(setup, args.plan, data)
    single, reference = one_device_training(args.plan, data)
    print(f"{setup.name} on {setup.mesh.devices.size} devices, mesh {dict(setup.mesh.shape)}, plan {args.plan!r}")
    print(f"{'step':>6} {'sharded':>10} {'1 device':>10}")
    for i in sorted({0, *range(9, args.steps, 10), args.steps - 1}):
        print(f"{i + 1:>6} {sharded[i]:>10.4f} {single[i]:>10.4f}")
    diff = max(float(np.abs(a - b).max()) for a, b in zip(rm.tree.flatten(params)[0], rm.tree.flatten(reference)[0]))
    print(f"largest loss difference: {max(abs(a - b) for a, b in zip(sharded, single)):.3g}")
    print(f"largest parameter difference after {args.steps} steps: {diff:.3g}")


if __name__ == "__main__":
    main()
