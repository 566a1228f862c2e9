"""The XLA lowerings blocks give the XLA backend, by the name of the function that lowers each:
the table imports no JAX, so a block's module registers here when `import remat` loads it, and
the function is imported the first time XLA lowers one (`backends/xla_ops.py`).

>>> sorted(op for op in REGISTERED if op in ("scan", "checkpoint"))
['checkpoint', 'scan']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

REGISTERED: dict[str, str] = {}  # op -> "module:function"


def register(op: str, where: str) -> None:
    """`op` is lowered by `where`, written `"package.module:function"`."""
    REGISTERED[op] = where


def resolve(op: str) -> Callable:
    """The function registered for `op`, imported now."""
    module, name = REGISTERED[op].split(":")
    return getattr(importlib.import_module(module), name)
