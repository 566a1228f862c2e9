"""The NumPy kernels of the solvers and decompositions (remat/ops/decompositions.py): LAPACK
through `np.linalg`, batched over leading axes, and SciPy's triangular solve (imported on first
use, as the special functions are).

NumPy raises for a whole batch when one matrix fails (singular, not positive definite, no
convergence); XLA gives that matrix's results as NaN (or inf) and the others as usual. So do we:
on failure the batch runs again matrix by matrix, and the failed ones come back as NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _batch_broadcast(*xs: np.ndarray) -> list[np.ndarray]:
    batch = np.broadcast_shapes(*(x.shape[:-2] for x in xs))
    return [np.broadcast_to(x, batch + x.shape[-2:]) for x in xs]


def _nan_where_failed(fn: Callable) -> Callable:
    """`fn` (matrices in, a tuple of arrays out) with NaN results for the matrices LAPACK refuses."""

    def run(*xs, **params):
        try:
            return fn(*xs, **params)
        except np.linalg.LinAlgError:
            pass
        xs = _batch_broadcast(*xs)
        batch = xs[0].shape[:-2]
        # One identity-like problem gives the shapes and dtypes of one matrix's results.
        like = fn(*(np.eye(*x.shape[-2:], dtype=x.dtype) for x in xs), **params)
        outs = [np.full(batch + o.shape, np.nan, o.dtype) for o in like]
        for i in np.ndindex(*batch):
            try:
                got = fn(*(x[i] for x in xs), **params)
            except np.linalg.LinAlgError:
                continue
            for o, g in zip(outs, got):
                o[i] = g
        return tuple(outs)

    return run


@_nan_where_failed
def _solve(a, b):
    return (np.linalg.solve(a, b),)


@_nan_where_failed
def _triangular_solve(a, b, *, lower):
    from scipy.linalg import solve_triangular

    return (solve_triangular(a, b, lower=lower),)


@_nan_where_failed
def _cholesky(a):
    return (np.linalg.cholesky(a),)


@_nan_where_failed
def _qr(a, *, full_matrices):
    return tuple(np.linalg.qr(a, mode="complete" if full_matrices else "reduced"))


@_nan_where_failed
def _eigh(a, *, lower):
    return tuple(np.linalg.eigh(a, UPLO="L" if lower else "U"))


@_nan_where_failed
def _svd(a, *, full_matrices, compute_uv):
    if not compute_uv:
        return (np.linalg.svd(a, compute_uv=False),)
    return tuple(np.linalg.svd(a, full_matrices=full_matrices))


@_nan_where_failed
def _slogdet(a):
    return tuple(np.linalg.slogdet(a))


# The entries of the NumPy backend's table (remat/backends/numpy.py).


def solve(a, b):
    return _solve(a, b)[0]


def triangular_solve(a, b, *, lower):
    return _triangular_solve(a, b, lower=lower)[0]


def cholesky(a):
    return np.tril(_cholesky(a)[0])  # a failed matrix: nan on and below the diagonal, as XLA's


qr, eigh, svd, slogdet = _qr, _eigh, _svd, _slogdet
