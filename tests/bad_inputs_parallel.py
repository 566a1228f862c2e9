"""Bad arguments to the reference set-ups of remat.parallel and to the models' checkpoint plans:
a mesh without the axes a set-up needs, heads that a model axis cannot split, parameters that are
not the GPT-style model's."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

import remat as rm
from bad_inputs import Case
from remat import models, parallel
from remat.bench.config import GPT, inputs

T = rm.ArgumentTypeError
V = rm.ArgumentValueError
AT = r"\(at bad_inputs_parallel\.py:\d+\)"  # the user's line: the case's lambda

_DEVICE = jax.devices()[0]
# One device listed twice: a "model" axis of size 2 that a Mesh accepts, for checks made before
# anything runs.
_TWO_BY_ONE = Mesh(np.array([_DEVICE, _DEVICE]).reshape(1, 2), ("data", "model"))
_DATA = Mesh(np.array([_DEVICE]), ("data",))
_PARAMS, _BATCH = inputs(GPT(layers=1, d_model=8, heads=2, seq=4, batch=2, vocab=8))

CASES: list[Case] = [
    Case("parallel-tensor-heads-not-divisible", lambda: parallel.tensor_parallel(_TWO_BY_ONE, heads=3),
         rm.ShapeError, (r"^tensor_parallel:", r"heads=3", r"'model'", r"size 2", r"divisible by 2", AT)),
    Case("parallel-data-mesh-axis-misnamed", lambda: parallel.data_parallel(Mesh(np.array([_DEVICE]), ("batch",)), 2),
         V, (r"^data_parallel:", r"\('batch',\)", r"\('data',\)", r"axis_names")),
    Case("parallel-tensor-mesh-without-model-axis", lambda: parallel.tensor_parallel(_DATA, 2), V,
         (r"^tensor_parallel:", r"\('data',\)", r"\('data', 'model'\)")),
    Case("parallel-data-mesh-not-a-mesh", lambda: parallel.data_parallel([_DEVICE], 2), T,
         (r"^data_parallel:", r"mesh", r"jax\.sharding\.Mesh", r"list")),
    Case("parallel-data-heads-zero", lambda: parallel.data_parallel(_DATA, 0), V,
         (r"^data_parallel:", r"heads", r"positive int", r"got 0")),
    Case("parallel-tensor-heads-float", lambda: parallel.tensor_parallel(_TWO_BY_ONE, 2.0), V,
         (r"^tensor_parallel:", r"heads", r"2\.0")),
    Case("parallel-shardings-of-other-params", lambda: parallel.data_parallel(_DATA, 2).param_shardings({"w": 1}), T,
         (r"^data_parallel\.param_shardings:", r"params", r"'blocks'", r"inputs")),
    Case("parallel-layout-of-a-list", lambda: parallel.tensor_parallel(_TWO_BY_ONE, 2).layout([1, 2]), T,
         (r"^tensor_parallel\.layout:", r"params", r"got list")),
    Case("parallel-loss-unknown-plan", lambda: parallel.data_parallel(_DATA, 2).loss(_PARAMS, _BATCH, "every"), V,
         (r"plan='every'", r"'layer'", r"'sqrt'", r"an int")),
    Case("models-gpt-loss-unknown-plan", lambda: models.gpt_loss(_PARAMS, _BATCH, "per-layer", 2), V,
         (r"^checkpoint plan:", r"plan='per-layer'", r"'none'", r"'dots'", AT)),
]
