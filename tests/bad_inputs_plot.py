"""Bad inputs to `rm.memory.plot` (the memory picture)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import remat as rm
from bad_inputs import Case


def _profile():
    return rm.memory.profile(lambda x: rm.sum(rm.tanh(x)), rm.ones((8,)))


def _png() -> Path:
    return Path(tempfile.mkdtemp()) / "memory.png"


CASES: list[Case] = [
    Case("plot-one-profile-not-a-dict", lambda: rm.memory.plot(_profile(), _png()), rm.ArgumentTypeError,
         (r"memory\.plot:", r"profiles must be a dict", r"got one Profile", r"profile\.plot\(path\)")),
    Case("plot-a-list-of-profiles", lambda: rm.memory.plot([_profile()], _png()), rm.ArgumentTypeError,
         (r"memory\.plot:", r"profiles must be a dict", r"got \[Profile\(numpy")),
    Case("plot-no-profiles", lambda: rm.memory.plot({}, _png()), rm.ArgumentValueError,
         (r"memory\.plot:", r"profiles is empty \(\{\}\)", r"at least one")),
    Case("plot-a-number-for-a-profile", lambda: rm.memory.plot({"none": 3.5}, _png()), rm.ArgumentTypeError,
         (r"memory\.plot:", r"profiles\['none'\] must be a Profile", r"got 3\.5")),
]
