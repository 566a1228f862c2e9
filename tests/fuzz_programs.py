"""Differential fuzzing: random remat programs checked against the same programs in JAX.

A program is a function of its seed. `generate(seed)` draws a small recipe — statements over
float64 inputs with nested blocks: checkpoints with explicit inputs, with none, with tensors
captured from enclosing scopes (and captures of captures), under every policy; `rm.remat`;
`rm.vmap` over part of the program or over all of it; `rm.custom_vjp`; loops (`rm.scan` over a
stacked input or a length, under each `checkpoint=` schedule; `rm.fori_loop`; `rm.while_loop`
with a bounded trip count) and branches (`rm.cond`, `rm.switch`, with predicates that vmap
makes batched) — and renders it twice, as remat code and as jax.numpy code with
`jax.checkpoint`, `jax.vmap`, `jax.custom_vjp`, `jax.lax.scan`/`fori_loop`/`while_loop`/`cond`/
`switch` where remat has its blocks. `check(program)` runs the remat rendering eagerly and under
`rm.jit` on the NumPy and the XLA backends and compares with JAX in float64: the loss, its
gradient with respect to several inputs, for some programs a second-order gradient (the
gradient of a directional derivative, or the JVP of the gradient), and for some forward mode
and Jacobians of the loss's terms (`rm.jvp`, `rm.linearize`, `rm.jacrev` against `jax.jvp` and
`jax.jacrev`). A program with a while loop is checked in forward mode only (neither library
differentiates a while loop in reverse).

The generator keeps every value inside a known interval, so no op meets a point where it is
undefined or ill-conditioned: `log`, `sqrt`, division and `pow` see operands bounded away from
zero, `exp` moderate ones, and large values are scaled down before they can grow further; a
loop's carry is a contraction (half of it plus half a tanh), so it stays in [-1, 1] and where it
started. The one exception is deliberate: a branch guarded by its predicate (`sqrt(x - g)` taken
only where `min(x) > g + 0.1`) is NaN where it is not taken, which a batched predicate evaluates
and must neither show nor differentiate. Sorted values are made free of ties (offsets one apart
decide their order), so their gradient is defined. Agreement is then expected to float64
rounding: RTOL and ATOL below.

    python tests/fuzz_programs.py --count 10000 --start 0   # a campaign, with a progress count
    python tests/fuzz_programs.py --seed 17                  # print one program and check it
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import math
import re
import sys
import time
import traceback
import unittest.mock
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name as jax_checkpoint_name

import remat as rm

# ATOL: a gradient that cancels to exactly zero through ill-conditioned ops (two layer norms of a
# constant row amplify by 1/eps = 1e5: seed 7979) keeps ~5e-12 of float64 rounding, in JAX too.
RTOL, ATOL = 1e-9, 1e-11
MAX_SIZE = 48  # elements per value: programs stay small, so checking them stays fast
MAX_DIM = 4
MAX_DEPTH = 3  # blocks inside blocks
MAX_INPUTS = 5
MAX_STATEMENTS = 24
TAME = 50.0  # operands of growing ops are scaled down beyond this magnitude
NAMES = ("a", "b", "c")  # checkpoint_name tags

# ---------------------------------------------------------------- the recipe


@dataclasses.dataclass
class Val:
    """A value of the program being generated: its name, shape and an interval holding it."""

    name: str
    shape: tuple[int, ...]
    lo: float
    hi: float
    scope: Scope
    used: bool = False  # read by a later statement (unused values become outputs)
    levels: frozenset = frozenset()  # the vmaps it is batched by (some, at least: enough to know it is)

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass
class Stmt:
    """`out = <expression>`, written once per language."""

    out: str
    remat: str
    jax: str


@dataclasses.dataclass
class Block:
    """A nested function `body` and the statement(s) that call it as a block of `kind`."""

    kind: str  # checkpoint | remat | vmap | custom_vjp | jit
    style: str  # how the body is called: call | noinput | tuple | partial
    outs: list[str]
    args: list[str]
    body: Body
    options: dict


@dataclasses.dataclass
class Body:
    name: str
    params: list[str]
    stmts: list
    outs: list[str]
    names: set[str] = dataclasses.field(default_factory=set)  # checkpoint_name tags it uses
    signature: list[str] | None = None  # a loop's or a branch's `def` parameters, when not `params`
    head: list[str] = dataclasses.field(default_factory=list)  # lines before the statements: unpacking
    ret: dict[str, str] | None = None  # the return expression per language, when not `outs`


@dataclasses.dataclass
class Flow:
    """A loop or a branch: its bodies as nested `def`s, then `target = call`, per language."""

    kind: str  # scan | fori_loop | while_loop | cond | switch
    target: str
    bodies: list[Body]
    call: dict[str, str]


@dataclasses.dataclass
class Scope:
    """Where statements are being generated: the top level or a block's body."""

    kind: str  # top | checkpoint | remat | vmap | custom_vjp | jit | scan | fori_loop | while_loop | cond | switch
    parent: Scope | None
    size_limit: int
    closed: bool = False  # reads nothing from outside (a NaN-guarded branch: see `Generator.branches`)
    vals: list[Val] = dataclasses.field(default_factory=list)
    stmts: list = dataclasses.field(default_factory=list)
    names: set[str] = dataclasses.field(default_factory=set)  # checkpoint_name tags used here

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    @property
    def sealed(self) -> bool:
        """A custom_vjp body may read no traced tensor from outside: it sees its own values only."""
        return self.kind == "custom_vjp" or self.closed

    def visible(self) -> list[Val]:
        outer = [] if self.sealed or self.parent is None else self.parent.visible()
        return outer + self.vals

    def distance(self, v: Val) -> int:
        """How many block boundaries lie between this scope and where `v` was made."""
        s, n = self, 0
        while s is not v.scope:
            s, n = s.parent, n + 1
        return n


@dataclasses.dataclass
class Program:
    seed: int
    input_names: list[str]
    inputs: list[np.ndarray]
    body: Body  # the loss's terms: its statements, then each output weighted by `weights` and summed
    weights: list[np.ndarray]
    argnums: int | tuple[int, ...]
    in_axes: tuple | None  # vmap over the whole program: per-example losses and gradients
    directions: list[np.ndarray] | None  # second order: grad of <grad, directions>
    branches: bool  # XLA's lowering of backward blocks: conditionals (the CPU's) or inline (accelerators')
    features: frozenset[str]
    tangents: list[np.ndarray] | None = None  # forward mode: one per input
    forward: frozenset[str] = frozenset()  # of jvp, linearize (of the terms, with `tangents`), jacrev
    reverse: bool = True  # value and gradients; False: the value and forward mode only (a while loop)
    hvp: bool = False  # second order as the JVP of the gradient along `directions` (forward over reverse)

    @property
    def diff(self) -> tuple[int, ...]:
        return (self.argnums,) if isinstance(self.argnums, int) else self.argnums

    def source(self, lang: str) -> str:
        """The loss function as `lang` ("remat" or "jax") code: `terms`, the weighted sums of its
        outputs (what forward mode and Jacobians are taken of), and `loss`, their sum."""
        params = ", ".join(self.input_names)
        lines = [f"def terms({params}):", *_render_stmts(self.body.stmts, lang, "    ")]
        ns = "rm" if lang == "remat" else "jnp"
        terms = [f"{ns}.sum({o} * {_const(w)})" for o, w in zip(self.body.outs, self.weights)]
        lines += [f"    return ({', '.join(terms)},)", "", "", f"def loss({params}):",
                  f"    return sum(terms({params}))"]
        return "\n".join(lines) + "\n"

    def script(self) -> str:
        """A standalone remat script: the inputs, the loss and what the checker computes from it,
        printed eagerly and under rm.jit on each backend."""
        head = [f"# remat fuzz program, seed {self.seed} ({', '.join(sorted(self.features))})",
                "import functools", "import unittest.mock", "", "import numpy as np", "", "import remat as rm", ""]
        inputs = [f"{n} = {_const(x)}" for n, x in zip(self.input_names, self.inputs)]
        if self.directions is not None:
            inputs.append(f"directions = [{', '.join(_const(d) for d in self.directions)}]")
        if self.tangents is not None:
            inputs.append(f"tangents = ({', '.join(_const(t) for t in self.tangents)},)")
        args = ", ".join(self.input_names)
        f = "everything" if self.in_axes is None else f"rm.vmap(everything, in_axes={self.in_axes!r})"
        return "\n".join(head + inputs + ["", self.source("remat"), "", *self._everything(args), "",
                                          *self._calls(f, args)]) + "\n"

    def _everything(self, args: str) -> list[str]:
        """The checker's computation (`_transforms`) as remat code."""
        lines = [f"def everything({args}):  # what the checker compares with JAX", "    out = {}"]
        if self.reverse:
            lines.append(f"    out['value'], out['grad'] = rm.value_and_grad(loss, {self.argnums!r})({args})")
        else:
            lines.append(f"    out['value'] = loss({args})")
        if self.directions is not None and self.hvp:
            it = iter(range(len(self.diff)))
            ts = [f"directions[{next(it)}]" if i in self.diff else f"rm.zeros_like({n})"
                  for i, n in enumerate(self.input_names)]
            lines.append(f"    out['d2'] = rm.jvp(rm.grad(loss, {self.diff!r}), ({args},), ({', '.join(ts)},))[1]"
                         "  # forward over reverse")
        elif self.directions is not None:
            lines += ["", "    def phi(*ys):  # <the gradient, directions>",
                      f"        grads = rm.grad(loss, {self.diff!r})(*ys)",
                      "        return sum(rm.sum(g * d) for g, d in zip(grads, directions))", "",
                      f"    out['d2'] = rm.grad(phi, {self.diff!r})({args})"]
        if "jvp" in self.forward:
            lines.append(f"    out['jvp'] = rm.jvp(terms, ({args},), tangents)")
        if "linearize" in self.forward:
            lines += [f"    y, f_jvp = rm.linearize(terms, {args})", "    out['linearize'] = (y, f_jvp(*tangents))"]
        if "jacrev" in self.forward:
            lines.append(f"    out['jacrev'] = rm.jacrev(terms, {self.argnums!r})({args})")
        return lines + ["    return out"]

    def _calls(self, f: str, args: str) -> list[str]:
        on_xla = f"print(rm.jit({f}, backend='xla')({args}))"
        if not self.branches:  # backward blocks inline, as on accelerators
            on_xla = f"with unittest.mock.patch('remat.backends.xla.default_branches', lambda: False):\n    {on_xla}"
        return [f"print({f}({args}))  # eager", f"print(rm.jit({f}, backend='numpy')({args}))", on_xla]


def _render_stmts(stmts: list, lang: str, indent: str) -> list[str]:
    lines: list[str] = []
    for s in stmts:
        if isinstance(s, Stmt):
            lines.append(f"{indent}{s.out} = {getattr(s, lang)}")
        elif isinstance(s, Flow):
            lines += [line for b in s.bodies for line in _render_def(b, lang, indent)]
            lines.append(f"{indent}{s.target} = {s.call[lang]}")
        else:
            lines += _render_block(s, lang, indent)
    return lines


def _render_def(body: Body, lang: str, indent: str) -> list[str]:
    """A loop's or a branch's body: `def`, unpacking, statements, return."""
    ret = body.ret[lang] if body.ret else body.outs[0] if len(body.outs) == 1 else ", ".join(body.outs)
    return [f"{indent}def {body.name}({', '.join(body.signature or body.params)}):",
            *(f"{indent}    {line}" for line in body.head), *_render_stmts(body.stmts, lang, indent + "    "),
            f"{indent}    return {ret}"]


_POLICIES = {
    "none": (None, None),
    "nothing": ("rm.policies.nothing_saveable", "jax.checkpoint_policies.nothing_saveable"),
    "everything": ("rm.policies.everything_saveable", "jax.checkpoint_policies.everything_saveable"),
    "dots": ("rm.policies.dots_saveable", "jax.checkpoint_policies.dots_saveable"),
    "only": ("rm.policies.save_only_these_names({})", "jax.checkpoint_policies.save_only_these_names({})"),
    "but": ("rm.policies.save_any_names_but_these({})", "jax.checkpoint_policies.save_any_names_but_these({})"),
}


def _policy(block: Block, lang: str) -> str | None:
    text = _POLICIES[block.options["policy"]][lang == "jax"]
    return None if text is None else text.format(", ".join(map(repr, block.options.get("names", ()))))


def _render_block(b: Block, lang: str, indent: str) -> list[str]:
    """The body as a nested `def`, then the statement calling it as a block."""
    ns, body = ("rm" if lang == "remat" else "jax"), b.body
    params, unpack = list(body.params), []
    if b.style == "tuple":  # the first two explicit inputs travel as one tuple
        params = [f"t_{body.name}"] + params[2:]
        unpack = [f"{indent}    {body.params[0]}, {body.params[1]} = t_{body.name}"]
    policy = _policy(b, lang) if b.kind in ("checkpoint", "remat") else None
    lines = []
    if b.kind == "remat":
        lines.append(f"{indent}@{ns}.remat" if policy is None else
                     f"{indent}@functools.partial({ns}.remat, policy={policy})")
    lines += [f"{indent}def {body.name}({', '.join(params)}):", *unpack,
              *_render_stmts(body.stmts, lang, indent + "    "),
              f"{indent}    return {body.outs[0] if len(body.outs) == 1 else '(' + ', '.join(body.outs) + ')'}"]
    if b.kind == "custom_vjp":  # the VJP is the body's own, recomputed from the saved inputs
        c, f = f"c_{body.name}", body.name
        lines += [f"{indent}{c} = {ns}.custom_vjp({f})",
                  f"{indent}{c}.defvjp(lambda *xs: ({f}(*xs), xs), lambda xs, g: {ns}.vjp({f}, *xs)[1](g))"]
    return lines + [f"{indent}{', '.join(b.outs)} = {_call(b, lang, policy)}"]


def _call(b: Block, lang: str, policy: str | None) -> str:
    ns, fn, args = ("rm" if lang == "remat" else "jax"), b.body.name, list(b.args)
    if b.style == "tuple":
        args = [f"({args[0]}, {args[1]})"] + args[2:]
    if b.style == "partial":  # the first input is bound by functools.partial: a capture
        fn, args = f"functools.partial({fn}, {args[0]})", args[1:]
    kw = "" if policy is None else f", policy={policy}"
    if b.kind == "checkpoint" and lang == "remat":
        return f"rm.checkpoint({', '.join([fn] + args)}{kw})"
    fn = {"checkpoint": f"jax.checkpoint({fn}{kw})", "remat": fn, "custom_vjp": f"c_{fn}",
          "jit": f"{ns}.jit({fn})",  # inlined under a trace; run on the NumPy backend when eager
          "vmap": f"{ns}.vmap({fn}, in_axes={b.options.get('in_axes')!r}, out_axes={b.options.get('out_axes')!r})",
          }[b.kind]
    return f"{fn}({', '.join(args)})"


def _const(a: np.ndarray) -> str:
    return f"np.array({a.tolist()!r})"


# ---------------------------------------------------------------- the generator


def _broadcast(*shapes) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _matmul_shape(a: tuple, b: tuple) -> tuple[int, ...] | None:
    if not a or not b:
        return None
    a2, b2 = (a if len(a) > 1 else (1,) + a), (b if len(b) > 1 else b + (1,))
    if a2[-1] != b2[-2]:
        return None
    batch = _broadcast(a2[:-2], b2[:-2])
    if batch is None:
        return None
    return batch + (a2[-2],) * (len(a) > 1) + (b2[-1],) * (len(b) > 1)


def _hull(*vals) -> tuple[float, float]:
    return min(v.lo for v in vals), max(v.hi for v in vals)


def _products(a, b) -> tuple[float, float]:
    p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return min(p), max(p)


class Generator:
    """Draws one program from `seed`. Every choice goes through `self.rng`."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.ids = itertools.count()
        self.features: set[str] = set()
        self.per_example = self.chance(0.2)
        self.batch = int(self.rng.integers(2, 4)) if self.per_example else 1
        self.top = Scope("top", None, MAX_SIZE // self.batch)
        self.scope = self.top
        self.inputs: list[Val] = []
        self.arrays: list[np.ndarray] = []
        self.in_axes: list = []
        self.statements = 0
        # A while loop has no reverse mode, and JAX no forward mode through a custom_vjp: a program
        # is checked in forward mode only (and may have while loops, no custom_vjp), or not.
        self.forward_only = self.chance(0.12)
        self.custom_vjp = False
        self.no_second = False  # a binomial scan: its gradient is not differentiated again

    # ------------------------------------------------------------ random choices

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def weighted(self, table: dict):
        keys = list(table)
        p = np.array([table[k] for k in keys], float)
        return keys[int(self.rng.choice(len(keys), p=p / p.sum()))]

    def name(self, prefix: str = "v") -> str:
        return f"{prefix}{next(self.ids)}"

    def shape(self, limit: int | None = None) -> tuple[int, ...]:
        limit = limit or self.scope.size_limit
        while True:
            rank = self.choice([0, 1, 1, 2, 2, 2, 3, 3])
            s = tuple(int(self.rng.choice([1, 2, 2, 3, 3, 4])) for _ in range(rank))
            if math.prod(s) <= limit:
                return s

    def values(self, shape, lo=-1.5, hi=1.5) -> np.ndarray:
        # Four decimals: the printed program is short and exactly the one that ran.
        return np.round(self.rng.uniform(lo, hi, shape), 4)

    # ------------------------------------------------------------ values

    def emit(self, remat: str, jax_: str, shape, lo: float, hi: float) -> Val:
        names = set(_NAME.findall(remat))
        levels = frozenset().union(*(w.levels for w in self.scope.visible() if w.name in names))
        v = Val(self.name(), tuple(shape), float(lo), float(hi), self.scope, levels=levels)
        self.scope.stmts.append(Stmt(v.name, remat, jax_))
        self.scope.vals.append(v)
        return v

    def same(self, template: str, *args: Val, shape, lo, hi, **kw) -> Val:
        """A statement written once: `{np}` is rm or jnp, `{nn}` rm.nn or jax.nn."""
        names = [a.name if isinstance(a, Val) else a for a in args]
        r = template.format(*names, np="rm", nn="rm.nn", **kw)
        j = template.format(*names, np="jnp", nn="jax.nn", **kw)
        return self.emit(r, j, shape, lo, hi)

    def new_input(self, shape) -> Val:
        """A new argument of the program (made at the top level, so blocks capture it)."""
        v = Val(f"x{len(self.inputs)}", tuple(shape), 0.0, 0.0, self.top)
        axis = None
        if self.per_example:  # the first input is always mapped
            axis = 0 if not self.inputs else self.choice([0, -1, None, None])
            if axis == -1 and not shape:
                axis = 0
        full = list(shape)
        if axis is not None:
            full.insert(axis if axis >= 0 else len(full), self.batch)
            v.levels = frozenset({"program"})
        x = self.values(tuple(full))
        v.lo, v.hi = float(x.min()), float(x.max())
        self.inputs.append(v)
        self.arrays.append(x)
        self.in_axes.append(axis)
        self.top.vals.insert(len(self.inputs) - 1, v)
        return v

    def fresh(self, shape) -> Val:
        """An operand of `shape`: a new input where one can be read, else a constant."""
        shape = tuple(shape)
        s = self.scope
        while s is not None and not s.sealed:
            s = s.parent
        if s is None and len(self.inputs) < MAX_INPUTS and self.chance(0.7):
            return self.new_input(shape)
        x = self.values(shape, -1.0, 1.0)
        # JAX wants its own arrays as constants: a NumPy one captured by a custom_vjp inside
        # vmap inside checkpoint trips its "non-canonical constant" assertion.
        return self.emit(_const(x), f"jnp.asarray({_const(x)})", shape, x.min(), x.max())

    def pick(self, pred: Callable[[Val], bool] = lambda v: True) -> Val | None:
        """A visible value satisfying `pred`, recent ones and the block's own ones first."""
        own = [v for v in self.scope.vals if pred(v)]
        seen = [v for v in self.scope.visible() if pred(v)]
        if not seen:
            return None
        pool = own if own and self.chance(0.5) else seen
        v = self.choice(pool[-3:]) if self.chance(0.5) else self.choice(pool)
        v.used = True
        d = self.scope.distance(v)
        if d:
            self.features.add(f"capture in {self.scope.kind}")
        if d >= 2:
            self.features.add("capture of a capture")
        return v

    def operand(self, pred: Callable[[Val], bool] = lambda v: True, shape=None) -> Val:
        v = self.pick(pred)
        if v is None:
            v = self.fresh(shape if shape is not None else self.shape())
        return self.tame(v)

    def tame(self, v: Val) -> Val:
        """`v`, scaled down first when it is large enough for products and exp to overflow
        or lose precision."""
        if v.mag <= TAME:
            return v
        if self.chance(0.5):
            return self.same("{np}.tanh({0})", v, shape=v.shape, lo=math.tanh(v.lo), hi=math.tanh(v.hi))
        k = 10.0 ** -math.ceil(math.log10(v.mag))
        return self.same("{0} * {k!r}", v, k=k, shape=v.shape, lo=v.lo * k, hi=v.hi * k)

    def positive(self, v: Val) -> Val:
        """`v` or a function of it bounded below by 0.05: what log, sqrt, / and pow need."""
        if v.lo >= 0.05:
            return v
        v = self.tame(v)
        sq = v.mag**2
        options = [("{0} * {0} + 0.5", 0.5, sq + 0.5), ("1.5 + {np}.sin({0})", 0.5, 2.5),
                   ("{np}.exp({np}.tanh({0}))", math.exp(-1), math.e), ("{nn}.sigmoid({0}) + 0.25", 0.25, 1.25),
                   ("{np}.sqrt({0} * {0} + 1.0)", 1.0, math.sqrt(sq + 1))]
        if -3 <= v.lo and v.hi <= 4:
            options.append(("{np}.exp({0})", math.exp(v.lo), math.exp(v.hi)))
        t, lo, hi = self.choice(options)
        return self.same(t, v, shape=v.shape, lo=lo, hi=hi)

    def fits(self, shape) -> bool:
        return shape is not None and math.prod(shape) <= self.scope.size_limit

    # ------------------------------------------------------------ statements

    def statement(self) -> Val | None:
        self.statements += 1
        kinds = {"unary": 4, "binary": 5, "matmul": 2.5, "reduce": 2, "shape": 3.5, "index": 2,
                 "nn": 2.5, "special": 0.7, "sort": 0.8}
        if self.scope.kind in ("cond", "switch", "vmap"):  # sorts and reductions under a batched branch
            kinds.update(reduce=3.5, sort=2.5)
        if self.scope.depth < MAX_DEPTH and self.statements < MAX_STATEMENTS - 3:
            kinds["block"] = 7 if self.scope.depth == 0 else 4
        if self.scope.kind in ("checkpoint", "remat"):
            kinds["name"] = 3
        for _ in range(20):
            v = getattr(self, "gen_" + self.weighted(kinds))()
            if v is not None:
                return v
        raise RuntimeError("no statement fits")  # unreachable: unary always fits

    def gen_unary(self) -> Val:
        v = self.operand()
        op = self.weighted({"neg": 1, "abs": 1, "exp": 1.5, "log": 1.5, "log1p": 1, "sqrt": 1,
                            "square": 1, "sin": 1, "cos": 1, "tanh": 1.5, "sign": 0.3, "clip": 1,
                            "ipow": 1, "stop": 0.4, "method": 0.5})
        s = v.shape
        if op == "neg":
            return self.same(self.choice(["-{0}", "{np}.negative({0})"]), v, shape=s, lo=-v.hi, hi=-v.lo)
        if op == "abs":
            lo = 0.0 if v.lo <= 0 <= v.hi else min(abs(v.lo), abs(v.hi))
            return self.same(self.choice(["abs({0})", "{np}.abs({0})"]), v, shape=s, lo=lo, hi=v.mag)
        if op == "exp":
            if v.hi > 4 or v.lo < -30:
                v = self.same("{np}.tanh({0})", v, shape=s, lo=math.tanh(v.lo), hi=math.tanh(v.hi))
            return self.same("{np}.exp({0})", v, shape=s, lo=math.exp(v.lo), hi=math.exp(v.hi))
        if op in ("log", "sqrt"):
            v = self.positive(v)
            f = math.log if op == "log" else math.sqrt
            return self.same(f"{{np}}.{op}({{0}})", v, shape=s, lo=f(v.lo), hi=f(v.hi))
        if op == "log1p":
            v = self.positive(v)
            return self.same("{np}.log1p({0})", v, shape=s, lo=math.log1p(v.lo), hi=math.log1p(v.hi))
        if op == "square":
            lo = 0.0 if v.lo <= 0 <= v.hi else min(v.lo**2, v.hi**2)
            return self.same("{np}.square({0})", v, shape=s, lo=lo, hi=v.mag**2)
        if op in ("sin", "cos"):
            return self.same(f"{{np}}.{op}({{0}})", v, shape=s, lo=-1, hi=1)
        if op == "tanh":
            return self.same("{np}.tanh({0})", v, shape=s, lo=math.tanh(v.lo), hi=math.tanh(v.hi))
        if op == "sign":
            return self.same("{np}.sign({0})", v, shape=s, lo=-1, hi=1)
        if op == "clip":
            a, b = sorted(np.round(self.rng.uniform(-1.2, 1.2, 2), 3).tolist())
            which = self.choice(["both", "min", "max"])
            args = {"both": f"{a!r}, {b!r}", "min": f"min={a!r}", "max": f"max={b!r}"}[which]
            lo = max(v.lo, a) if which != "max" else v.lo
            hi = min(v.hi, b) if which != "min" else v.hi
            lo, hi = (min(lo, hi), max(lo, hi))
            return self.same(f"{{np}}.clip({{0}}, {args})", v, shape=s, lo=lo, hi=hi)
        if op == "ipow":  # an integer power: any sign of base
            k = self.choice([2, 3])
            lo = -(v.mag**k) if k == 3 else 0.0
            return self.same(f"{{0}} ** {k}", v, shape=s, lo=lo, hi=v.mag**k)
        if op == "stop":
            self.features.add("stop_gradient")
            return self.emit(f"rm.stop_gradient({v.name})", f"jax.lax.stop_gradient({v.name})", s, v.lo, v.hi)
        # a method: .T, .sum(), .mean(), .reshape(...)
        if v.ndim >= 2 and self.chance(0.4):
            return self.same("{0}.T", v, shape=s[::-1], lo=v.lo, hi=v.hi)
        if v.ndim >= 1 and self.chance(0.5):
            m = self.choice(["sum", "mean"])
            n = v.shape[-1] if m == "sum" else 1
            return self.same(f"{{0}}.{m}(axis=-1)", v, shape=s[:-1], lo=min(v.lo * n, v.lo), hi=max(v.hi * n, v.hi))
        return self.same("{0}.reshape(-1)", v, shape=(v.size,), lo=v.lo, hi=v.hi)

    def partner(self, a: Val) -> Val:
        """An operand that broadcasts against `a` (an existing value when one fits)."""
        if self.chance(0.6):
            b = self.pick(lambda v: v is not a and self.fits(_broadcast(v.shape, a.shape)))
            if b is not None:
                return self.tame(b)
        keep = int(self.rng.integers(0, a.ndim + 1))
        s = [1 if self.chance(0.25) else n for n in a.shape[a.ndim - keep :]]
        s = [self.choice([2, 3]) if n == 1 and self.chance(0.3) else n for n in s]
        if self.chance(0.15):
            s.insert(0, self.choice([2, 3]))
        if not self.fits(_broadcast(tuple(s), a.shape)):
            s = list(a.shape)
        return self.fresh(tuple(s))

    def gen_binary(self) -> Val:
        a = self.operand()
        op = self.weighted({"add": 2, "sub": 1.5, "mul": 2, "div": 1.5, "pow": 1, "max": 1, "min": 1,
                            "where": 1.5})
        form = self.weighted({"tensor": 3, "scalar": 1})
        if op == "where":
            return self.gen_where(a)
        if form == "scalar":
            return self.binary_scalar(a, op)
        b = self.partner(a)
        swap = self.chance(0.3)
        if op == "div":
            b = self.positive(b)
            lo, hi = _products(a, Val("", (), 1 / b.hi, 1 / b.lo, self.scope))
        elif op == "pow":
            a, swap = self.positive(a), False
            if b.mag > 2:
                b = self.same("{np}.tanh({0})", b, shape=b.shape, lo=math.tanh(b.lo), hi=math.tanh(b.hi))
            corners = [x**y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
            lo, hi = min(corners), max(corners)
        elif op in ("add", "sub"):
            lo, hi = (a.lo + b.lo, a.hi + b.hi) if op == "add" else (a.lo - b.hi, a.hi - b.lo)
            if op == "sub" and swap:
                lo, hi = -hi, -lo
        elif op == "mul":
            lo, hi = _products(a, b)
        else:
            f = max if op == "max" else min
            lo, hi = f(a.lo, b.lo), f(a.hi, b.hi)
        if op in ("div", "pow"):
            swap = False
        x, y = (b, a) if swap else (a, b)
        shape = _broadcast(a.shape, b.shape)
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**"}.get(op)
        fn = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "pow",
              "max": "maximum", "min": "minimum"}[op]
        if sym and self.chance(0.6):
            return self.same(f"{{0}} {sym} {{1}}", x, y, shape=shape, lo=lo, hi=hi)
        return self.same(f"{{np}}.{fn}({{0}}, {{1}})", x, y, shape=shape, lo=lo, hi=hi)

    def binary_scalar(self, a: Val, op: str) -> Val:
        """`a` with a Python number, which takes `a`'s dtype (a weak scalar)."""
        c = self.choice([0.5, 1.5, 2.0, -0.75, 3, 0.1, -2, 0.3])
        s = a.shape
        if op == "div":
            if self.chance(0.5):
                p = self.positive(a)
                return self.same(f"{c!r} / {{0}}", p, shape=s, lo=min(c / p.lo, c / p.hi), hi=max(c / p.lo, c / p.hi))
            return self.same(f"{{0}} / {c!r}", a, shape=s, lo=min(a.lo / c, a.hi / c), hi=max(a.lo / c, a.hi / c))
        if op == "pow":
            p = self.positive(a)
            e = self.choice([0.5, 1.5, -1, -0.5, 2.5, 2])
            vals = [p.lo**e, p.hi**e]
            return self.same(f"{{0}} ** {e!r}", p, shape=s, lo=min(vals), hi=max(vals))
        if op in ("max", "min"):
            f = max if op == "max" else min
            return self.same(f"{{np}}.{'maximum' if op == 'max' else 'minimum'}({{0}}, {c!r})", a, shape=s,
                             lo=f(a.lo, c), hi=f(a.hi, c))
        sym = {"add": "+", "sub": "-", "mul": "*"}[op]
        vals = [a.lo + c, a.hi + c] if op == "add" else [a.lo - c, a.hi - c, c - a.lo, c - a.hi] if op == "sub" \
            else [a.lo * c, a.hi * c]
        if self.chance(0.5):
            return self.same(f"{c!r} {sym} {{0}}", a, shape=s, lo=min(vals), hi=max(vals))
        return self.same(f"{{0}} {sym} {c!r}", a, shape=s, lo=min(vals), hi=max(vals))

    def gen_where(self, a: Val) -> Val:
        b = self.partner(a) if self.chance(0.7) else None
        branches = [a, b] if b is not None else [a]
        c = self.choice(branches)
        t = float(np.round(self.rng.uniform(c.lo, c.hi) if c.hi > c.lo else c.lo, 3))
        cond = self.choice([f"{c.name} > {t!r}", f"{c.name} < {t!r}", f"{{np}}.less({c.name}, {t!r})",
                            f"{{np}}.logical_not({c.name} >= {t!r})",
                            f"{{np}}.logical_or({c.name} < {t!r}, {c.name} > {t + 0.5!r})",
                            f"{{np}}.logical_and({c.name} > {t - 0.5!r}, {c.name} < {t!r})"])
        if b is None:
            z = self.choice([0.0, 1.0])
            lo, hi = min(a.lo, z), max(a.hi, z)
            if self.chance(0.5):
                return self.same(f"{{np}}.where({cond}, {{0}}, {z!r})", a, shape=a.shape, lo=lo, hi=hi)
            return self.same(f"{{np}}.where({cond}, {z!r}, {{0}})", a, shape=a.shape, lo=lo, hi=hi)
        return self.same(f"{{np}}.where({cond}, {{0}}, {{1}})", a, b, shape=_broadcast(a.shape, b.shape),
                         lo=min(a.lo, b.lo), hi=max(a.hi, b.hi))

    def gen_matmul(self) -> Val:
        if self.chance(0.25):
            return self.gen_tensordot()
        a = self.operand(lambda v: v.ndim >= 1, shape=self.shape()[:2] or (3,))
        if a.ndim == 0:
            return None
        right = self.chance(0.75)  # a @ b, else b @ a
        fits = (lambda v: self.fits(_matmul_shape(a.shape, v.shape))) if right else \
               (lambda v: self.fits(_matmul_shape(v.shape, a.shape)))
        b = self.pick(lambda v: v.ndim >= 1 and fits(v)) if self.chance(0.6) else None
        if b is None:
            k = a.shape[-1] if right else a.shape[-2] if a.ndim >= 2 else a.shape[0]
            n = int(self.rng.integers(1, 5))
            shape = self.choice([(k, n), (k, n), (k,)]) if right else self.choice([(n, k), (k,)])
            if not (fits(Val("", shape, 0, 0, self.scope))):
                return None
            b = self.fresh(shape)
        b = self.tame(b)
        x, y = (a, b) if right else (b, a)
        k = x.shape[-1]
        m = k * x.mag * y.mag
        return self.same(self.choice(["{0} @ {1}", "{np}.matmul({0}, {1})"]), x, y,
                         shape=_matmul_shape(x.shape, y.shape), lo=-m, hi=m)

    def gen_tensordot(self) -> Val | None:
        a = self.operand(lambda v: v.ndim >= 1)
        if a.ndim == 0:
            return None
        n = int(self.rng.integers(1, min(a.ndim, 2) + 1))
        if self.chance(0.5):  # axes as an int: a's last n against b's first n
            b = self.pick(lambda v: v.shape[:n] == a.shape[a.ndim - n:] and
                          self.fits(a.shape[:a.ndim - n] + v.shape[n:]))
            if b is None:
                extra = self.choice([(), (2,), (3,)])
                if not self.fits(a.shape[:a.ndim - n] + extra):
                    return None
                b = self.fresh(a.shape[a.ndim - n:] + extra)
            b = self.tame(b)
            shape, axes = a.shape[:a.ndim - n] + b.shape[n:], repr(n)
            k = math.prod(a.shape[a.ndim - n:])
        else:  # one axis of a against one axis of b, as ([i], [j]), maybe negative
            i = int(self.rng.integers(a.ndim))
            b = self.pick(lambda v: a.shape[i] in v.shape)
            if b is None:
                b = self.fresh(self.choice([(a.shape[i],), (a.shape[i], 2), (3, a.shape[i])]))
            b = self.tame(b)
            j = self.choice([d for d in range(b.ndim) if b.shape[d] == a.shape[i]])
            shape = a.shape[:i] + a.shape[i + 1:] + b.shape[:j] + b.shape[j + 1:]
            if not self.fits(shape):
                return None
            ii = i - a.ndim if self.chance(0.3) else i
            axes, k = f"([{ii}], [{j}])", a.shape[i]
        m = k * a.mag * b.mag
        return self.same(f"{{np}}.tensordot({{0}}, {{1}}, axes={axes})", a, b, shape=shape, lo=-m, hi=m)

    def axes_arg(self, ndim: int, allow_none=True):
        """A reduction's `axis`: None, an int or a tuple, sometimes negative."""
        options = ["int", "tuple"] if ndim >= 2 else ["int"]
        if allow_none:
            options.append("none")
        kind = self.choice(options) if ndim else "none"
        if kind == "none":
            return None, tuple(range(ndim))
        if kind == "int":
            a = int(self.rng.integers(ndim))
            return (a - ndim if self.chance(0.3) else a), (a,)
        axes = sorted(self.rng.choice(ndim, size=2, replace=False).tolist())
        return tuple(a - ndim if self.chance(0.3) else a for a in axes), tuple(axes)

    def gen_reduce(self) -> Val:
        v = self.operand()
        op = self.weighted({"sum": 3, "mean": 2, "prod": 1, "max": 1.5, "min": 1, "logsumexp": 1.5})
        axis, axes = self.axes_arg(v.ndim)
        keep = self.chance(0.3)
        n = math.prod(v.shape[a] for a in axes)
        if op == "prod" and (n > 4 or v.mag > 1.6):
            op = "sum"
        shape = tuple(1 if i in axes else d for i, d in enumerate(v.shape)) if keep else \
            tuple(d for i, d in enumerate(v.shape) if i not in axes)
        lo, hi = {"sum": (min(v.lo * n, v.lo), max(v.hi * n, v.hi)), "mean": (v.lo, v.hi),
                  "prod": (-(max(v.mag, 1) ** n), max(v.mag, 1) ** n), "max": (v.lo, v.hi), "min": (v.lo, v.hi),
                  "logsumexp": (v.lo, v.hi + math.log(n))}[op]
        args = f"axis={axis!r}" + (", keepdims=True" if keep else "")
        fn = "{nn}.logsumexp" if op == "logsumexp" else f"{{np}}.{op}"
        self.features.add("reduction")
        return self.same(f"{fn}({{0}}, {args})", v, shape=shape, lo=lo, hi=hi)

    def gen_shape(self) -> Val | None:
        v = self.operand()
        op = self.weighted({"reshape": 2, "permute": 1.5, "transpose": 0.7, "mT": 0.7, "expand": 1,
                            "squeeze": 1, "broadcast": 1.5, "concat": 1.5, "stack": 1, "flip": 1, "pad": 1,
                            "slice": 0.7})
        s, lo, hi = v.shape, v.lo, v.hi
        if op == "reshape":
            shape = self.factor(v.size)
            target = list(shape)
            if target and self.chance(0.3):
                target[int(self.rng.integers(len(target)))] = -1
            return self.same(f"{{np}}.reshape({{0}}, {tuple(target)!r})", v, shape=shape, lo=lo, hi=hi)
        if op == "permute" and v.ndim >= 2:
            perm = self.rng.permutation(v.ndim).tolist()
            shown = tuple(p - v.ndim if self.chance(0.2) else p for p in perm)
            # jnp.permute_dims rejects negative axes; remat takes them (as jnp.transpose does)
            return self.emit(f"rm.permute_dims({v.name}, {shown!r})", f"jnp.permute_dims({v.name}, {tuple(perm)!r})",
                             tuple(s[p] for p in perm), lo, hi)
        if op == "transpose" and v.ndim >= 2:
            return self.same("{np}.transpose({0})", v, shape=s[::-1], lo=lo, hi=hi)
        if op == "mT" and v.ndim >= 2:
            return self.same("{np}.matrix_transpose({0})", v, shape=s[:-2] + (s[-1], s[-2]), lo=lo, hi=hi)
        if op == "expand" and v.ndim < 4:
            a = int(self.rng.integers(-v.ndim - 1, v.ndim + 1))
            shape = list(s)
            shape.insert(a if a >= 0 else v.ndim + 1 + a, 1)
            return self.same(f"{{np}}.expand_dims({{0}}, {a})", v, shape=shape, lo=lo, hi=hi)
        if op == "squeeze" and 1 in s:
            ones = [i for i, d in enumerate(s) if d == 1]
            axis = self.choice([None, ones[0], ones[-1] - v.ndim, tuple(ones)])
            drop = ones if axis is None or isinstance(axis, tuple) else [axis % v.ndim]
            shape = tuple(d for i, d in enumerate(s) if i not in drop)
            return self.same(f"{{np}}.squeeze({{0}}, axis={axis!r})", v, shape=shape, lo=lo, hi=hi)
        if op == "broadcast":
            shape = [self.choice([2, 3]) if d == 1 and self.chance(0.7) else d for d in s]
            if self.chance(0.5) or shape == list(s):
                shape.insert(0, self.choice([1, 2, 3]))
            if not self.fits(shape) or len(shape) > 4:
                return None
            return self.same(f"{{np}}.broadcast_to({{0}}, {tuple(shape)!r})", v, shape=shape, lo=lo, hi=hi)
        if op == "concat" and v.ndim >= 1:
            a = int(self.rng.integers(v.ndim))
            like = lambda w: w.ndim == v.ndim and all(w.shape[i] == s[i] for i in range(v.ndim) if i != a)  # noqa: E731
            parts = [v]
            for _ in range(int(self.rng.integers(1, 3))):
                w = self.pick(like) if self.chance(0.6) else None
                if w is None:
                    shape = list(s)
                    shape[a] = int(self.rng.integers(1, 4))
                    w = self.fresh(shape)
                parts.append(w)
            self.rng.shuffle(parts)
            shape = list(s)
            shape[a] = sum(w.shape[a] for w in parts)
            if not self.fits(shape):
                return None
            names = "[" + ", ".join(w.name for w in parts) + "]"
            lo, hi = _hull(*parts)
            shown = a - v.ndim if self.chance(0.3) else a
            return self.same(f"{{np}}.concat({names}, axis={shown})", shape=shape, lo=lo, hi=hi)
        if op == "stack":
            k = int(self.rng.integers(1, 3))
            parts = [v] + [self.pick(lambda w: w.shape == s) or self.fresh(s) for _ in range(k)]
            a = int(self.rng.integers(-v.ndim - 1, v.ndim + 1))
            shape = list(s)
            shape.insert(a if a >= 0 else v.ndim + 1 + a, len(parts))
            if not self.fits(shape):
                return None
            lo, hi = _hull(*parts)
            names = "[" + ", ".join(w.name for w in parts) + "]"
            return self.same(f"{{np}}.stack({names}, axis={a})", shape=shape, lo=lo, hi=hi)
        if op == "flip":
            axis, _ = self.axes_arg(v.ndim)
            return self.same(f"{{np}}.flip({{0}}, axis={axis!r})", v, shape=s, lo=lo, hi=hi)
        if op == "pad" and v.ndim >= 1:
            cfg = [(int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3)), int(self.chance(0.3))) for _ in s]
            shape = tuple(d + a + b + max(d - 1, 0) * i for d, (a, b, i) in zip(s, cfg))
            if not self.fits(shape):
                return None
            lows, highs, inner = (tuple(c[k] for c in cfg) for k in range(3))
            return self.emit(f"rm.pad({v.name}, {lows!r}, {highs!r}, {inner!r})",
                             f"jax.lax.pad({v.name}, np.float64(0), {tuple(cfg)!r})", shape, min(lo, 0), max(hi, 0))
        if op == "slice" and v.ndim >= 1:
            start = tuple(int(self.rng.integers(0, d)) for d in s)
            stop = tuple(int(self.rng.integers(a + 1, d + 1)) for a, d in zip(start, s))
            step = tuple(int(self.rng.integers(1, 3)) for _ in s)
            shape = tuple(len(range(a, b, c)) for a, b, c in zip(start, stop, step))
            return self.emit(f"rm.slice({v.name}, {start!r}, {stop!r}, {step!r})",
                             f"jax.lax.slice({v.name}, {start!r}, {stop!r}, {step!r})", shape, lo, hi)
        return None

    def factor(self, size: int) -> tuple[int, ...]:
        """A random shape with `size` elements."""
        dims = []
        rest = size
        for _ in range(int(self.rng.integers(0, 4))):
            divisors = [d for d in range(1, rest + 1) if rest % d == 0]
            d = self.choice(divisors)
            dims.append(d)
            rest //= d
        if rest > 1 or not dims and size != 1:
            dims.append(rest)
        self.rng.shuffle(dims)
        return tuple(dims)

    def gen_index(self) -> Val | None:
        v = self.operand(lambda w: w.ndim >= 1)
        if v.ndim == 0:
            return None
        op = self.weighted({"basic": 3, "array": 1.5, "take": 1.5, "index_add": 1, "argmax": 0.7})
        if op == "basic":
            return self.basic_index(v)
        if op == "array":
            return self.array_index(v)
        if op == "take":
            axis = self.choice([None] + list(range(v.ndim)) + [-1])
            n = v.size if axis is None else v.shape[axis]
            idx = self.rng.integers(-n, n, size=self.choice([(2,), (3,), (2, 2), ()]))
            shape = (np.empty(v.shape)).take(idx, axis=axis).shape if axis is not None else idx.shape
            if not self.fits(shape):
                return None
            return self.same(f"{{np}}.take({{0}}, {_const(idx)}, axis={axis!r})", v, shape=shape, lo=v.lo, hi=v.hi)
        if op == "index_add":
            axis = int(self.rng.integers(v.ndim))
            n = v.shape[axis]
            idx = self.rng.integers(-n, n, size=self.choice([(2,), (3,)]))
            ushape = v.shape[:axis] + idx.shape + v.shape[axis + 1:]
            if not self.fits(ushape):
                return None
            u = self.tame(self.pick(lambda w: w.shape == ushape) or self.fresh(ushape))
            reps = max(np.bincount(idx % n))
            lo, hi = v.lo + reps * min(u.lo, 0), v.hi + reps * max(u.hi, 0)
            at = ":, " * axis + _const(idx)
            return self.emit(f"rm.index_add({v.name}, {_const(idx)}, {u.name}, axis={axis})",
                             f"jnp.asarray({v.name}).at[{at}].add({u.name})", v.shape, lo, hi)
        # A traced index: the argmax of another value, which takes from `v` along an axis.
        w = self.pick(lambda w: w.ndim >= 1 and w is not v)
        if w is None:
            return None
        wa = int(self.rng.integers(w.ndim))
        axis = self.choice([a for a in range(v.ndim) if v.shape[a] >= w.shape[wa]] or [None])
        if axis is None:
            return None
        ishape = w.shape[:wa] + w.shape[wa + 1:]
        shape = v.shape[:axis] + ishape + v.shape[axis + 1:]
        if not self.fits(shape):
            return None
        self.features.add("traced index")
        return self.same(f"{{np}}.take({{0}}, {{np}}.argmax({{1}}, axis={wa}), axis={axis})", v, w,
                         shape=shape, lo=v.lo, hi=v.hi)

    def basic_index(self, v: Val) -> Val | None:
        items: list = []
        for n in v.shape:
            r = self.rng.random()
            if r < 0.3:
                items.append(int(self.rng.integers(-n, n)))
            elif r < 0.75:
                step = self.choice([None, None, 2, -1, -2])
                a = self.choice([None, int(self.rng.integers(-n, n))])
                b = self.choice([None, int(self.rng.integers(-n, n + 1))])
                sl = slice(a, b, step)
                if not len(range(*sl.indices(n))):
                    sl = slice(None, None, step)
                items.append(sl)
            else:
                items.append(slice(None))
        if self.chance(0.3):
            items.insert(int(self.rng.integers(len(items) + 1)), None)
        if self.chance(0.25):
            k = int(self.rng.integers(len(items) + 1))
            j = int(self.rng.integers(k, len(items) + 1))
            items[k:j] = [Ellipsis]
        # Behind an Ellipsis the items align with the trailing axes: dropping one would shift them.
        while items and items[-1] == slice(None) and Ellipsis not in items and self.chance(0.7):
            items.pop()
        shape = np.empty(v.shape)[tuple(items)].shape
        if 0 in shape:
            return None
        text = ", ".join(_index_text(i) for i in items) if items else "..."
        return self.same(f"{{0}}[{text}]", v, shape=shape, lo=v.lo, hi=v.hi)

    def array_index(self, v: Val) -> Val | None:
        """One integer array along one axis, with ints and slices elsewhere (NumPy's rules:
        an int separated from the array moves the array's axes first)."""
        at = int(self.rng.integers(v.ndim))
        items: list = []
        for i, n in enumerate(v.shape):
            if i == at:
                items.append(self.rng.integers(-n, n, size=self.choice([(2,), (3,), (2, 2), (1,)])))
            elif self.chance(0.3):
                items.append(int(self.rng.integers(-n, n)))
            else:
                items.append(slice(None))
        shape = np.empty(v.shape)[tuple(items)].shape
        if not self.fits(shape):
            return None
        text = ", ".join(_const(i) if isinstance(i, np.ndarray) else _index_text(i) for i in items)
        return self.same(f"{{0}}[{text}]", v, shape=shape, lo=v.lo, hi=v.hi)

    def gen_nn(self) -> Val | None:
        v = self.operand()
        op = self.weighted({"relu": 1, "gelu": 1, "sigmoid": 1, "softmax": 1.5, "log_softmax": 1.5,
                            "layer_norm": 1.5, "cross_entropy": 0.8, "dropout": 0.8})
        s = v.shape
        if op == "relu":
            return self.same("{nn}.relu({0})", v, shape=s, lo=max(v.lo, 0), hi=max(v.hi, 0))
        if op == "gelu":
            return self.emit(f"rm.nn.gelu({v.name})", f"jax.nn.gelu({v.name}, approximate=True)", s,
                             min(-0.2, v.lo), max(v.hi, 0))
        if op == "sigmoid":
            return self.same("{nn}.sigmoid({0})", v, shape=s, lo=0, hi=1)
        if v.ndim == 0:
            return None
        if op in ("softmax", "log_softmax"):
            axis, axes = self.axes_arg(v.ndim, allow_none=False)
            n = math.prod(v.shape[a] for a in axes)
            spread = v.hi - v.lo
            lo, hi = (math.exp(-spread) / n, 1.0) if op == "softmax" else (-spread - math.log(n), 0.0)
            return self.same(f"{{nn}}.{op}({{0}}, axis={axis!r})", v, shape=s, lo=lo, hi=hi)
        if op == "layer_norm":
            axis, axes = self.axes_arg(v.ndim, allow_none=False)
            if axes != tuple(range(v.ndim - len(axes), v.ndim)):
                axis, axes = -1, (v.ndim - 1,)
            n = math.prod(v.shape[a] for a in axes)
            tail = v.shape[v.ndim - len(axes):]
            g = self.tame(self.fresh(tail)) if self.chance(0.6) else None
            b = self.tame(self.fresh(tail)) if self.chance(0.5) else None
            m = math.sqrt(n) * (g.mag if g else 1) + (b.mag if b else 0)
            gn, bn = (g.name if g else "None"), (b.name if b else "None")
            return self.emit(f"rm.nn.layer_norm({v.name}, {gn}, {bn}, axis={axis!r})",
                             f"ref_layer_norm({v.name}, {gn}, {bn}, axis={axis!r})", s, -m, m)
        if op == "cross_entropy":
            labels = self.rng.integers(0, s[-1], size=s[:-1])
            spread = v.hi - v.lo
            return self.emit(f"rm.nn.cross_entropy({v.name}, {_const(labels)})",
                             f"ref_cross_entropy({v.name}, {_const(labels)})", (), 0.0, spread + math.log(s[-1]))
        # dropout: the mask is remat's (a function of the key); JAX applies the same mask
        key, rate = int(self.rng.integers(100)), self.choice([0.25, 0.5])
        mask = np.asarray(rm.random.bernoulli(rm.random.key(key), 1.0 - rate, s))
        k = 1.0 / (1.0 - rate)
        self.features.add("dropout")
        return self.emit(f"rm.nn.dropout(rm.random.key({key}), {v.name}, {rate!r})",
                         f"jnp.where({_const(mask)}, {v.name} * {k!r}, 0.0)", s, min(v.lo * k, 0), max(v.hi * k, 0))

    def gen_special(self) -> Val:
        """Odd corners: the same tensor twice in one op, a no-op cast, tensors created inside
        the program (constants of the trace, vectorized when they meet vectorized values)."""
        v = self.operand()
        kind = self.choice(["twice", "twice", "cast", "like", "create"])
        if kind == "twice":
            template, lo, hi = self.choice([("{0} * {0}", 0.0, v.mag**2), ("{np}.maximum({0}, {0})", v.lo, v.hi),
                                            ("{0} - {0}", 0.0, 0.0)])
            return self.same(template, v, shape=v.shape, lo=lo, hi=hi)
        if kind == "cast":
            return self.emit(f"rm.astype({v.name}, 'float64')", f"{v.name}.astype('float64')", v.shape, v.lo, v.hi)
        if kind == "like":
            f, c = self.choice([("ones_like", 1.0), ("zeros_like", 0.0)])
            return self.same(f"{{np}}.{f}({{0}})", v, shape=v.shape, lo=c, hi=c)
        n, m = (int(k) for k in self.rng.integers(1, 5, size=2))
        shape = self.shape()
        c = self.choice([0.5, -1.25, 2.0])
        template, shape, lo, hi = self.choice([
            (f"{{np}}.full({shape!r}, {c!r}, dtype='float64')", shape, c, c),
            (f"{{np}}.arange({n}, dtype='float64')", (n,), 0.0, n - 1.0),
            (f"{{np}}.eye({n}, {m}, dtype='float64')", (n, m), 0.0, 1.0),
            (f"{{np}}.ones({shape!r}, dtype='float64') * {{0}}", _broadcast(shape, v.shape), v.lo, v.hi)])
        if not self.fits(shape):
            return None
        self.features.add("created tensors")
        return self.same(template, v, shape=shape, lo=min(lo, 0) if "eye" in template else lo, hi=hi)

    def gen_name(self) -> Val:
        v = self.operand()
        tag = self.choice(NAMES)
        self.scope.names.add(tag)
        return self.emit(f"rm.checkpoint_name({v.name}, {tag!r})", f"checkpoint_name({v.name}, {tag!r})",
                         v.shape, v.lo, v.hi)

    # ------------------------------------------------------------ blocks

    def gen_block(self) -> Val | None:
        batched = any(v.levels for v in self.scope.visible())
        kind = self.weighted({"checkpoint": 5, "remat": 1.5, "vmap": 2.5, "custom_vjp": 0 if self.forward_only else 1,
                              "jit": 0.7, "scan": 2.5, "fori_loop": 1, "while_loop": 2.5 if self.forward_only else 0,
                              "cond": 3 if batched else 1.5, "switch": 2.5 if batched else 1})
        if kind in ("vmap", "scan", "fori_loop", "while_loop"):
            return getattr(self, "gen_" + kind)()
        if kind in ("cond", "switch"):
            return self.branches(kind)
        self.custom_vjp |= kind == "custom_vjp"
        style = "call"
        n = int(self.rng.integers(1, 4))
        if kind == "checkpoint":
            style = self.weighted({"call": 5, "noinput": 2, "tuple": 1, "partial": 1})
            n = 0 if style == "noinput" else max(n, 2) if style in ("tuple", "partial") else n
        if kind == "custom_vjp":
            n = min(n, 2)
        args = [self.operand() for _ in range(n)]
        if n >= 2 and self.chance(0.1):
            args[1] = args[0]  # the same tensor as two explicit inputs
        body, outs = self.body(kind, args, [a.shape for a in args], self.scope.size_limit)
        options = {"policy": "none"}
        if kind in ("checkpoint", "remat"):
            choices = {"none": 3, "nothing": 1, "everything": 1.5, "dots": 2}
            if body.names:
                choices.update({"only": 3, "but": 1.5})
            options["policy"] = self.weighted(choices)
            if options["policy"] in ("only", "but"):
                names = sorted(body.names)
                options["names"] = tuple(sorted(self.rng.choice(names, size=int(self.rng.integers(1, len(names) + 1)),
                                                                replace=False).tolist()))
            self.features.add(f"policy {options['policy']}")
        self.features.add(f"{kind} {style}")
        if self.scope.depth:
            self.features.add(f"{kind} inside {self.scope.kind}")
        return self.finish_block(kind, style, args, body, outs, options)

    def body(self, kind: str, args: list[Val], shapes: list, limit: int, levels=None):
        """Generate a block's body in a new scope; returns (Body, its output Vals)."""
        parent = self.scope
        self.scope = scope = Scope(kind, parent, limit)
        levels = levels or [a.levels for a in args]
        params = [Val(self.name("p"), tuple(s), a.lo, a.hi, scope, levels=lv) for a, s, lv in zip(args, shapes, levels)]
        scope.vals += params
        for _ in range(int(self.rng.integers(1, 5))):
            self.statement()
        outs = [scope.vals[-1]]
        unused = [v for v in scope.vals[:-1] if not v.used and v not in params]
        if unused and self.chance(0.6):  # so that fewer statements are dead code
            outs.append(unused[-1])
        elif self.chance(0.2):  # any visible value: a parameter, a capture, the first output again
            outs.append(self.choice(scope.visible()))
            if outs[1] in params or outs[1].scope is not scope:
                self.features.add("block returns an input or a capture")
        self.scope = parent
        return Body(self.name("b"), [p.name for p in params], scope.stmts, [o.name for o in outs], scope.names), outs

    def finish_block(self, kind, style, args, body, outs, options, out_shapes=None, level=None) -> Val:
        results = [Val(self.name(), tuple(s), o.lo, o.hi, self.scope, levels=o.levels - {level})
                   for o, s in zip(outs, out_shapes or [o.shape for o in outs])]
        self.scope.stmts.append(Block(kind, style, [r.name for r in results], [a.name for a in args], body, options))
        self.scope.vals += results
        return results[0]

    def gen_vmap(self) -> Val | None:
        first = self.operand(lambda v: v.ndim >= 1, shape=self.shape()[:1] or (2,))
        if first.ndim == 0:
            return None
        ax = int(self.rng.integers(first.ndim))
        n = first.shape[ax]
        args, axes = [first], [ax - first.ndim if self.chance(0.3) else ax]
        for _ in range(int(self.rng.integers(0, 2))):
            w = self.operand()
            same = [i for i, d in enumerate(w.shape) if d == n]
            args.append(w)
            axes.append(self.choice(same) if same and self.chance(0.6) else None)
        inner = [tuple(d for i, d in enumerate(a.shape) if i != (x % a.ndim)) if x is not None else a.shape
                 for a, x in zip(args, axes)]
        level = self.name("vmap")
        levels = [a.levels | {level} if x is not None else a.levels for a, x in zip(args, axes)]
        body, outs = self.body("vmap", args, inner, max(1, self.scope.size_limit // n), levels)
        out_axes = [int(self.rng.integers(-o.ndim - 1, o.ndim + 1)) for o in outs]
        shapes = []
        for o, a in zip(outs, out_axes):
            s = list(o.shape)
            s.insert(a if a >= 0 else o.ndim + 1 + a, n)
            shapes.append(s)
        in_axes = axes[0] if len(args) == 1 and self.chance(0.5) else tuple(axes)
        out_spec = out_axes[0] if len(outs) == 1 else tuple(out_axes)
        self.features.add("vmap")
        if self.scope.depth:
            self.features.add(f"vmap inside {self.scope.kind}")
        return self.finish_block("vmap", "call", args, body, outs, {"in_axes": in_axes, "out_axes": out_spec}, shapes,
                                 level)

    # ------------------------------------------------------------ loops and branches

    @contextlib.contextmanager
    def scoped(self, kind: str, limit: int, closed: bool = False):
        """Generate a loop's or a branch's body in a new scope."""
        parent, self.scope = self.scope, Scope(kind, self.scope, limit, closed)
        try:
            yield self.scope
        finally:
            self.scope = parent

    def param(self, shape, lo: float, hi: float, levels=frozenset()) -> Val:
        v = Val(self.name("p"), tuple(shape), float(lo), float(hi), self.scope, levels=frozenset(levels))
        self.scope.vals.append(v)
        return v

    def note(self, feature: str) -> None:
        self.features.add(feature)
        if self.scope.depth:
            self.features.add(f"{feature} inside {self.scope.kind}")

    def fill(self, least: int, most: int) -> None:
        for _ in range(int(self.rng.integers(least, most + 1))):
            self.statement()

    def flow(self, kind: str, bodies: list[Body], remat: str, jax_: str, results: list[Val], target: str) -> Val:
        self.scope.stmts.append(Flow(kind, target, bodies, {"remat": remat, "jax": jax_}))
        self.scope.vals += results
        return results[0]

    def carries(self, limit: int) -> list[Val]:
        """A loop's initial carries: one, or a pair (a tuple)."""
        n = 2 if self.chance(0.3) else 1
        if n == 2:
            self.features.add("loop carries a tuple")
        return [self.operand(lambda v: v.size <= limit, shape=self.shape(limit)) for _ in range(n)]

    def carry_params(self, inits: list[Val]) -> list[Val]:
        """The body's carries, in [-1, 1] and where they start: `update` keeps them there."""
        return [self.param(c.shape, min(c.lo, -1.0), max(c.hi, 1.0), c.levels) for c in inits]

    def update(self, c: Val) -> Val:
        """The carry's next value: half of it and half the tanh of a recent value of the body that
        broadcasts to it (of the mean of one, else). From [lo, hi] with lo <= -1 <= 1 <= hi it
        stays in [lo, hi], however many steps run."""
        fits = [v for v in self.scope.vals[::-1] if v is not c and _broadcast(v.shape, c.shape) == c.shape]
        if fits and self.chance(0.85):
            v, template = fits[0], "0.5 * {0} + 0.5 * {np}.tanh({1})"
        else:
            v, template = self.scope.vals[-1], "0.5 * {0} + 0.5 * {np}.tanh({np}.mean({1}))"
        c.used = v.used = True
        return self.same(template, c, v, shape=c.shape, lo=c.lo, hi=c.hi)

    def loop_results(self, inits: list[Val], news: list[Val]) -> list[Val]:
        return [Val(self.name(), c.shape, min(c.lo, -1.0), max(c.hi, 1.0), self.scope, levels=c.levels | n.levels)
                for c, n in zip(inits, news)]

    def gen_scan(self) -> Val:
        xs = None
        if self.chance(0.8):
            n = int(self.rng.integers(1, 5))
            xs = self.operand(lambda v: v.ndim >= 1, shape=(n,) + self.shape(max(1, self.scope.size_limit // n))[:2])
        length = xs.shape[0] if xs is not None else int(self.rng.integers(1, 5))
        limit = max(1, self.scope.size_limit // length)
        inits = self.carries(limit)
        schedule = self.weighted({"none": 3, "step": 1.5, "segments": 1.5, "binomial": 1.5})
        reverse = self.chance(0.25)
        with self.scoped("scan", limit) as scope:
            cs = self.carry_params(inits)
            x = self.param(xs.shape[1:], xs.lo, xs.hi, xs.levels) if xs is not None else None
            self.fill(1, 3)
            news = [self.update(c) for c in cs]
            y = self.choice([v for v in scope.vals if v not in cs and v is not x and v.size <= limit][-3:])
            y.used = True
        name = self.name("b")
        carry = [c.name for c in cs]
        ret = f"{_tuple([n.name for n in news])}, {y.name}"
        body = Body(name, [], scope.stmts, [], signature=[carry[0] if len(cs) == 1 else f"c_{name}",
                                                          "_" if x is None else x.name],
                    head=[f"{', '.join(carry)} = c_{name}"] if len(cs) > 1 else [], ret={"remat": ret, "jax": ret})
        args = f"{_tuple([c.name for c in inits])}, {'None' if xs is None else xs.name}"
        kw = (f", length={length}" if xs is None else "") + (", reverse=True" if reverse else "")
        option = ""
        if schedule == "step":
            option = ", checkpoint='step'"
        elif schedule != "none":
            option = f", checkpoint=rm.loops.{schedule}({self.choice(['', '1', '2', '3'])})"
        self.no_second |= schedule == "binomial"
        results = self.loop_results(inits, news)
        ys = Val(self.name(), (length,) + y.shape, y.lo, y.hi, self.scope, levels=y.levels)
        self.note("scan")
        self.features.update({f"scan {schedule}"} if schedule != "none" else set())
        self.features.update({"scan reverse"} if reverse else {"scan over a length"} if xs is None else set())
        fn = f"jax.checkpoint({name})" if schedule == "step" else name  # JAX has no other schedules
        return self.flow("scan", [body], f"rm.scan({name}, {args}{kw}{option})", f"jax.lax.scan({fn}, {args}{kw})",
                         results + [ys], f"{_tuple([r.name for r in results])}, {ys.name}")

    def gen_fori_loop(self) -> Val:
        lo = self.choice([0, 0, 1, -1])
        hi = lo + int(self.rng.integers(1, 5))
        inits = self.carries(self.scope.size_limit)
        i = self.name("i")
        with self.scoped("fori_loop", self.scope.size_limit) as scope:
            k = self.choice([0.25, -0.5, 0.1])
            self.emit(f"rm.astype({i}, 'float64') * {k!r}", f"jnp.astype({i}, 'float64') * {k!r}", (),
                      min(lo * k, (hi - 1) * k), max(lo * k, (hi - 1) * k))
            cs = self.carry_params(inits)
            self.fill(1, 3)
            news = [self.update(c) for c in cs]
        name = self.name("b")
        ret = _tuple([n.name for n in news])
        carry = [c.name for c in cs]
        body = Body(name, [], scope.stmts, [], signature=[i, carry[0] if len(cs) == 1 else f"c_{name}"],
                    head=[f"{', '.join(carry)} = c_{name}"] if len(cs) > 1 else [], ret={"remat": ret, "jax": ret})
        results = self.loop_results(inits, news)
        args = f"{lo}, {hi}, {name}, {_tuple([c.name for c in inits])}"
        self.note("fori_loop")
        return self.flow("fori_loop", [body], f"rm.fori_loop({args})", f"jax.lax.fori_loop({args})", results,
                         ", ".join(r.name for r in results))

    def gen_while_loop(self) -> Val:
        """A while loop over (step, carries...) that runs at most n steps, and fewer where the
        first carry's max reaches a threshold: under vmap, each entry stops at its own step."""
        n = int(self.rng.integers(1, 5))
        inits = self.carries(self.scope.size_limit)
        cond, name, i = self.name("b"), self.name("b"), self.name("i")
        early = self.chance(0.6)
        t = round(float(self.rng.uniform(-0.5, 1.0)), 3)
        pred = {lang: f"{ns}.logical_and(s[0] < {n}, {ns}.max(s[1]) < {t!r})" if early else f"s[0] < {n}"
                for lang, ns in (("remat", "rm"), ("jax", "jnp"))}
        with self.scoped("while_loop", self.scope.size_limit) as scope:
            cs = self.carry_params(inits)
            self.fill(1, 3)
            news = [self.update(c) for c in cs]
        ret = f"{i} + 1, {', '.join(v.name for v in news)}"
        bodies = [Body(cond, [], [], [], signature=["s"], ret=pred),
                  Body(name, [], scope.stmts, [], signature=["s"], head=[f"{i}, {', '.join(c.name for c in cs)} = s"],
                       ret={"remat": ret, "jax": ret})]
        results = self.loop_results(inits, news)
        init = ", ".join(c.name for c in inits)
        self.note("while_loop")
        if early and any(c.levels for c in inits):
            self.features.add("while_loop under vmap")
        return self.flow("while_loop", bodies, f"rm.while_loop({cond}, {name}, (rm.asarray(0), {init}))",
                         f"jax.lax.while_loop({cond}, {name}, (jnp.asarray(0), {init}))", results,
                         f"_, {', '.join(r.name for r in results)}")

    def branches(self, kind: str) -> Val:
        """rm.cond or rm.switch over one or two operands; each branch returns the first one's shape.
        The predicate reads a batched value when one is visible, so that under vmap each entry
        takes its own branch. Some branches are guarded by the predicate (see `branch`)."""
        s = self.pick(lambda v: bool(v.levels)) if self.chance(0.85) else None
        s = self.operand() if s is None else self.tame(s)
        guard = s.hi - s.lo >= 0.2 and self.chance(0.4)
        ops = [s] if guard or self.chance(0.4) else [self.operand()]
        if self.chance(0.4):
            ops.append(self.operand())
        k = 2 if kind == "cond" else int(self.rng.integers(2, 5))
        g = t = None
        if guard:
            g = round(float(self.rng.uniform(s.lo - 0.1, (s.lo + s.hi) / 2)), 3)
            t = round(g + 0.1, 4)
            pred, guarded = self.guarded_index(kind, s, t, k)
        else:
            pred, guarded = self.index(kind, s, k), set()
        made = [self.branch(kind, ops, j in guarded, s, g, t) for j in range(k)]
        bodies, outs = [b for b, _ in made], [v for _, v in made]
        lo, hi = _hull(*outs)
        result = Val(self.name(), ops[0].shape, lo, hi, self.scope,
                     levels=s.levels.union(*(o.levels for o in outs)))
        names = ", ".join(o.name for o in ops)
        fns = f"{bodies[1].name}, {bodies[0].name}" if kind == "cond" else f"[{', '.join(b.name for b in bodies)}]"
        self.note(kind)
        if s.levels:
            self.features.add(f"{kind} under vmap")
        if guard and s.levels:
            self.features.add("nan branch under vmap")
        ns = {"remat": "rm", "jax": "jax.lax"}
        r, j = (f"{ns[lang]}.{kind}({pred[lang]}, {fns}, {names})" for lang in ("remat", "jax"))
        return self.flow(kind, bodies, r, j, [result], result.name)

    def guarded_index(self, kind: str, s: Val, t: float, k: int) -> tuple[dict, set[int]]:
        """The predicate (or index) and the branches that are taken only where min(s) > t."""
        m = "{np}.min({0})".format(s.name, np="{np}")
        if kind == "cond":
            above = self.chance(0.5)
            pred = f"{m} > {t!r}" if above else f"{m} <= {t!r}"
            return _langs(pred), {1 if above else 0}
        t2 = round(t + float(self.rng.uniform(0.05, 0.5)), 3)
        # 0, 1 or 2 thresholds passed, maybe less one (clamped to 0): any branch past 0 needs min(s) > t
        index = f"({m} > {t!r}).astype('int32') + ({m} > {t2!r}).astype('int32')" + self.choice(["", " - 1"])
        guarded = {j for j in range(1, k) if self.chance(0.6)} or {1}
        return _langs(index), guarded

    def index(self, kind: str, s: Val, k: int) -> dict:
        """A predicate (an index) reading `s`: a statistic against thresholds in its range."""
        stat = self.choice(["sum", "mean", "max", "min"])
        n = s.size if stat == "sum" else 1
        ts = sorted(round(float(self.rng.uniform(s.lo, s.hi)) * n, 3) for _ in range(2))
        m = f"{{np}}.{stat}({s.name})"
        if kind == "cond":
            return _langs(f"{m} {self.choice(['>', '<'])} {ts[0]!r}")
        if self.chance(0.3):  # how many entries are above a threshold: may pass the last branch (clamped)
            return _langs(f"{{np}}.sum({s.name} > {round(float(self.rng.uniform(s.lo, s.hi)), 3)!r})")
        offset = self.choice(["", "", " - 1", " + 1"])  # out of range at either end: clamped
        return _langs(f"({m} > {ts[0]!r}).astype('int32') + ({m} > {ts[1]!r}).astype('int32'){offset}")

    def branch(self, kind: str, ops: list[Val], guarded: bool, s: Val, g, t) -> tuple[Body, Val]:
        """One branch: a body over the operands, returning the first one's shape. A guarded branch
        (taken only where min(s) > t = g + 0.1) starts with sqrt or log of s - g: defined where it
        is taken, NaN at entries that take another branch when the predicate is batched. It reads
        nothing from outside (see `Scope.closed`), but now and then s itself, captured."""
        closed = guarded and self.chance(0.85)
        with self.scoped(kind, self.scope.size_limit, closed) as scope:
            ps = [self.param(o.shape, o.lo, o.hi, o.levels) for o in ops]
            if guarded:
                x = ps[0] if closed or self.chance(0.5) else s
                if x is ps[0]:
                    x.lo = t
                else:
                    self.features.add("nan branch reads a capture")
                f = self.choice(["sqrt", "log"])
                fn = getattr(math, f)
                self.same(f"{{np}}.{f}({{0}} - {g!r})", x, shape=x.shape, lo=fn(t - g), hi=fn(max(x.hi, t) - g))
                self.features.add("nan branch")
            self.fill(0, 2 if guarded else 3)
            v, target = scope.vals[-1], ops[0].shape
            if v.shape != target:
                inner = "{0}" if _broadcast(v.shape, target) == target else "{np}.mean({0})"
                v = self.same(f"{{np}}.broadcast_to({inner}, {target!r})", v, shape=target, lo=v.lo, hi=v.hi)
            v.used = True
        return Body(self.name("b"), [p.name for p in ps], scope.stmts, [v.name], scope.names), v

    def gen_sort(self) -> Val | None:
        """rm.sort of a value without ties: scaled into [-0.4, 0.4] plus offsets one apart in a
        random order along the axis, which decide the order (an input without ties as it is)."""
        v = self.operand(lambda w: w.ndim >= 1, shape=self.shape()[:2] or (3,))
        if v.ndim == 0:
            return None
        axis = self.choice([-1, None] + list(range(v.ndim)))
        if not (v in self.inputs and _distinct(self.arrays[self.inputs.index(v)])):
            k = float(f"{0.4 / max(v.mag, 1e-3):.3g}")
            order = self.rng.permutation(v.size).reshape(v.shape) if axis is None else \
                np.argsort(self.rng.random(v.shape), axis=axis)
            n = v.size if axis is None else v.shape[axis]
            off = _const(order.astype(float))
            v = self.emit(f"{v.name} * {k!r} + {off}", f"{v.name} * {k!r} + jnp.asarray({off})", v.shape,
                          min(v.lo * k, v.hi * k), n - 1 + max(v.lo * k, v.hi * k))
        descending = ", descending=True" if self.chance(0.3) else ""
        self.features.add("sort")
        return self.same(f"{{np}}.sort({{0}}, axis={axis!r}{descending})", v,
                         shape=(v.size,) if axis is None else v.shape, lo=v.lo, hi=v.hi)


_NAME = re.compile(r"\b[vxp]\d+\b")  # the names of values in a statement's text


def _tuple(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def _langs(template: str) -> dict[str, str]:
    """`template` with `{np}` as each language writes it."""
    return {"remat": template.replace("{np}", "rm"), "jax": template.replace("{np}", "jnp")}


def _distinct(a: np.ndarray) -> bool:
    return np.unique(a).size == a.size


def _index_text(item) -> str:
    if item is None:
        return "None"
    if item is Ellipsis:
        return "..."
    if isinstance(item, int):
        return str(item)
    a, b, c = (("" if x is None else str(x)) for x in (item.start, item.stop, item.step))
    return f"{a}:{b}" + (f":{c}" if c else "")


def generate(seed: int) -> Program:
    """The program of `seed`: the same seed always gives the same program."""
    g = Generator(seed)
    g.new_input(g.shape())
    if g.chance(0.5):
        g.new_input(g.shape())
    for _ in range(int(g.rng.integers(2, 8))):
        if g.statements >= MAX_STATEMENTS:
            break
        g.statement()
    # The loss reads the last value and the most recent values nothing else reads.
    outs = [g.top.vals[-1]] + [v for v in g.top.vals[-2::-1] if not v.used and v not in g.inputs][:3]
    if g.chance(0.2):
        outs.append(g.choice(g.top.vals))
    weights = [np.round(g.rng.uniform(-1, 1, o.shape), 4) for o in outs]
    body = Body("loss", [v.name for v in g.inputs], g.top.stmts, [o.name for o in outs])
    k = len(g.inputs)
    diff = tuple(sorted(g.rng.choice(k, size=int(g.rng.integers(1, k + 1)), replace=False).tolist()))
    argnums = diff[0] if len(diff) == 1 and g.chance(0.5) else diff
    forward = _forward_checks(g)
    directions, hvp = None, False
    if not g.forward_only and not g.no_second and g.chance(0.3):
        directions = [np.round(g.rng.uniform(-1, 1, g.inputs[i].shape), 4) for i in diff]
        g.features.add("second order")
        hvp = not g.custom_vjp and g.chance(0.35)  # JAX has no forward mode through a custom_vjp
        if hvp:
            g.features.add("forward over reverse")
    tangents = None
    if forward & {"jvp", "linearize"}:
        tangents = [np.round(g.rng.uniform(-1, 1, v.shape), 4) for v in g.inputs]
    in_axes = tuple(g.in_axes) if g.per_example else None
    if in_axes:
        g.features.add("vmap over the program")
    branches = seed % 2 == 0
    g.features.add("xla branches" if branches else "xla inline")
    g.features.update(forward)
    if g.forward_only:
        g.features.add("forward only")
    return Program(seed, [v.name for v in g.inputs], g.arrays, body, weights, argnums, in_axes, directions,
                   branches, frozenset(g.features), tangents, frozenset(forward), not g.forward_only, hvp)


LOOPS = ("scan", "fori_loop", "while_loop", "cond", "switch")


def _forward_checks(g: Generator) -> set[str]:
    """Which of jvp, linearize (of the terms, along random tangents) and jacrev a program gets:
    most programs with loops or branches, some others. A while loop: forward mode only; a
    custom_vjp: no forward mode (JAX refuses it)."""
    if g.forward_only:
        return {"jvp", "linearize"}
    if not g.chance(0.55 if g.features & set(LOOPS) else 0.1):
        return set()
    allowed = ["jacrev"] if g.custom_vjp else ["jvp", "linearize", "jacrev"]
    return {c for c in allowed if g.chance(0.5)} or {g.choice(allowed)}


# ---------------------------------------------------------------- running both renderings


def _jax_layer_norm(x, gamma, beta, axis, eps=1e-5):
    mean = jnp.mean(x, axis=axis, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axis, keepdims=True)
    out = (x - mean) / jnp.sqrt(var + eps)
    out = out if gamma is None else out * gamma
    return out if beta is None else out + beta


def _jax_cross_entropy(logits, labels):
    picked = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype) * jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.sum(picked, axis=-1))


def load(program: Program, lang: str, name: str = "loss") -> Callable:
    """The loss function of `program` (or its `terms`) rendered in `lang` and executed."""
    ns = {"np": np, "functools": functools}
    if lang == "remat":
        ns["rm"] = rm
    else:
        ns.update(jax=jax, jnp=jnp, checkpoint_name=jax_checkpoint_name, ref_layer_norm=_jax_layer_norm,
                  ref_cross_entropy=_jax_cross_entropy)
    exec(compile(program.source(lang), f"<fuzz program {program.seed} ({lang})>", "exec"), ns)
    return ns[name]


def _transforms(program: Program, lang: str, lib) -> tuple[Callable, Callable]:
    """(the per-program loss, everything checked: value, gradients, second order, forward mode
    and Jacobians), written with `lib` (remat or jax) so both sides compute the same things the
    same way; `Program._everything` writes the same as remat code. JAX's oracle for
    `rm.linearize` is `jax.jvp`."""
    loss, terms = load(program, lang), load(program, lang, "terms")
    diff, in_axes, directions = program.diff, program.in_axes, program.directions
    tangents = None if program.tangents is None else tuple(program.tangents)
    if lib is jax:  # as JAX arrays: a NumPy one closed over by jit is a constant some rules reject
        directions = None if directions is None else [jnp.asarray(d) for d in directions]
        tangents = None if tangents is None else tuple(jnp.asarray(t) for t in tangents)

    def second(*xs):
        if program.hvp:
            it = iter(directions)
            ts = tuple(next(it) if i in diff else lib.zeros_like(x) if lib is rm else jnp.zeros_like(x)
                       for i, x in enumerate(xs))
            return lib.jvp(lib.grad(loss, diff), xs, ts)[1]

        def phi(*ys):
            gs = lib.grad(loss, diff)(*ys)
            return sum(_sum(lib, g * d) for g, d in zip(gs, directions))

        return lib.grad(phi, diff)(*xs)

    def everything(*xs):
        out = {}
        if program.reverse:
            out["value"], out["grad"] = lib.value_and_grad(loss, program.argnums)(*xs)
        else:
            out["value"] = loss(*xs)
        if directions is not None:
            out["d2"] = second(*xs)
        if "jvp" in program.forward:
            out["jvp"] = lib.jvp(terms, xs, tangents)
        if "linearize" in program.forward:
            if lib is rm:
                y, f_jvp = rm.linearize(terms, *xs)
                out["linearize"] = (y, f_jvp(*tangents))
            else:
                out["linearize"] = jax.jvp(terms, xs, tangents)
        if "jacrev" in program.forward:
            out["jacrev"] = lib.jacrev(terms, program.argnums)(*xs)
        return out

    if in_axes is not None:
        return lib.vmap(loss, in_axes=in_axes), lib.vmap(everything, in_axes=in_axes)
    return loss, everything


def _sum(lib, x):
    return lib.sum(x) if lib is rm else jnp.sum(x)


def _flatten(result: dict, program: Program) -> dict[str, np.ndarray]:
    """The leaves of `everything`'s result, each named for a failure report."""
    out = {"value": np.asarray(result["value"])}
    for key in ("grad", "d2"):
        if key in result:
            per_input = result[key] if isinstance(result[key], (tuple, list)) else (result[key],)
            out.update({f"{key} x{i}": np.asarray(g) for i, g in zip(program.diff, per_input)})
    for key in ("jvp", "linearize"):
        if key in result:
            for part, values in zip(("", "tangent "), result[key]):
                out.update({f"{key} {part}term {k}": np.asarray(v) for k, v in enumerate(values)})
    for k, row in enumerate(result.get("jacrev", ())):
        row = row if isinstance(row, (tuple, list)) else (row,)
        out.update({f"jacrev term {k} x{i}": np.asarray(j) for i, j in zip(program.diff, row)})
    return out


def jax_results(program: Program) -> dict[str, np.ndarray]:
    """What JAX computes, in float64."""
    with jax.enable_x64(True):
        loss, everything = _transforms(program, "jax", jax)
        xs = [jnp.asarray(x) for x in program.inputs]
        return _flatten(jax.tree_util.tree_map(np.asarray, jax.jit(everything)(*xs)), program)


MODES = ("eager", "numpy", "xla")


def lowering(branches: bool):
    """XLA's lowering of backward blocks: conditionals (the CPU's) or inline (accelerators')."""
    return unittest.mock.patch("remat.backends.xla.default_branches", lambda: branches)


def remat_results(program: Program, mode: str) -> dict[str, np.ndarray]:
    """What remat computes in `mode`: eager (ops run one by one; grad as one traced program),
    or under rm.jit on the NumPy or the XLA backend."""
    loss, everything = _transforms(program, "remat", rm)
    xs = [rm.asarray(x) for x in program.inputs]
    if mode == "eager":
        out = _flatten(everything(*xs), program)
        out["eager forward"] = np.asarray(loss(*xs))
        return out
    # XLA's lowering of backward blocks as the program asks, whatever this machine's default
    with lowering(program.branches) if mode == "xla" else contextlib.nullcontext():
        return _flatten(rm.jit(everything, backend=mode)(*xs), program)


@dataclasses.dataclass
class Failure:
    seed: int
    check: str
    message: str

    def __str__(self) -> str:
        return f"seed {self.seed}: {self.check}: {self.message}"


def compare(got: np.ndarray, want: np.ndarray) -> str | None:
    """Why `got` is not `want` to float64 rounding, or None."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype}{list(got.shape)}, JAX gives {want.dtype}{list(want.shape)}"
    if np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=False):
        return None
    err = np.abs(got - want)
    i = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), err.shape) if err.ndim else ()
    return (f"max |error| {np.nanmax(err):.3g} at {tuple(int(k) for k in i)}: "
            f"remat {got[i].item()!r}, JAX {want[i].item()!r}")


def check(program: Program, modes=MODES) -> tuple[int, list[Failure]]:
    """(number of checks made, failures) for `program` in each of `modes`."""
    with warnings.catch_warnings():
        # A tagged value nothing reads is not in the traced body, so a policy naming only it
        # warns that the name is unused. The generator does not track liveness: not a failure.
        warnings.simplefilter("ignore", rm.policies.UnusedNameWarning)
        # A guarded branch is NaN where it is not taken (see `Generator.branch`): NumPy says so.
        with np.errstate(invalid="ignore", divide="ignore"):
            return _check(program, modes)


def _check(program: Program, modes) -> tuple[int, list[Failure]]:
    try:
        want = jax_results(program)
    except Exception as e:  # the generator made a program JAX rejects: the fuzzer's fault
        return 1, [Failure(program.seed, "jax reference", _short(e))]
    checks, failures = 0, []
    for mode in modes:
        try:
            got = remat_results(program, mode)
        except Exception as e:
            checks += 1
            failures.append(Failure(program.seed, f"{mode}", "raised " + _short(e)))
            continue
        for key, g in got.items():
            checks += 1
            problem = compare(g, want["value" if key == "eager forward" else key])
            if problem:
                failures.append(Failure(program.seed, f"{mode} {key}", problem))
    return checks, failures


def _short(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename.split('/')[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {e}"[:600] + where


# ---------------------------------------------------------------- campaigns


def run(seeds, modes=MODES, progress: Callable[[int, int, list[Failure]], None] | None = None):
    """Check every program of `seeds`; returns (programs, checks, failures). `progress` is told
    after each program (programs so far, checks so far, that program's failures)."""
    programs, checks, failures = 0, 0, []
    for seed in seeds:
        n, f = check(generate(seed), modes)
        programs, checks = programs + 1, checks + n
        failures += f
        if progress:
            progress(programs, checks, f)
    return programs, checks, failures


def _report(failures: list[Failure], out=None) -> None:
    out = out or sys.stdout
    by_seed: dict[int, list[Failure]] = {}
    for f in failures:
        by_seed.setdefault(f.seed, []).append(f)
    for seed, fs in by_seed.items():
        print(f"\n==== seed {seed}: {len(fs)} failed checks", file=out)
        for f in fs:
            print(f"  {f.check}: {f.message}", file=out)
        print(generate(seed).script(), file=out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=10_000, help="programs to check (default 10000)")
    p.add_argument("--start", type=int, default=0, help="the first seed")
    p.add_argument("--seed", type=int, help="print the program of this seed (remat and JAX) and check it")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: eager,numpy,xla")
    args = p.parse_args(argv)
    modes = tuple(args.modes.split(","))
    if args.seed is not None:
        return _show(args.seed, modes)
    return _campaign(range(args.start, args.start + args.count), modes)


def _show(seed: int, modes) -> int:
    program = generate(seed)
    print(program.script())
    print("# the JAX rendering\n" + program.source("jax"))
    n, failures = check(program, modes)
    print(f"{n} checks, {len(failures)} failures")
    for f in failures:
        print(f"  {f}")
    return 1 if failures else 0


def _campaign(seeds: range, modes) -> int:
    t0 = time.perf_counter()
    every = max(1, min(100, len(seeds) // 20))
    failed = 0

    def progress(programs: int, checks: int, new: list[Failure]) -> None:
        nonlocal failed
        failed += len(new)
        for f in new:  # at once, so a long run's log shows them before its end
            print(f"FAILED {f}", flush=True)
        if programs % every == 0 or programs == len(seeds):
            print(f"{programs:>6}/{len(seeds)} programs  {checks} checks  {failed} failures  "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        if programs % 100 == 0:  # every program compiles anew: JAX's caches would grow ~1 MB each
            jax.clear_caches()

    programs, checks, failures = run(seeds, modes, progress)
    _report(failures)
    failing = sorted({f.seed for f in failures})
    print(f"\nprograms {programs}  checks {checks}  failures {len(failures)} (in {len(failing)} programs)  "
          f"time {time.perf_counter() - t0:.0f} s")
    if failing:
        print("failing seeds:", " ".join(map(str, failing)))
    return 1 if failures else 0


if __name__ == "__main__":
    # The campaign process is JAX's whole user: x64 everywhere (the checker also enters it
    # around the reference, so importers such as the test suite keep their own setting).
    jax.config.update("jax_enable_x64", True)
    sys.exit(main())
