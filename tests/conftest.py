import numpy as np
import pytest

import remat as rm

BACKENDS = ["numpy", "xla"]  # JAX is a test dependency: every backend runs, none is skipped


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Each test taking `backend` runs on every backend."""
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def run_on(backend: str, fn, *args):
    """`fn(*args)` traced by rm.jit and run on `backend`, as NumPy arrays."""
    out = rm.jit(fn, backend=backend)(*args)
    return rm.tree.map(np.asarray, out)
