"""Per-example gradients of a shared weight with a vectorized batch, through a checkpoint.

    python examples/per_example_gradients.py

The batch axis is a named vectorized axis: the model is written for one example, and `rm.grad`
of the vectorized loss gives one gradient per example. `rm.vmap(rm.grad(...))` agrees.
"""

import numpy as np

import remat as rm

rng = np.random.default_rng(0)
xs = rng.normal(size=(8, 5)).astype(np.float32)
ys = rng.normal(size=(8,)).astype(np.float32)
w = rm.asarray(rng.normal(size=(5,)), "float32")


def loss(w, x, y):
    hidden = rm.checkpoint(lambda x: rm.tanh(x * w), x)  # w is captured by the checkpoint
    return (rm.sum(hidden) - y) ** 2


per_example = rm.grad(loss)(w, rm.vectorize(rm.asarray(xs), "example"), rm.vectorize(rm.asarray(ys), "example"))
print("vectorized axes of the gradient:", per_example.vectorized_axes)
via_vmap = rm.vmap(rm.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)
print("equal to vmap(grad):", np.allclose(rm.devectorize(per_example), via_vmap, rtol=1e-6))
