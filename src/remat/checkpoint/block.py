"""The checkpoint block: one node holding its body Graph, which inputs are explicit, a policy.

Captures are found by tracing: whatever tensor of an enclosing trace the body reads becomes an
input of the block after the explicit ones. The gradient rule ties the explicit inputs the
backward pass reads and the incoming cotangent together with a barrier, then runs a *backward
block*: a checkpoint block (`differentiated=True`) whose body recomputes the forward body and
back-propagates through it. Because the backward pass is itself a checkpoint block, grad of grad
recomputes it in turn instead of keeping its internals: higher orders save memory too.

A policy (`rm.policies`) picks body values to save: they become extra outputs of the block (its
residuals, `params["num_residuals"]` of them, after the user's outputs), and the recomputation
reads them instead of recomputing their producers. A checkpoint never keeps more bytes than the
same body without it: where recomputing would need inputs larger than what the plain gradient
keeps, the block saves what the plain gradient keeps instead.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from remat import argcheck, policies, tree
from remat.autodiff import backward_pass, replay_known
from remat.backends import lowerings
from remat.backends import numpy as evaluator
from remat.budget import misplaced
from remat.checkpoint import cache as checkpoint_cache
from remat.checkpoint import derived
from remat.core import OPS, Aval, BlockJVP, declare
from remat.custom_vjp import named_outputs
from remat.errors import ArgumentTypeError, ArgumentValueError, at_source, callable_name, user_source
from remat.forward import instantiate, jvp_graph, split_nodes
from remat.graph import Graph, Node, Var, needed, sub_graph
from remat.ops.identity import barrier
from remat.stacked import only_sliced, readers
from remat.tensor import Tensor, is_array
from remat.trace import asarray, bind, current_trace, trace_function
from remat.vectorize import block_rule

# ---------------------------------------------------------------- the block and its gradient


def _checkpoint_rule(*avals, body: Graph, saved, policy, num_residuals=0, prevent_cse=True,
                     differentiated=False) -> list[Aval]:
    if [(a.shape, a.dtype) for a in avals] != [(v.shape, v.dtype) for v in body.inputs]:
        raise TypeError("checkpoint inputs do not match its body's inputs")
    return [Aval(v.shape, v.dtype) for v in body.outputs]


def _checkpoint_vjp(gs, *inputs, out, body: Graph, saved, policy, num_residuals=0, prevent_cse=True,
                    differentiated=False):
    # With inputs (e..., c...), residuals r... and cotangents g...: the backward block B reads
    # the e and r its recomputation needs, the g and the captured c; (e'..., r'..., g'...) =
    # barrier(e..., r..., g...) orders B after the cotangents exist, and B's body replays the
    # forward body on (e'..., c...), reading r' instead of recomputing saved values, then
    # back-propagates g'.

    n_out = len(body.outputs) - num_residuals
    present = [k for k, g in enumerate(gs) if g is not None]

    replayed: dict[Var, Tensor] = {}

    def recompute_and_back(ex, res, cts):
        ins = list(inputs)
        for i, x in zip(saved, ex):
            ins[i] = x
        env = replay_known(body, ins, _known(body, res, n_out))
        replayed.update(env)
        out_cts: list = [None] * len(body.outputs)
        for k, c in zip(present, cts):
            out_cts[k] = c
        return backward_pass(body, env, out_cts)

    explicit, residuals, cts = [inputs[i] for i in saved], list(out[n_out:]), [gs[k] for k in present]
    traced = trace_function(recompute_and_back, [explicit, residuals, cts], name="checkpoint backward")
    graph = traced.graph
    if not graph.outputs:
        return (None,) * len(inputs)
    flat = explicit + residuals + cts
    if num_residuals:  # a derivative rule recomputing a saved derivative value reads it instead
        graph = _reuse_saved(graph, body, replayed, dict(zip(traced.captured, graph.inputs[len(flat):])))
    read = {v for n in graph.nodes for v in n.inputs} | set(graph.outputs)
    first_ct = len(explicit) + len(residuals)
    tie = [k for k in range(len(flat)) if k >= first_ct or graph.inputs[k] in read]
    # prevent_cse: a bool, or one flag per explicit input (residuals and cotangents always tied)
    barred = [k for k in tie if prevent_cse is True or (prevent_cse and (k >= len(explicit) or prevent_cse[k]))]
    tied = {k: flat[k] for k in tie}
    tied.update(zip(barred, barrier(*[flat[k] for k in barred]) if barred else []))
    used = [k for k in tie if graph.inputs[k] in read]
    caps = [k for k in range(len(flat), len(graph.inputs)) if graph.inputs[k] in read]
    sub = Graph([graph.inputs[k] for k in used + caps], graph.outputs, graph.nodes, graph.constants)
    trace = current_trace()
    captured = [Tensor._traced(trace, traced.captured[k - len(flat)]) for k in caps]
    # Raw: the traced graph took vectorized axes as plain ones (a vmap over the cotangents).
    # No policy: its residuals would be computed by every first-order gradient for the sake of
    # a second order that most never take; grad of grad recomputes the backward block whole.
    outs = _bind_block(sub, [tied[k]._raw() for k in used], captured, None, guarantee=False,
                       prevent_cse=bool(barred), differentiated=True)
    return tuple(traced.wrap_outputs(outs))


def _reuse_saved(graph: Graph, body: Graph, env: dict[Var, Tensor], captures: dict[Var, Var]) -> Graph:
    numbering = derived.Numbering()
    body_keys = numbering.keys(body)
    start = {captures.get(t._var, t._var): body_keys[v] for v, t in env.items() if not t.is_concrete}
    return numbering.reuse_saved(graph, start)


def _known(body: Graph, residuals, n_out: int) -> dict[Var, Tensor]:
    """Body Vars the recomputation need not compute: the residuals, and the values that
    `checkpoint_name` merely renamed into them."""
    renamed = {n.outputs[0]: n.inputs[0] for n in body.nodes if n.op == "checkpoint_name"}
    inputs = set(body.inputs)
    known: dict[Var, Tensor] = {}
    for v, t in zip(body.outputs[n_out:], residuals):
        while v is not None and v not in inputs:
            known[v] = t
            v = renamed.get(v)
    return known


def _checkpoint_jvp(ts, *inputs, body: Graph, saved, policy, prevent_cse=True, differentiated=False, **_):
    # The tangent of a checkpoint is the checkpointed JVP of its body: one block over the inputs
    # and their tangents (a saved input's tangent is saved too; a capture's is captured). The
    # JVP of a backward block is one too: it keeps nothing for a later VJP, so its body (which
    # may hold a gradient that has no VJP, a binomial scan's) is not differentiated to choose.

    explicit = [inputs[i] for i in saved] + [ts[i] for i in saved if ts[i] is not None]

    def jvp_body(*xs):
        prim, tans, rest = list(inputs), list(ts), iter(xs[len(saved) :])
        for k, i in enumerate(saved):
            prim[i] = xs[k]
            tans[i] = None if ts[i] is None else next(rest)
        outs, touts = jvp_graph(body, prim, tans)
        return outs, instantiate(touts, body.outputs)

    if isinstance(prevent_cse, tuple):  # the tangents of the explicit inputs are tied, as in JAX
        prevent_cse = prevent_cse + (True,) * (len(explicit) - len(saved))
    moving = any(t is not None for t in ts)  # else vmap re-emits the block (vectorize.py)
    if (differentiated or moving) and current_trace() is not None:
        # A JVP block's policy stays out of its loops and branches: linearize splits a JVP loop
        # into its primal and tangent parts, which a step checkpointed as one block would tie.
        call = _Call(jvp_body, tuple(explicit), {}, set())
        outs, touts = _traced_call(call, policy, prevent_cse, differentiated=differentiated, reach=False)
    else:
        outs, touts = checkpoint(jvp_body, *explicit, policy=policy, prevent_cse=prevent_cse)
    return outs, instantiate(touts, body.outputs, none=True)


def _prune(node: Node, live: set[Var]) -> Node:
    """The block without the outputs nobody reads, the work only they needed and the inputs it
    then no longer reads. A backward block computes the cotangent of every input and the caller
    often wants few (grad with respect to `x` needs no weight gradients). Residuals stay:
    whether a gradient will read them is not known yet."""
    p = node.params
    body = p["body"]
    n_out = len(body.outputs) - p.get("num_residuals", 0)
    keep = [k for k in range(len(body.outputs)) if k >= n_out or node.outputs[k] in live]
    if len(keep) == len(body.outputs):
        return node
    _, read = sub_graph(body, [], keep)
    ins = [i for i, v in enumerate(body.inputs) if v in read]
    new, _ = sub_graph(body, ins, keep)
    params = {**p, "body": new, "saved": tuple(ins.index(i) for i in p["saved"] if i in ins)}
    return Node(node.op, [node.inputs[i] for i in ins], [node.outputs[k] for k in keep], params, node.source)


def split_checkpoint(node: Node, unknown: set) -> tuple[Node, Node]:
    """A checkpoint reading tangents as two checkpoints: the known one computes the primal
    outputs and the body values its policy saves that the tangents need; the linear one
    recomputes everything else from the block's inputs and those saved values."""
    body, saved, policy = node.params["body"], node.params["saved"], node.params["policy"]
    n_out = len(body.outputs) - node.params.get("num_residuals", 0)
    known_pos = [i for i, v in enumerate(node.inputs) if v not in unknown]
    dep = {body.inputs[i] for i, v in enumerate(node.inputs) if v in unknown}
    primal_nodes, tangent_nodes = split_nodes(body.nodes, dep)
    kept = _saved_by_policy(primal_nodes, tangent_nodes, policies.resolve(policy))
    known_outs = [k for k in range(n_out) if body.outputs[k] not in dep]
    known_body = needed([body.inputs[i] for i in known_pos], [body.outputs[k] for k in known_outs] + kept,
                        primal_nodes, body.constants)
    residuals = [Var(v.shape, v.dtype) for v in kept]
    known = Node("checkpoint", [node.inputs[i] for i in known_pos], [node.outputs[k] for k in known_outs] + residuals,
                 {"body": known_body, "saved": tuple(known_pos.index(i) for i in saved if i in known_pos),
                  "policy": policy}, node.source)
    lin_outs = [k for k in range(n_out) if body.outputs[k] in dep]
    nodes = [n for n in body.nodes if not all(v in set(kept) for v in n.outputs)]
    lin_body = needed(list(body.inputs) + kept, [body.outputs[k] for k in lin_outs], nodes, body.constants)
    linear = Node("checkpoint", list(node.inputs) + residuals, [node.outputs[k] for k in lin_outs],
                  {"body": lin_body, "saved": saved, "policy": policy}, node.source)
    return known, linear


def _saved_by_policy(primal_nodes: list, tangent_nodes: list, chooser) -> list[Var]:
    """The primal values to keep: walking back from what the tangent nodes read, a value made
    by a node the policy saves is kept, any other is recomputed from its own inputs."""
    needed = {v for n in tangent_nodes for v in n.inputs}
    kept: list[Var] = []
    for node in reversed(primal_nodes):
        wanted = [v for v in node.outputs if v in needed]
        if wanted and policies.decide(chooser, node):
            kept = wanted + kept
        elif wanted:
            needed.update(node.inputs)
    return kept


_checkpoint = declare("checkpoint", _checkpoint_rule, _checkpoint_vjp, multiple_results=True,
                      jvp=BlockJVP(_checkpoint_jvp), batch=block_rule)
_checkpoint.prune = _prune
_checkpoint.partial_eval = split_checkpoint
_checkpoint.traits = frozenset({"inline"})
evaluator.register("checkpoint", evaluator.run_block, runs_graphs=True)
lowerings.register("checkpoint", "remat.backends.xla:run_block")


def _hoist_slices(node: Node) -> tuple[list[Node], Node]:
    """The slices the body takes of a captured tensor it reads only through slices (`W[i]`), as
    nodes outside the block on that tensor, and the block capturing the slices instead: what
    the backward pass differentiates, so that each block's gradient is its slice's (see
    `autodiff._slices_outside_blocks`)."""
    body, saved = node.params["body"], node.params["saved"]
    read_by = readers(body)
    outside, dropped, moved = [], set(), []
    for i, v in enumerate(body.inputs):
        rs = read_by.get(v, [])
        if i in saved or v in body.outputs or not only_sliced(rs):
            continue
        dropped.add(i)
        for n in rs:
            taken = Var(n.outputs[0].shape, n.outputs[0].dtype)
            outside.append(Node("slice", [node.inputs[i]], [taken], n.params, n.source))
            moved.append((n, taken))
    if not outside:
        return [], node
    kept = [i for i in range(len(body.inputs)) if i not in dropped]
    gone = {id(n) for n, _ in moved}
    new_body = Graph([body.inputs[i] for i in kept] + [n.outputs[0] for n, _ in moved], body.outputs,
                     [n for n in body.nodes if id(n) not in gone], body.constants)
    params = {**node.params, "body": new_body, "saved": tuple(kept.index(i) for i in saved)}
    inputs = [node.inputs[i] for i in kept] + [t for _, t in moved]
    return outside, Node(node.op, inputs, node.outputs, params, node.source)


_checkpoint.hoist_slices = _hoist_slices


def _without_residuals(node: Node, graph_reads: set) -> Node:
    """The block saving no residuals and reading only the inputs its body then reads; unless
    its graph reads one (`graph_reads`), when they all stay (see `forward._without_residuals`)."""
    params = dict(node.params)
    body, k = params["body"], params.pop("num_residuals", 0)
    if k and any(v in graph_reads for v in node.outputs[len(node.outputs) - k :]):
        params["num_residuals"], k = k, 0
    outs = body.outputs[: len(body.outputs) - k]
    live = needed(body.inputs, outs, body.nodes, body.constants)
    read = {v for n in live.nodes for v in n.inputs} | set(outs)
    ins = [i for i, v in enumerate(body.inputs) if v in read]
    params["body"] = Graph([body.inputs[i] for i in ins], outs, live.nodes, live.constants)
    params["saved"] = tuple(ins.index(i) for i in params["saved"] if i in ins)
    return Node(node.op, [node.inputs[i] for i in ins], node.outputs[: len(outs)], params, node.source)


_checkpoint.without_residuals = _without_residuals


def _bind_block(graph: Graph, explicit: list[Tensor], captured: list[Tensor], policy, guarantee: bool,
                prevent_cse: bool | tuple[bool, ...] = True, differentiated: bool = False,
                reach: bool = True) -> list[Tensor]:
    """Record `graph` as a checkpoint block on `explicit + captured`; its outputs (residuals left
    out). `prevent_cse`: a bool, or one flag per explicit input."""
    saved = tuple(range(len(explicit))) if explicit else tuple(range(len(captured)))
    captures = set(graph.inputs[len(explicit):]) if explicit else set()  # alive anyway: read directly
    graph, residuals = _residuals(graph, policies.resolve(policy), guarantee, captures, reach)
    if isinstance(prevent_cse, tuple) and (all(prevent_cse) or not any(prevent_cse)):
        prevent_cse = all(prevent_cse)
    # Params at their defaults are left out, so graphs print short.
    extra = {"num_residuals": len(residuals)} if residuals else {}
    extra.update({} if prevent_cse is True else {"prevent_cse": prevent_cse})
    extra.update({"differentiated": True} if differentiated else {})
    body = Graph(graph.inputs, graph.outputs + residuals, graph.nodes, graph.constants)
    outs = bind(_checkpoint, *explicit, *captured, body=body, saved=saved, policy=policy, **extra)
    return list(outs[: len(graph.outputs)])


# ---------------------------------------------------------------- what the block keeps


def _residuals(body: Graph, policy, guarantee: bool, captures: set[Var] = frozenset(),
               reach: bool = True) -> tuple[Graph, list[Var]]:
    """The body values to save: those the policy picks that the gradient needs, directly or to
    recompute an unsaved value it needs, among the body's values and those its derivative rules
    compute from primal values alone (then the body computes them too). With `guarantee`, if
    the block would keep more bytes than the plain gradient of its body does, what the plain
    gradient keeps; the captured inputs (`captures`, alive for the whole step anyway: weights)
    cost the block nothing. With `reach`, the policy reaches into the body's scans and conds
    (`Op.under_policy`, loops/policy_reach.py). Returns the body (rewritten, with those derivative values) and the
    residuals."""
    if policy is policies.nothing_saveable:
        if not guarantee:  # a backward block
            return body, []
        reached = {}
    else:
        body, reached = _reached(body, policy) if reach else (body, {})
    view = derived.gradient_view(body)
    # The replay shows a custom_vjp as fwd's code, so the policy sees fwd's names and ops, as in
    # JAX; but only fwd's outputs are values of the body, which the block can output.
    savable = set(view.body_of) | {v for n in view.derivable for v in n.outputs}

    # A loop or branch the policy reached into offers what it keeps for its gradient.
    chosen = [savable.intersection(_offered(n, reached) or (n.outputs if policies.decide(policy, n) else ()))
              for n in view.graph.nodes]
    residuals, inputs = _walk(view.graph, chosen, set(view.read))
    plain = view.plain_reads()
    free = {w for v, w in zip(body.inputs, view.graph.inputs) if v in captures}  # the view's Vars for them
    if guarantee and _nbytes(residuals + [v for v in inputs if v not in free]) > _nbytes(plain):
        return body, _walk(body, [set(n.outputs) for n in body.nodes], plain)[0]
    return derived.with_derived(body, view, residuals)


def _reached(body: Graph, policy: Callable) -> tuple[Graph, dict[int, int]]:
    """`body` with the blocks the policy reaches into rewritten by their `under_policy`, and for
    each rewritten node (by the id of its first sub-graph) how many outputs it had before: those
    after are the residuals it outputs for its gradient."""
    nodes, reached = [], {}
    for node in body.nodes:
        before, reach = len(node.outputs), OPS[node.op].under_policy
        if reach is not None:
            node = reach(node, policy)
        if len(node.outputs) > before:
            reached[id(node.subgraphs()[0])] = before
        nodes.append(node)
    if not reached:
        return body, {}
    return Graph(body.inputs, body.outputs, nodes, body.constants), reached


def _offered(node: Node, reached: dict[int, int]) -> tuple[Var, ...]:
    """The outputs of a node `_reached` rewrote that hold its residuals (none for other nodes)."""
    subs = node.subgraphs()
    before = reached.get(id(subs[0])) if subs else None
    return () if before is None else tuple(node.outputs[before:])


def _nbytes(vs) -> int:
    return sum(v.nbytes for v in set(vs))


def _walk(body: Graph, chosen: list[set[Var]], needed: set[Var]) -> tuple[list[Var], list[Var]]:
    """(residuals, inputs read): walks backwards from what the body's VJP reads; a needed value
    a chosen node makes is saved, any other is recomputed from its node's inputs."""
    inputs = set(body.inputs) | set(body.constants)
    provided: set[Var] = set()
    residuals: list[Var] = []
    for node, save in zip(reversed(body.nodes), reversed(chosen)):
        if node.op == "checkpoint_name":  # its input and its output are one value
            src, dst = node.inputs[0], node.outputs[0]
            if dst in provided or save and src not in inputs and (dst in needed or src in needed):
                residuals += [] if dst in provided else [dst]
                provided.update((src, dst))
                continue
        wanted = [v for v in node.outputs if v in needed and v not in provided]
        kept = [v for v in wanted if v in save]
        residuals += kept
        provided.update(kept)
        if len(kept) < len(wanted):
            needed.update(node.inputs)
    order = {v: i for i, v in enumerate(v for n in body.nodes for v in n.outputs)}
    return sorted(residuals, key=order.__getitem__), [v for v in body.inputs if v in needed]


# ---------------------------------------------------------------- the public API


def checkpoint(fn: Callable, *args, policy=None, static_argnums=(), prevent_cse: bool | Sequence = True, **kwargs):
    """Run `fn(*args, **kwargs)` as a checkpoint block: its gradient recomputes the body instead of
    keeping its intermediate values. Tensors among `args` and `kwargs` are the explicit inputs
    (they get gradients); tensors `fn` reads from enclosing scope are captured; other values
    (numbers, strings, None, and the arguments at `static_argnums`) reach `fn` as they are, so
    Python code may branch on them. Non-tensor leaves `fn` returns (numbers, None) come back as
    they are. `prevent_cse=False` leaves the barrier out of the gradient (see docs/checkpointing.md);
    a sequence gives a flag per positional argument (static ones left out), each a bool or a
    pytree of bools shaped like its argument, as `jax.checkpoint` takes it: the arguments
    flagged False reach the recomputation without passing the barrier.

    Called outside any trace, `fn` is traced once per signature and the program reused.

    >>> import remat as rm
    >>> w = rm.asarray([[2.0]])
    >>> f = lambda x: rm.sum(rm.checkpoint(lambda h, scale: scale * rm.tanh(h @ w), x, scale=1.0))
    >>> rm.grad(f)(rm.asarray([[0.0]]))
    Tensor([[2.]], dtype=float32)
    """
    argcheck.check_callable(fn, "checkpoint", "body")
    policies.resolve(policy)
    _check_prevent_cse(prevent_cse, "checkpoint")
    nums = argcheck.argnums(static_argnums, "checkpoint", fn, "static_argnums")
    static = set(argcheck.resolve(nums, len(args), "checkpoint", "static_argnums", static_argnums, fn))
    _check_arity(fn, args, kwargs)
    call = _Call(fn, args, kwargs, static)
    flags = _cse_flags(prevent_cse, call, "checkpoint")
    if current_trace() is None:
        return checkpoint_cache.run_eagerly(call)
    return _traced_call(call, policy, flags)


class _Call:
    """`fn(*args, **kwargs)` split into its array leaves (the explicit inputs) and the rest."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, static: set[int]):
        self.fn, self.args, self.static = fn, args, static
        dynamic = [a for i, a in enumerate(args) if i not in static]
        self.arrays = tree.partition((dynamic, kwargs), is_array)
        self.outputs: tree.Partition | None = None  # the body's result, once traced

    @property
    def name(self) -> str:
        return f"checkpoint({callable_name(self.fn)})"

    def body(self, *xs) -> list:
        """The function of the explicit inputs that is traced: the body's array outputs."""
        dynamic, kwargs = self.arrays.rebuild(xs)
        it = iter(dynamic)
        full = [self.args[i] if i in self.static else next(it) for i in range(len(self.args))]
        self.outputs = _split_outputs(self.fn, self.fn(*full, **kwargs))
        return self.outputs.picked

    def result(self, outs) -> object:
        return self.outputs.rebuild(outs)


def _traced_call(call: _Call, policy, prevent_cse: bool | tuple[bool, ...], differentiated: bool = False,
                 reach: bool = True):
    explicit = [asarray(x) for x in call.arrays.picked]
    traced = trace_function(call.body, explicit, name=call.name)
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in traced.captured]
    _warn_unknown_names(policies.resolve(policy), traced.graph)
    # Vectorized axes are plain axes in the block.
    outs = _bind_block(traced.graph, [e._raw() for e in explicit], captured, policy, not differentiated, prevent_cse,
                       differentiated, reach)
    return call.result(traced.wrap_outputs(outs))


def _split_outputs(fn: Callable, out) -> tree.Partition:
    """The body's result: array leaves become block outputs; Python numbers and None stay as
    they are (a block output would only make them constants)."""
    parts = tree.partition(out, lambda x: not isinstance(x, (bool, int, float, complex)))
    for leaf in parts.picked:
        if not (is_array(leaf) or isinstance(leaf, np.generic)):
            raise ArgumentTypeError(
                f"checkpoint: the body {callable_name(fn)} returned a {type(leaf).__name__}; "
                "a checkpoint body must return a pytree of tensors (Python numbers and None pass through)"
            )
    return parts


def _check_prevent_cse(value, where: str) -> None:
    if isinstance(value, (tuple, list)):
        leaves = tree.leaves(value)
        if all(isinstance(b, (bool, np.bool_)) for b in leaves):
            return
    elif isinstance(value, (bool, np.bool_)):
        return
    raise ArgumentTypeError(f"{where}: prevent_cse must be True, False or a sequence of them (one per argument), "
                            f"got {argcheck.short_repr(value)}")


def _cse_flags(prevent_cse, call: _Call, where: str) -> bool | tuple[bool, ...]:
    """`prevent_cse` as the block takes it: a bool, or one flag per explicit input (a leaf of the
    tensor arguments), from a sequence with one bool or pytree of bools per non-static
    positional argument (a prefix of the arguments' pytree, as in JAX)."""
    if not isinstance(prevent_cse, (tuple, list)):
        return bool(prevent_cse)
    dynamic = [a for i, a in enumerate(call.args) if i not in call.static]
    if len(prevent_cse) != len(dynamic):
        raise ArgumentValueError(f"{where}: prevent_cse has {len(prevent_cse)} flags for {len(dynamic)} arguments "
                                 "(static ones left out); give one bool, or a pytree of bools, per argument")
    if any(is_array(x) for x in tree.leaves(call.arrays.rebuild(call.arrays.picked)[1])):
        raise ArgumentValueError(f"{where}: prevent_cse as a sequence covers the positional arguments; pass the "
                                 "tensors given by keyword positionally, or prevent_cse=True/False")
    flags = []
    for arg, flag in zip(dynamic, prevent_cse):
        arrays = [x for x in tree.leaves(arg) if is_array(x)]
        if isinstance(flag, (bool, np.bool_)):
            flags += [bool(flag)] * len(arrays)
            continue
        leaves, structure = tree.flatten(arg)
        given, shape = tree.flatten(flag)
        if structure != shape:
            raise ArgumentValueError(f"{where}: a prevent_cse flag of structure {shape!r} does not match its argument, "
                                     f"of structure {structure!r}")
        flags += [bool(f) for x, f in zip(leaves, given) if is_array(x)]
    return tuple(flags)


def _warn_unknown_names(policy, body: Graph) -> None:
    """A policy naming values that the body never names (a typo, or a name given in another
    block) saves nothing it was meant to, or everything: say so rather than run silently."""
    parts = policies.names_in(policy)  # save_from_both_policies may hold name policies
    if not parts:
        return
    namers = [n for n in body.nodes if n.op == "checkpoint_name"]
    namers += [m for n in body.nodes for m in named_outputs(n).values()]  # a custom_vjp's fwd names too
    present = sorted({n.params["name"] for n in namers})
    for policy in parts:
        _warn_missing(policy, present)


def _warn_missing(policy, present: list[str]) -> None:
    missing = [n for n in policy.names if n not in present]
    if missing:
        warnings.warn(policies.UnusedNameWarning(
            f"checkpoint: policy {policy!r} names {', '.join(map(repr, missing))}, but no value in the "
            f"checkpoint body has {'that name' if len(missing) == 1 else 'those names'} (names in the body: "
            f"{', '.join(map(repr, present)) or 'none'}); tag values with rm.checkpoint_name(x, name)"
            f"{at_source(user_source())}"
        ), stacklevel=5)


def remat(fn: Callable | None = None, policy=None, *, static_argnums=(),
          prevent_cse: bool | Sequence = True) -> Callable:
    """Decorator form of `checkpoint`: the function's arguments are its inputs. Also a decorator
    factory: `@rm.remat(policy=...)`.

    >>> import remat as rm
    >>> @rm.remat(policy=rm.policies.dots_saveable)
    ... def layer(h, scale=1.0):
    ...     return scale * rm.tanh(h)
    >>> layer(rm.asarray(0.0), scale=2.0)
    Tensor(0., dtype=float32)
    """
    policies.resolve(policy, "remat")  # a bad setting fails here, not at the first call
    _check_prevent_cse(prevent_cse, "remat")
    if fn is None:
        argcheck.argnums(static_argnums, "remat", None, "static_argnums")
        return functools.partial(remat, policy=policy, static_argnums=static_argnums, prevent_cse=prevent_cse)
    argcheck.check_callable(fn, "remat", "body")
    argcheck.argnums(static_argnums, "remat", fn, "static_argnums")

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        return checkpoint(fn, *args, policy=policy, static_argnums=static_argnums, prevent_cse=prevent_cse,
                          **kwargs)

    return wrapped


def checkpoint_sequential(functions, segments: int, x, *, policy=None, prevent_cse: bool = True):
    """`x` through `functions` in order, as `torch.utils.checkpoint.checkpoint_sequential` runs
    them: cut into `segments` runs of `len(functions) // segments`, each but the last a checkpoint
    block; the last run (with whatever the division leaves over) runs plainly, since its values
    are needed at once by the backward pass.

    >>> import remat as rm
    >>> layers = [rm.sin, rm.tanh, rm.exp, rm.sin]
    >>> y = rm.checkpoint_sequential(layers, 2, rm.ones(3))  # checkpoint(sin, tanh), then exp, sin
    >>> y.shape
    (3,)
    """
    fns = _functions(functions)
    if not argcheck.is_int(segments) or isinstance(segments, bool):
        raise ArgumentTypeError(f"checkpoint_sequential: segments must be an int, got {argcheck.short_repr(segments)}")
    if not 1 <= segments <= len(fns):
        raise ArgumentValueError(
            f"checkpoint_sequential: segments={segments} is not between 1 and the number of functions, "
            f"{len(fns)}; pass segments <= len(functions)")
    size, end = len(fns) // segments, 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        x = checkpoint(_chain(fns[start:end]), x, policy=policy, prevent_cse=prevent_cse)
    return _chain(fns[end:])(x)


def _functions(functions) -> list:
    try:
        fns = list(functions)
    except TypeError:
        raise ArgumentTypeError(f"checkpoint_sequential: functions must be a sequence of callables, got "
                                f"{argcheck.describe(functions)}") from None
    for k, fn in enumerate(fns):
        argcheck.check_callable(fn, "checkpoint_sequential", f"at functions[{k}]")
    return fns


def _chain(fns: list) -> Callable:
    def run(x):
        for fn in fns:
            x = fn(x)
        return x

    run.__name__ = "+".join(callable_name(fn) for fn in fns)
    return run


def _check_arity(fn: Callable, args: tuple, kwargs: dict) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call speak for itself
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        # keywords reach the body; these two were meant for remat
        misplaced("checkpoint", kwargs.get("memory_budget"), kwargs.get("strategy"))
        given = f"{len(args)} inputs" + (f" and keywords {', '.join(map(repr, kwargs))}" if kwargs else "")
        raise ArgumentTypeError(f"checkpoint: {callable_name(fn)} cannot be called with {given}: {e}") from None
