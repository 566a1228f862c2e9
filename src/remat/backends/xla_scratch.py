"""What an XLA:CPU executable allocates at run time beyond its buffer report.

XLA:CPU hands some fusions to a library (YNNPACK, run through the Slinky pipeline runtime). Such a
fusion gets its parameters and its result from XLA's buffers, but a value computed inside it
and read twice there may be materialized by the library, with `malloc`, while the fusion runs:
memory XLA's `temp_size_in_bytes` does not count. A matrix product read by a sum and by a
subtraction (the attention gradient's scores) is allocated whole; on a GPT-style step planned
near its least peak that was 4 MiB above XLA's report, measured by resident memory. (An
elementwise value read twice was kept a tile at a time in the cases measured.)

`library_scratch(hlo)` reads the optimized HLO text and gives the most any one such fusion may
materialize, every value two of its instructions read counted whole: added to XLA's report it
bounds what a run holds, as long as library fusions holding scratch do not run side by side
(their thunks run in dependency order). A value read once streams through the fusion (a
product summed at once allocates nothing), and broadcasts, bitcasts and constants are views:
neither counts.
"""

from __future__ import annotations

import math
import re

#: Fusion kinds whose body runs in a library that allocates its own intermediates.
LIBRARY_FUSIONS = ('"kind":"__ynn_fusion"',)

#: Instructions that make no buffer of their own: views of their operand (a reader of a view
#: reads its operand), and the fusion's parameters and constants (XLA's buffers).
VIEWS = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "iota", "get-tuple-element"})

ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
            "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}

_HEADER = re.compile(r"^(?:ENTRY )?%([\w.\-]+) \(.*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]\S* ([\w\-]+)\((.*)")
_OPERAND = re.compile(r"%([\w.\-]+)")
_CALLS = re.compile(r"calls=%([\w.\-]+)")


def library_scratch(hlo: str) -> int:
    """Bytes the largest library fusion of the optimized module `hlo` allocates while it runs."""
    bodies = _computations(hlo)
    called = {m.group(1) for line in hlo.splitlines() if any(k in line for k in LIBRARY_FUSIONS)
              for m in [_CALLS.search(line)] if m}
    return max((_materialized(bodies[name]) for name in called if name in bodies), default=0)


def _computations(hlo: str) -> dict[str, list[str]]:
    """Each computation's instruction lines, by name."""
    out: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in hlo.splitlines():
        header = _HEADER.match(line)
        if header:
            lines = out.setdefault(header.group(1), [])
        elif line.startswith("}"):
            lines = None
        elif lines is not None:
            lines.append(line)
    return out


def _materialized(body: list[str]) -> int:
    """Bytes of the values two instructions of a fusion body read, directly or through views
    (parameters and constants aside: they are XLA's buffers)."""
    sizes: dict[str, int] = {}
    source: dict[str, str] = {}  # a view's operand
    readers: dict[str, set[str]] = {}
    for line in body:
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, dtype, dims, opcode, rest = m.groups()
        operands = _OPERAND.findall(rest.split("), ", 1)[0])  # the attributes name computations
        if opcode in VIEWS:
            if operands:
                source[name] = source.get(operands[0], operands[0])
            continue
        if dtype in ITEMSIZE:
            sizes[name] = ITEMSIZE[dtype] * math.prod(int(d) for d in dims.split(",") if d)
        for operand in operands:
            readers.setdefault(source.get(operand, operand), set()).add(name)
    return sum(size for name, size in sizes.items() if len(readers.get(name, ())) > 1)


__all__ = ["library_scratch"]
