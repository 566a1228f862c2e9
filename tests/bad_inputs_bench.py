"""Bad inputs to `remat bench` and to the NumPy backend's BLAS thread limit."""

from __future__ import annotations

import os

import remat as rm
from bad_inputs import Case
from remat import bench
from remat.backends import blas


def _threads_from_env(text: str):
    """`blas.threads()` read from `$REMAT_BLAS_THREADS=text`; the environment and setting come
    back afterwards."""
    before, setting = os.environ.get(blas.ENV), blas._setting
    os.environ[blas.ENV] = text
    blas._setting = blas._UNSET
    try:
        return blas.threads()
    finally:
        if before is None:
            del os.environ[blas.ENV]
        else:
            os.environ[blas.ENV] = before
        blas._setting = setting


CASES: list[Case] = [
    Case("bench-unknown-framework", lambda: bench.run(quick=True, frameworks=["tensorflow"]), rm.ArgumentValueError,
         (r"^bench:", r"unknown framework 'tensorflow'", r"known: remat-numpy, remat-xla, jax, torch")),
    Case("bench-unknown-model", lambda: bench.run(quick=True, models=["resnet"]), rm.ArgumentValueError,
         (r"^bench:", r"unknown model 'resnet'", r"known: mlp, gpt")),
    Case("bench-frameworks-a-string", lambda: bench.run(quick=True, frameworks="torch"), rm.ArgumentTypeError,
         (r"^bench:", r"frameworks must be a list of names", r"got 'torch'", r"use \['torch'\]")),
    Case("blas-threads-zero", lambda: blas.set_threads(0), rm.ArgumentValueError,
         (r"^blas.set_threads:", r"n must be at least 1", r"got 0", r"None means no limit")),
    Case("blas-threads-negative", lambda: blas.set_threads(-2), rm.ArgumentValueError,
         (r"^blas.set_threads:", r"n must be at least 1", r"got -2")),
    Case("blas-threads-float", lambda: blas.set_threads(2.0), rm.ArgumentTypeError,
         (r"^blas.set_threads:", r"n must be a positive int or None", r"got 2\.0")),
    Case("blas-threads-bool", lambda: blas.set_threads(True), rm.ArgumentTypeError,
         (r"^blas.set_threads:", r"positive int or None", r"got True")),
    Case("blas-threads-env-not-a-number", lambda: _threads_from_env("lots"), rm.ArgumentValueError,
         (r"^blas:", r"\$REMAT_BLAS_THREADS", r"positive integer or 'none'", r"got 'lots'")),
    Case("blas-threads-env-zero", lambda: _threads_from_env("0"), rm.ArgumentValueError,
         (r"^blas:", r"\$REMAT_BLAS_THREADS must be a positive integer", r"got '0'")),
]
