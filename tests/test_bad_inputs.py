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


def _still_works() -> None:
    assert current_trace() is None
    x = rm.asarray(np.arange(3.0, dtype=np.float32))
    for backend in ("numpy", "xla"):
        g = rm.jit(rm.grad(lambda x: rm.sum(rm.checkpoint(lambda h: rm.sin(h) * h, x))), backend=backend)(x)
        np.testing.assert_allclose(g, np.cos(np.arange(3.0)) * np.arange(3.0) + np.sin(np.arange(3.0)), rtol=1e-5)


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
