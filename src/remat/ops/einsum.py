"""`einsum`, composed: diagonals are strided slices, lone indices are sums, and every
contraction of two operands is one batched `matmul` between a permute and a reshape, so
einsum needs no primitive (and no gradient rule) of its own.

Operands are contracted two at a time, each time the pair whose result is smallest (a greedy
order, as opt_einsum's default). An index of size 1 in one operand broadcasts against the
others, as in NumPy and JAX.
"""

from __future__ import annotations

import math

from remat import dtypes
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError
from remat.ops.elementwise import promote
from remat.ops.linalg import matmul
from remat.ops.reduce import sum as reduce_sum
from remat.ops.shape import permute_dims, reshape, slice_axis
from remat.tensor import Tensor

_ELLIPSIS = "..."


def einsum(subscripts: str, *operands) -> Tensor:
    """The Einstein summation of `operands` as `subscripts` says, as `np.einsum`: one term of
    letters per operand (`...` for leading broadcast axes), and after `->` the output's letters
    (without `->`, the letters used once, in alphabetical order). Repeated letters in one term
    take a diagonal; letters missing from the output are summed.

    >>> import remat as rm
    >>> rm.einsum("ij,jk->ik", rm.ones((2, 3)), rm.ones((3, 4))).shape
    (2, 4)
    >>> rm.einsum("ii", rm.eye(3))
    Tensor(3., dtype=float32)
    """
    terms, out = _parse(subscripts, len(operands))
    xs = promote(*operands, what="einsum") if operands else []
    if any(x.dtype == dtypes.bool_ for x in xs):
        raise DTypeError(f"einsum: subscripts {subscripts!r}: operands must be numeric, got bool; "
                         'cast them first (x.astype("int32"))')
    labelled = [_labels(subscripts, t, x, k) for k, (t, x) in enumerate(zip(terms, xs))]
    ell_rank = max((sum(isinstance(label, tuple) for label in ls) for ls in labelled), default=0)
    out_labels = _output_labels(subscripts, out, labelled, ell_rank)
    sizes = _sizes(subscripts, labelled, xs)
    ops = [_prepare(x, ls, sizes, out_labels) for x, ls in zip(xs, labelled)]
    while len(ops) > 1:
        i, j = _cheapest_pair(ops, sizes, out_labels)
        b = ops.pop(j)
        a = ops.pop(i)
        keep = set(out_labels).union(*(set(ls) for _, ls in ops))
        ops.insert(i, _contract(a, b, keep, sizes))
    x, ls = _sum_out(*ops[0], set(out_labels))
    return permute_dims(x, [ls.index(label) for label in out_labels])


# ---------------------------------------------------------------- parsing


def _parse(subscripts, n: int) -> tuple[list[str], str | None]:
    if not isinstance(subscripts, str):
        raise ArgumentTypeError(f"einsum: subscripts must be a str such as 'ij,jk->ik', got "
                                f"{type(subscripts).__name__} {subscripts!r:.60}")
    spec = subscripts.replace(" ", "")
    for ch in spec:
        if not (ch.isascii() and ch.isalpha()) and ch not in ",->.":
            raise ArgumentValueError(f"einsum: subscripts {subscripts!r} hold {ch!r}; use letters, ',', '->' and '...'")
    if spec.count("->") > 1 or spec.replace("->", "").count("-") or spec.replace("->", "").count(">"):
        raise ArgumentValueError(f"einsum: subscripts {subscripts!r} must have at most one '->', between the "
                                 "inputs and the output")
    lhs, _, out = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != n:
        raise ArgumentValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operand(s), got {n}; "
                                 "give one term per operand, separated by ','")
    return terms, (out if "->" in spec else None)


def _split_term(subscripts: str, term: str) -> list[str]:
    """The letters of `term`, with `...` as one entry."""
    if term.count(_ELLIPSIS) > 1 or term.replace(_ELLIPSIS, "").count("."):
        raise ArgumentValueError(f"einsum: subscripts {subscripts!r}: the term {term!r} may hold one '...' "
                                 "and no other '.'")
    head, ell, tail = term.partition(_ELLIPSIS)
    return list(head) + ([_ELLIPSIS] if ell else []) + list(tail)


def _labels(subscripts: str, term: str, x: Tensor, k: int) -> list:
    """One label per axis of `x`: its letter, or ("...", j) for the j-th ellipsis axis counted
    from the right (so that ellipses of different ranks line up at the right, as broadcasting
    does)."""
    parts = _split_term(subscripts, term)
    letters = len(parts) - (_ELLIPSIS in parts)
    if _ELLIPSIS not in parts and letters != x.ndim or letters > x.ndim:
        raise ShapeError(f"einsum: subscripts {subscripts!r}: operand {k} has shape {x.shape} ({x.ndim} axes) "
                         f"but its term {term!r} names {letters}")
    rank = x.ndim - letters
    out: list = []
    for p in parts:
        out.extend([(_ELLIPSIS, j) for j in reversed(range(rank))] if p == _ELLIPSIS else [p])
    return out


def _output_labels(subscripts: str, out: str | None, labelled: list[list], ell_rank: int) -> list:
    ell = [(_ELLIPSIS, j) for j in reversed(range(ell_rank))]
    if out is None:
        counts: dict[str, int] = {}
        for ls in labelled:
            for label in ls:
                if isinstance(label, str):
                    counts[label] = counts.get(label, 0) + 1
        return ell + sorted(label for label, c in counts.items() if c == 1)
    parts = _split_term(subscripts, out)
    seen = {label for ls in labelled for label in ls}
    result: list = []
    for p in parts:
        if p != _ELLIPSIS and p not in seen:
            raise ArgumentValueError(f"einsum: subscripts {subscripts!r}: the output index {p!r} is in no input term")
        if p in result:
            raise ArgumentValueError(f"einsum: subscripts {subscripts!r}: the output names index {p!r} twice")
        result.extend(ell if p == _ELLIPSIS else [p])
    return result


def _sizes(subscripts: str, labelled: list[list], xs: list[Tensor]) -> dict:
    """The size of every label: equal in every operand, or 1 where it broadcasts."""
    sizes: dict = {}
    where: dict = {}
    for k, (ls, x) in enumerate(zip(labelled, xs)):
        for label, n in zip(ls, x.shape):
            have = sizes.get(label, 1)
            if have != 1 and n not in (1, have):
                name = "..." if isinstance(label, tuple) else repr(label)
                if where[label] == k:
                    raise ShapeError(f"einsum: subscripts {subscripts!r}: index {name} is repeated in operand {k} "
                                     f"over axes of sizes {have} and {n} (shape {x.shape}); a diagonal needs "
                                     "equal sizes")
                raise ShapeError(f"einsum: subscripts {subscripts!r}: index {name} has size {have} in operand "
                                 f"{where[label]} and {n} in operand {k} (shapes "
                                 f"{xs[where[label]].shape} and {x.shape})")
            if n != 1 or label not in sizes:
                sizes[label], where[label] = n, k
    return sizes


# ---------------------------------------------------------------- the steps


def _prepare(x: Tensor, labels: list, sizes: dict, out_labels: list) -> tuple[Tensor, list]:
    """One operand with its diagonals taken, its broadcast axes dropped and the indices no one
    else needs summed (the caller sums what the other operands do not share later)."""
    labels = list(labels)
    while len(set(labels)) < len(labels):
        label = next(label for label in labels if labels.count(label) > 1)
        first = labels.index(label)
        x = _diagonal(x, first, labels.index(label, first + 1))
        labels = [lb for lb in labels if lb != label] + [label]
    keep = [i for i, label in enumerate(labels) if not (x.shape[i] == 1 and sizes[label] != 1)]
    if len(keep) < len(labels):  # a size-1 axis against a larger one: it broadcasts
        x = reshape(x, tuple(x.shape[i] for i in keep))
        labels = [labels[i] for i in keep]
    return x, labels


def _diagonal(x: Tensor, a: int, b: int) -> Tensor:
    """The diagonal of axes a and b of `x`, as a new last axis: with both moved last and merged,
    it is every (n + 1)-th element."""
    n = x.shape[a]
    if x.shape[b] != n:
        raise ShapeError(f"einsum: a repeated index spans axes of sizes {x.shape[a]} and {x.shape[b]} in an "
                         f"operand of shape {x.shape}; a diagonal needs equal sizes")
    rest = [i for i in range(x.ndim) if i not in (a, b)]
    moved = permute_dims(x, rest + [a, b])
    flat = reshape(moved, tuple(x.shape[i] for i in rest) + (n * n,))
    return slice_axis(flat, len(rest), 0, n * n, n + 1)


def _sum_out(x: Tensor, labels: list, keep: set) -> tuple[Tensor, list]:
    gone = tuple(i for i, label in enumerate(labels) if label not in keep)
    if not gone:
        return x, labels
    return reduce_sum(x, axis=gone), [label for label in labels if label in keep]


def _others(ops: list, skip: tuple[int, ...]) -> set:
    return set().union(*(set(ls) for k, (_, ls) in enumerate(ops) if k not in skip))


def _cheapest_pair(ops: list, sizes: dict, out_labels: list) -> tuple[int, int]:
    """The pair of operands whose contraction gives the smallest result (the first such)."""
    best, pick = None, (0, 1)
    for i in range(len(ops)):
        for j in range(i + 1, len(ops)):
            keep = set(out_labels) | _others(ops, (i, j))
            result = {lb for lb in ops[i][1] + ops[j][1] if lb in keep}
            cost = math.prod(sizes[lb] for lb in result)
            if best is None or cost < best:
                best, pick = cost, (i, j)
    return pick


def _contract(a: tuple[Tensor, list], b: tuple[Tensor, list], keep: set, sizes: dict) -> tuple[Tensor, list]:
    """Two operands as one: shared indices still needed are batch axes, the other shared ones
    are summed by a matmul, the rest are kept."""
    (x, lx), (y, ly) = _sum_out(*a, keep | set(b[1])), _sum_out(*b, keep | set(a[1]))
    batch = [lb for lb in lx if lb in ly and lb in keep]
    inner = [lb for lb in lx if lb in ly and lb not in keep]
    free_x = [lb for lb in lx if lb not in ly]
    free_y = [lb for lb in ly if lb not in lx]

    def size(labels):
        return math.prod(sizes[lb] for lb in labels)

    xm = reshape(permute_dims(x, [lx.index(lb) for lb in batch + free_x + inner]),
                 (size(batch), size(free_x), size(inner)))
    ym = reshape(permute_dims(y, [ly.index(lb) for lb in batch + inner + free_y]),
                 (size(batch), size(inner), size(free_y)))
    labels = batch + free_x + free_y
    return reshape(matmul(xm, ym), tuple(sizes[lb] for lb in labels)), labels
