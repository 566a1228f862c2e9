"""The loop blocks lowered to `jax.lax`: one `lax.scan`, `lax.while_loop` or `lax.switch` whose
bodies are the block's Graphs evaluated by the XLA backend's own interpreter. Imported by that
backend the first time it lowers a loop (loops/__init__.py registers them), never before."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from remat.backends.xla_ops import evaluate
from remat.graph import Graph
from remat.loops import revolve
from remat.loops.while_loop import refuse


def scan(*args, body: Graph, length: int, reverse: bool, num_carry: int, num_xs: int, unroll: int = 1,
         checkpoint=None, snapshots: tuple[int, ...] | None = None, skip_last: bool = False):
    nc, nx = num_carry, num_xs
    carry, xs, consts = tuple(args[:nc]), tuple(args[nc : nc + nx]), list(args[nc + nx :])

    def step(c, x):
        outs = evaluate(body, [*c, *x, *consts])
        return tuple(outs[:nc]), tuple(outs[nc:])

    if snapshots is not None:
        return _sweep(step, carry, xs, length, reverse, unroll, snapshots, skip_last)
    last, ys = lax.scan(step, carry, xs, length=length, reverse=reverse, unroll=unroll)
    return (*last, *ys)


def _sweep(step, carry: tuple, xs: tuple, length: int, reverse: bool, unroll: int, positions: tuple[int, ...],
           skip_last: bool):
    """A binomial gradient's forward sweep: the scan, also writing the carries before the steps
    at `positions` (in the loop's order) into a buffer per carry leaf, and keeping the carry
    before the last step; with `skip_last` (its results unread) the last step is not run."""
    slot_of = np.full(max(length, 1), len(positions), np.int32)  # len(positions): no snapshot
    slot_of[list(positions)] = np.arange(len(positions))
    slot_of = jnp.asarray(slot_of)
    n = max(len(positions), 1)  # a dynamic index needs a slot to point at

    def swept(state, x):
        c, shots, last, i = state
        slot = slot_of[i]
        here = slot < len(positions)
        at = jnp.minimum(slot, n - 1)
        shots = tuple(lax.dynamic_update_index_in_dim(b, jnp.where(here, a, lax.dynamic_index_in_dim(b, at, 0, False)),
                                                      at, 0) for a, b in zip(c, shots))
        last = tuple(jnp.where(i == length - 1, a, b) for a, b in zip(c, last))
        if skip_last:  # its body has no ys then (prune.py): only the carries
            c = lax.cond(i == length - 1, lambda c, x: c, lambda c, x: step(c, x)[0], c, x)
            ys = ()
        else:
            c, ys = step(c, x)
        return (c, shots, last, i + 1), ys

    shots = tuple(jnp.zeros((n, *jnp.shape(a)), a.dtype) for a in carry)
    (c, shots, last, _), ys = lax.scan(swept, (carry, shots, carry, jnp.int32(0)), xs, length=length,
                                       reverse=reverse, unroll=unroll)
    return (*c, *ys, *(b[: len(positions)] for b in shots), *last)


def scan_binomial(*args, advance: Graph, step: Graph, length: int, reverse: bool, snapshots: int, num_carry: int,
                  num_xs: int, num_invariant: int, num_float: int, num_x_cts: int, resumed: bool = False):
    """One `fori_loop` over Revolve's action table. Its state holds the current carry, a buffer of
    `snapshots` carries and the cotangents; each row runs the step (`advance`) or its VJP
    (`youturn`) under a `cond` that sees only step-sized operands, and updates the buffers in
    place with selects: a `switch` over the whole state made XLA copy the buffers every row."""
    nc, nx, nf, nxc = num_carry, num_xs, num_float, num_x_cts
    positions, row = revolve.first_descent(length, snapshots) if resumed else ((), 0)
    sizes = [2 * nc if resumed else nc, nx, len(advance.inputs) - nc - nx, num_invariant, nf]
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    state, xs, consts, inv, ct = (list(args[a:b]) for a, b in zip(bounds, bounds[1:]))
    ct_ys = list(args[bounds[-1] :])
    table = revolve.actions(length, snapshots)[row:]
    init = state[-nc:] if nc else []  # c0, or the carry before the last step
    x_outs, const_outs = step.outputs[nf : nf + nxc], step.outputs[nf + nxc :]
    if not len(table):  # no steps: the cotangents pass through
        return (*ct, *[jnp.zeros((0, *v.shape), v.dtype) for v in x_outs],
                *[jnp.zeros(v.shape, v.dtype) for v in const_outs])

    def index(pos):
        return length - 1 - pos if reverse else pos

    def at(stacked, pos):
        return [lax.dynamic_index_in_dim(a, index(pos), keepdims=False) for a in stacked]

    def advanced(kind, cur, x):
        return lax.cond(kind == revolve.ADVANCE, lambda c, x: list(evaluate(advance, [*c, *x, *consts])),
                        lambda c, x: list(c), cur, x)

    def reversed_step(kind, cur, x, ct, ct_y):
        def you(c, x, ct, ct_y):
            return list(evaluate(step, [*c, *x, *consts, *inv, *ct, *ct_y]))

        def nothing(c, x, ct, ct_y):
            return [*ct, *[jnp.zeros(v.shape, v.dtype) for v in step.outputs[nf:]]]

        return lax.cond(kind == revolve.YOUTURN, you, nothing, cur, x, ct, ct_y)

    def body(i, s):
        kind, slot, pos, cur = rows[i, 0], rows[i, 1], s["pos"], s["cur"]
        x = at(xs, pos)
        shot, you = kind == revolve.TAKESHOT, kind == revolve.YOUTURN
        back = (kind == revolve.RESTORE) | (kind == revolve.FETCH)
        kept = [lax.dynamic_index_in_dim(b, slot, keepdims=False) for b in s["snaps"]]
        snaps = [lax.dynamic_update_index_in_dim(b, jnp.where(shot, c, k), slot, 0)
                 for b, c, k in zip(s["snaps"], cur, kept)]
        snap_pos = s["snap_pos"].at[slot].set(jnp.where(shot, pos, s["snap_pos"][slot]))
        cur = [jnp.where(back, k, a) for k, a in zip(kept, advanced(kind, cur, x))]
        pos = jnp.where(back, s["snap_pos"][slot], jnp.where(kind == revolve.ADVANCE, pos + 1, pos))
        got = reversed_step(kind, s["cur"], x, s["ct"], at(ct_ys, s["pos"]))
        t = index(s["pos"])
        old = [lax.dynamic_index_in_dim(b, t, keepdims=False) for b in s["ct_xs"]]
        ct_xs = [lax.dynamic_update_index_in_dim(b, jnp.where(you, g, o), t, 0)
                 for b, g, o in zip(s["ct_xs"], got[nf : nf + nxc], old)]
        sums = [a + g for a, g in zip(s["sums"], got[nf + nxc :])]  # zeros unless a youturn
        return {"cur": cur, "pos": pos, "ct": got[:nf], "snaps": snaps, "snap_pos": snap_pos, "ct_xs": ct_xs,
                "sums": sums}

    rows = jnp.asarray(table)
    n_slots = max(len(positions) if resumed else snapshots, 1)
    # Resumed after the forward sweep (scan_binomial.py): its snapshots fill the first slots, and
    # the current carry is the one before the last step.
    if resumed:  # the sweep's buffers, one slot more for a dynamic index to point at when it has none
        snaps = [b if len(b) else jnp.zeros((1, *b.shape[1:]), b.dtype) for b in state[:nc]]
    else:
        snaps = [jnp.zeros((n_slots, *jnp.shape(c)), c.dtype) for c in init]
    state = {"cur": init, "pos": jnp.int32(length - 1 if resumed else 0), "ct": ct, "snaps": snaps,
             "snap_pos": jnp.asarray([*positions, *[0] * (n_slots - len(positions))], jnp.int32),
             "ct_xs": [jnp.zeros((length, *v.shape), v.dtype) for v in x_outs],
             "sums": [jnp.zeros(v.shape, v.dtype) for v in const_outs]}
    s = lax.fori_loop(0, len(table), body, state)
    return (*s["ct"], *s["ct_xs"], *s["sums"])


def while_loop(*args, cond: Graph, body: Graph, num_carry: int):
    nc, n_cond = num_carry, len(cond.inputs) - num_carry
    carry, cond_consts, body_consts = tuple(args[:nc]), list(args[nc : nc + n_cond]), list(args[nc + n_cond :])
    return tuple(lax.while_loop(lambda c: evaluate(cond, [*c, *cond_consts])[0],
                                lambda c: tuple(evaluate(body, [*c, *body_consts])), carry))


def cond(index, *operands, num_residuals=0, **branches: Graph):
    graphs = [branches[f"branch{k}"] for k in range(len(branches))]
    fns = [lambda *ops, g=g: tuple(evaluate(g, ops)) for g in graphs]
    return tuple(lax.switch(index, fns, *operands))  # lax.switch clamps the index, as NumPy's does


def while_gradient(*cotangents, source: str | None, outputs: int):
    refuse(source=source)  # a gradient that needs a while loop's cotangents: the error, at last
