"""The loop blocks on the NumPy evaluator: Python loops that run the body Graphs with the
evaluator's own `run` and the caller's `Memory`, so the count of live bytes stays exact. A step's
temporaries die inside its `run`; the ys go into buffers allocated once; a carry is let go as
soon as the next step has made its successor."""

from __future__ import annotations

import numpy as np

from remat.backends.numpy import Memory, last_uses, register, run
from remat.graph import Graph, Var
from remat.loops import revolve
from remat.loops.revolve import actions, first_descent
from remat.loops.while_loop import refuse


def _memory(memory, args):
    """The run's counter; a block run on its own (eagerly) gets one that knows its operands are
    the caller's, so that no op of the body overwrites them in place."""
    return memory if memory is not None else Memory.of_caller(args)


def _release(memory, arrays) -> None:
    # A function, not an inline loop: a loop variable would keep the last array alive in the
    # caller's frame for another step, a buffer the count says is gone (tracemalloc sees it).
    for a in arrays:
        memory.release(a)


def _distinct(graph: Graph) -> dict[Var, int]:
    """Each output Var of `graph` once (`run` holds it once), with its first position."""
    return {v: graph.outputs.index(v) for v in dict.fromkeys(graph.outputs)}


def scan(*args, body: Graph, length: int, reverse: bool, num_carry: int, num_xs: int, unroll: int = 1,
         checkpoint=None, snapshots: tuple[int, ...] | None = None, skip_last: bool = False, memory=None):
    memory = _memory(memory, args)
    sweep = None if snapshots is None else _Sweep(snapshots, length, memory)
    frees = last_uses(body)  # once, not once per step
    nc, nx = num_carry, num_xs
    carry, xs, consts = list(args[:nc]), args[nc : nc + nx], list(args[nc + nx :])
    ys = [np.empty((length, *v.shape), v.dtype) for v in body.outputs[nc:]]
    for y in ys:
        memory.hold(y)
    outputs = _distinct(body)
    carried = set(body.outputs[:nc])
    held: list[np.ndarray] = []  # the previous step's carries, which `run` handed over to us
    for i in range(length):
        if sweep is not None:
            sweep.see(i, carry)
            if skip_last and i == length - 1:
                break
        t = length - 1 - i if reverse else i
        outs = run(body, [*carry, *(x[t] for x in xs), *consts], memory, frees)
        _release(memory, held)
        for buf, k in zip(ys, range(nc, len(outs))):
            buf[t] = outs[k]
        held = [outs[k] for v, k in outputs.items() if v in carried]
        _release(memory, [outs[k] for v, k in outputs.items() if v not in carried])
        carry = outs[:nc]
    kept = [] if sweep is None else sweep.results()
    _release(memory, [*held, *ys])  # the caller holds the results from here on
    return (*carry, *ys, *kept)


class _Sweep:
    """What a binomial gradient's forward sweep keeps besides its results: a buffer per carry
    leaf with the carries at the snapshot positions of Revolve's first descent (copied in: the
    backward node overwrites its slots), and the carry before the last step (held, not copied)."""

    def __init__(self, positions: tuple[int, ...], length: int, memory):
        self.slot = {p: k for k, p in enumerate(positions)}
        self.n, self.length, self.memory = len(positions), length, memory
        self.buffers: list[np.ndarray] = []
        self.last: list[np.ndarray] = []

    def see(self, i: int, carry: list[np.ndarray]) -> None:
        """The carry before step `i` (in the loop's order)."""
        if not self.buffers:  # allocated at the first step: the carries' types are known then
            self.buffers = [np.empty((self.n, *np.shape(c)), np.asarray(c).dtype) for c in carry]
            for b in self.buffers:
                self.memory.hold(b)
        if i in self.slot:
            for b, c in zip(self.buffers, carry):
                b[self.slot[i]] = c
        if i == self.length - 1:
            for c in carry:
                self.memory.hold(c)
            self.last = list(carry)

    def results(self) -> list[np.ndarray]:
        out = self.buffers + self.last
        _release(self.memory, out)  # the caller holds them from here on
        return out


class _Binomial:
    """Runs Revolve's action table; every array it keeps is held once in `memory` per reference
    (the current carry, each snapshot, the cotangents), so the count stays exact."""

    def __init__(self, args, advance: Graph, step: Graph, length: int, reverse: bool, nc: int, nx: int,
                 n_inv: int, num_float: int, num_x_cts: int, memory, positions: tuple[int, ...] | None = None):
        self.advance, self.step, self.memory, self.length, self.reverse = advance, step, memory, length, reverse
        self.frees = (last_uses(advance), last_uses(step))
        n_state = nc if positions is None else 2 * nc
        groups = _cut(args, [n_state, nx, len(advance.inputs) - nc - nx, n_inv, num_float])
        state, self.xs, self.consts, self.inv, ct, self.ct_ys = groups
        self.ct = self._own(ct)
        self.slots: dict[int, list[np.ndarray]] = {}
        self.slot_pos: dict[int, int] = {}
        self.current, self.pos = self._own(state[n_state - nc :]), 0
        # Resumed after the forward sweep's first descent (scan_binomial.py), at the last step,
        # its slots views of the sweep's buffers, which a takeshot overwrites: made for this node
        # alone, they stay alive while it runs anyway.
        self.buffers = self._own(state[:nc]) if positions is not None else None
        for k, p in enumerate(positions or ()):
            self.slots[k], self.slot_pos[k] = self._own([b[k] for b in self.buffers]), p
            self.pos = length - 1
        self.nf, self.nxc = num_float, num_x_cts
        self.ct_xs = [np.zeros((length, *v.shape), v.dtype) for v in step.outputs[num_float : num_float + num_x_cts]]
        self.sums = [np.zeros(v.shape, v.dtype) for v in step.outputs[num_float + num_x_cts :]]
        self._own(self.ct_xs + self.sums)

    def _own(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        for a in arrays:
            self.memory.hold(a)
        return arrays

    def _at(self, stacked, pos: int) -> list[np.ndarray]:
        t = self.length - 1 - pos if self.reverse else pos
        return [a[t] for a in stacked]

    def _run(self, graph: Graph, args) -> list[np.ndarray]:
        """`run`, with one hold per output position (a Var returned twice is held twice)."""
        outs = run(graph, args, self.memory, self.frees[graph is self.step])
        first = _distinct(graph)
        self._own([o for k, o in enumerate(outs) if first[graph.outputs[k]] != k])
        return outs

    def advance_(self, _slot: int) -> None:
        new = self._run(self.advance, [*self.current, *self._at(self.xs, self.pos), *self.consts])
        _release(self.memory, self.current)
        self.current, self.pos = new, self.pos + 1

    def takeshot(self, slot: int) -> None:
        _release(self.memory, self.slots.pop(slot, ()))
        if self.buffers is None:
            self.slots[slot] = self._own(list(self.current))
        else:
            for b, c in zip(self.buffers, self.current):
                b[slot] = c
            self.slots[slot] = self._own([b[slot] for b in self.buffers])
        self.slot_pos[slot] = self.pos

    def restore(self, slot: int, keep: bool = True) -> None:
        _release(self.memory, self.current)
        self.current = self._own(list(self.slots[slot])) if keep else self.slots.pop(slot)
        self.pos = self.slot_pos[slot]

    def youturn(self, _slot: int) -> None:
        got = self._run(self.step, [*self.current, *self._at(self.xs, self.pos), *self.consts, *self.inv,
                                    *self.ct, *self._at(self.ct_ys, self.pos)])
        nf, nxc = self.nf, self.nxc
        _release(self.memory, self.ct)
        self.ct = got[:nf]
        t = self.length - 1 - self.pos if self.reverse else self.pos
        for buf, g in zip(self.ct_xs, got[nf : nf + nxc]):
            buf[t] = g
        for acc, g in zip(self.sums, got[nf + nxc :]):
            np.add(acc, g, out=acc)
        _release(self.memory, got[nf:])

    def run(self, table: np.ndarray) -> tuple:
        do = {revolve.ADVANCE: self.advance_, revolve.TAKESHOT: self.takeshot, revolve.RESTORE: self.restore,
              revolve.FETCH: lambda slot: self.restore(slot, keep=False), revolve.YOUTURN: self.youturn}
        for start in range(0, len(table), _ROWS):  # a few rows as Python ints at a time, not T log T
            for kind, slot in table[start : start + _ROWS].tolist():
                do[kind](slot)
        _release(self.memory, self.current)
        for kept in self.slots.values():
            _release(self.memory, kept)
        _release(self.memory, self.buffers or ())
        out = (*self.ct, *self.ct_xs, *self.sums)
        _release(self.memory, out)  # the caller holds them from here on
        return out


_ROWS = 256  # rows of a binomial schedule turned into Python ints at once


def _cut(args, sizes: list[int]) -> list[list]:
    groups, i = [], 0
    for n in sizes:
        groups.append(list(args[i : i + n]))
        i += n
    return [*groups, list(args[i:])]


def scan_binomial(*args, advance: Graph, step: Graph, length: int, reverse: bool, snapshots: int, num_carry: int,
                  num_xs: int, num_invariant: int, num_float: int, num_x_cts: int, resumed: bool = False,
                  memory=None):
    memory = _memory(memory, args)
    positions, row = first_descent(length, snapshots) if resumed else (None, 0)
    loop = _Binomial(args, advance, step, length, reverse, num_carry, num_xs, num_invariant, num_float, num_x_cts,
                     memory, positions)
    return loop.run(actions(length, snapshots)[row:])


def while_loop(*args, cond: Graph, body: Graph, num_carry: int, memory=None):
    memory = _memory(memory, args)
    cond_frees, body_frees = last_uses(cond), last_uses(body)
    nc, n_cond = num_carry, len(cond.inputs) - num_carry
    carry, cond_consts, body_consts = list(args[:nc]), list(args[nc : nc + n_cond]), list(args[nc + n_cond :])
    outputs = _distinct(body)
    held: list[np.ndarray] = []
    while True:
        (go,) = run(cond, [*carry, *cond_consts], memory, cond_frees)
        memory.release(go)
        if not bool(go):
            break
        outs = run(body, [*carry, *body_consts], memory, body_frees)
        _release(memory, held)
        held = [outs[k] for k in outputs.values()]
        carry = outs
    _release(memory, held)
    return tuple(carry)


def cond(index, *operands, memory=None, num_residuals=0, **branches: Graph):
    memory = _memory(memory, (*operands, index))
    k = int(np.clip(index, 0, len(branches) - 1))  # as lax.switch: an index out of range is clamped
    graph = branches[f"branch{k}"]
    outs = run(graph, list(operands), memory)
    _release(memory, [outs[k] for k in _distinct(graph).values()])  # the caller holds them from here on
    return tuple(outs)


def while_gradient(*cotangents, source: str | None, outputs: int):
    refuse(source=source)  # a gradient that needs a while loop's cotangents: the error, at last


for _op, _impl in {"scan": scan, "scan_binomial": scan_binomial, "while": while_loop, "cond": cond,
                   "while_gradient": while_gradient}.items():
    register(_op, _impl, runs_graphs=_op != "while_gradient")
