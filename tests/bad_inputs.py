"""The catalogue of bad inputs: each case is a call a user might make by mistake, the remat error
it must raise (a TypeError/ValueError, never a bare Python or NumPy one) and words the message
must contain. Cases live in `bad_inputs_*.py`, one module per area; `test_bad_inputs.py` runs
them all and checks after each that the library still works normally."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Case:
    """`call()` must raise `error` (a class, or a tuple of classes) with a message matching every
    regular expression in `says` (searched, case-sensitive); `warns`, if set, is a Warning
    class the call must emit instead of raising."""

    name: str
    call: Callable[[], object]
    error: type | tuple[type, ...] | None
    says: tuple[str, ...] = ()
    warns: type | None = None

    def matches(self, message: str) -> list[str]:
        """The expected phrases missing from `message`."""
        return [s for s in self.says if not re.search(s, message)]
