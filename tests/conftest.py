import os
import sys

import numpy as np
import pytest

import remat as rm
from remat.core import OPS, declare

# Tests compare XLA with NumPy and with JAX's own gradients at float32 tolerances, which TF32
# products (JAX's default for float32 matmuls on recent GPUs, so remat's) miss by ~1e-3. Set
# JAX's process-wide precision, which remat follows when a call asks for none and which JAX's
# reference computations use too: the variable before JAX is imported (it also reaches the
# subprocesses tests start), the config if something imported JAX first. The tests of the
# setting itself (test_precision.py) ask for each precision explicitly.
os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_default_matmul_precision", "highest")

# Plans stay in memory only: a test that clears the planner's cache to plan again must not read
# a plan from disk (test_plan_cache.py turns the disk cache on in a folder of its own).
os.environ["REMAT_PLAN_CACHE"] = "off"

BACKENDS = ["numpy", "xla"]  # JAX is a test dependency: every backend runs, none is skipped


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Each test taking `backend` runs on every backend."""
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def declare_op():
    """`declare` for ops one test makes up, which leave the registry when the test ends: tests that
    check every declared op (each has a JVP rule, each backend lowers it) must not meet them."""
    made = []

    def declared(name: str, *args, **kwargs):
        made.append(name)
        return declare(name, *args, **kwargs)

    yield declared
    for name in made:
        OPS.pop(name, None)


def run_on(backend: str, fn, *args):
    """`fn(*args)` traced by rm.jit and run on `backend`, as NumPy arrays."""
    out = rm.jit(fn, backend=backend)(*args)
    return rm.tree.map(np.asarray, out)
