"""Every case of the bad-input catalogue raises a remat error with a useful message, and the
library works normally afterwards (no trace left open, no cache poisoned)."""

from __future__ import annotations

import importlib
import pathlib
import warnings

import numpy as np
import pytest

import remat as rm
from bad_inputs import Case
from remat.trace import current_trace

_MODULES = sorted(p.stem for p in pathlib.Path(__file__).parent.glob("bad_inputs_*.py"))
CASES: list[Case] = [c for m in _MODULES for c in importlib.import_module(m).CASES]


def _loss(x):
    return rm.sum(rm.checkpoint(lambda h: rm.sin(h) * h, x))


_STEPS = {backend: rm.jit(rm.grad(_loss), backend=backend) for backend in ("numpy", "xla")}


def _still_works() -> None:
    """No trace left open, tracing works (a fresh trace, eagerly), and no cache is poisoned (the
    jitted steps, compiled once for the whole catalogue, are reused as a program would reuse them)."""
    assert current_trace() is None
    x = np.arange(3.0, dtype=np.float32)
    expected = np.cos(x) * x + np.sin(x)
    for g in (rm.grad(lambda x: _loss(x))(rm.asarray(x)), *(step(rm.asarray(x)) for step in _STEPS.values())):
        np.testing.assert_allclose(g, expected, rtol=1e-5)


def test_catalogue_is_large_and_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    assert len(CASES) >= 80


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input(case: Case):
    if case.warns is not None:
        with pytest.warns(case.warns) as record:
            case.call()
        message = " ".join(str(w.message) for w in record)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(case.error) as info:
                case.call()
        assert isinstance(info.value, rm.RematError), f"{type(info.value).__name__} is not a remat error"
        message = str(info.value)
    missing = case.matches(message)
    assert not missing, f"message {message!r} lacks {missing}"
    _still_works()
