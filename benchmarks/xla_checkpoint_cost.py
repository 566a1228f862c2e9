"""What a checkpoint per layer costs on XLA: step time with / without, a ratio, never a time.

The model is the residual MLP of `remat.models` (L layers of `h + tanh(h @ w + b)`), a step is
`value_and_grad` with respect to the parameters, one executable (`rm.jit(..., backend="xla")`; on
the CPU each layer's backward block is a conditional) on device-resident inputs. At the default
size (16 layers, width 512, batch 512) the matrix products dominate: the plain step computes three
per layer (one forward, two in the backward pass) and the checkpointed one a fourth (the
recomputed forward), so 4/3 is the ideal ratio. Both steps run in one process, alternating (the
order flips every round), each round's ratio is taken from its own pair, and the median of the
rounds is compared with the target.

    python benchmarks/xla_checkpoint_cost.py [--layers 16 --width 512 --batch 512 --rounds 21]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial

from remat.bench import timing

TARGET = 1.35  # checkpoint per layer / no checkpoint; the ideal is 4/3


def build(plan: str, depth: int, width: int, batch: int):
    """One step as a function of nothing: its loss and gradients (`timing.ready` waits for them)."""
    import jax

    import remat as rm
    from remat.bench.config import MLP, inputs
    from remat.models import residual_mlp_loss

    params, x = jax.device_put(inputs(MLP(depth=depth, width=width, batch=batch)))
    step = rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, plan)), backend="xla")
    return partial(step.lower(params, x).compile(), params, x)


def rounds(depth: int, width: int, batch: int, n: int) -> dict[str, list[float]]:
    steps = {plan: build(plan, depth, width, batch) for plan in ("none", "layer")}
    for run in steps.values():
        timing.ready(run())
        timing.ready(run())  # the second run settles XLA's buffers
    return timing.interleaved(steps, n)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    times = rounds(a.layers, a.width, a.batch, a.rounds)
    ratios = timing.ratios(times["layer"], times["none"])
    ratio = statistics.median(ratios)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratio] * 3
    if a.json:
        print(json.dumps({"ratios": ratios, "median": ratio, "quartiles": [q[0], q[2]], "times": times}))
        return 0
    print(f"{a.layers} layers, width {a.width}, batch {a.batch}; {a.rounds} rounds, interleaved")
    print(f"  step without checkpoints: median {statistics.median(times['none']) * 1e3:.1f} ms")
    print(f"  checkpoint per layer / none: {ratio:.3f}x median (quartiles {q[0]:.3f}-{q[2]:.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}); ideal {4 / 3:.3f}x, target <= {TARGET}x  "
          + ("ok" if ratio <= TARGET else "NOT MET"))
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
