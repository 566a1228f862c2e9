"""The random primitives' implementation, written once over an array namespace `xp` (NumPy or
jax.numpy) so that both backends compute the same bits.

The hash is Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3", SC 2011; the generator Random123 and JAX use): a counter pair and a key pair in, a
pair of uncorrelated words out. Everything here is unsigned integer arithmetic, which wraps
modulo 2**32 (or 2**64) on both backends; floats come from whole bits by exact conversions and
exact integer arithmetic (remat/backends/box_muller.py for normals), so the results agree to the
bit. Counters are laid out as in JAX's `jax_threefry_partitionable` mode, so the words equal
`jax.random.bits`, `jax.random.split` and `jax.random.fold_in` on the same raw key.
"""

from __future__ import annotations

import math

import numpy as np

from remat.backends import box_muller

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
PARITY = 0x1BD11BDA  # the third key word is k0 ^ k1 ^ PARITY


def threefry2x32(xp, k0, k1, x0, x1):
    """The hash of counters (`x0`, `x1`) under the key (`k0`, `k1`): uint32 arrays that
    broadcast together. Five groups of four rounds, the key injected before and after each."""
    u32 = xp.uint32
    ks = (k0, k1, k0 ^ k1 ^ u32(PARITY))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(1, 6):
        for r in ROTATIONS[(i - 1) % 2]:
            x0 = x0 + x1
            x1 = ((x1 << u32(r)) | (x1 >> u32(32 - r))) ^ x0
        x0 = x0 + ks[i % 3]
        x1 = x1 + ks[(i + 1) % 3] + u32(i)
    return x0, x1


def bits(xp, key, shape: tuple[int, ...], dtype):
    """The integers behind `uniform`: B-bit words of `key.shape[:-1] + shape` from uint32 keys
    `key` (`[..., 2]`), B = 24 in uint32 for float32 and B = 53 in uint64 for float64.

    Number j (row-major) hashes the counter (0, j). float32 takes the top 24 bits of the word
    y0 ^ y1 (JAX's 32-bit `random_bits`); float64 the top 53 bits of y0:y1 (JAX's 64-bit bits)."""
    batch, size = key.shape[:-1], math.prod(shape)
    k = xp.reshape(key, (-1, 2))
    count = xp.arange(size, dtype=xp.uint32)
    y0, y1 = threefry2x32(xp, k[:, 0:1], k[:, 1:2], xp.zeros_like(count), count)  # (keys, size)
    if np.dtype(dtype) == np.float32:
        out = (y0 ^ y1) >> xp.uint32(8)
    else:
        out = (y0.astype(xp.uint64) << xp.uint64(21)) | (y1 >> xp.uint32(11)).astype(xp.uint64)
    return xp.reshape(out, tuple(batch) + tuple(shape))


def uniform(xp, key, shape: tuple[int, ...], dtype):
    """Floats in [0, 1) of `key.shape[:-1] + shape`: `bits` times 2**-24 (float32) or 2**-53
    (float64). The conversion and the product are exact, so the backends agree to the bit."""
    if np.dtype(dtype) == np.float32:
        return bits(xp, key, shape, dtype).astype(xp.float32) * xp.float32(2.0**-24)
    return bits(xp, key, shape, dtype).astype(xp.float64) * xp.float64(2.0**-53)


def normal(xp, key, shape: tuple[int, ...], dtype):
    """Standard normals of `key.shape[:-1] + shape` by Box–Muller (remat/backends/box_muller.py)
    on the integers of two uniforms: those `uniform` draws for `(2,) + shape`."""
    batch, size = tuple(key.shape[:-1]), math.prod(shape)
    words = bits(xp, key, (2, size), dtype)  # (*batch, 2, size)
    z = box_muller.normal(xp, words[..., 0, :], words[..., 1, :], dtype)
    return xp.reshape(z, batch + tuple(shape))


def fold_in(xp, key, data):
    """New uint32 keys `[broadcast(key.shape[:-1], data.shape), 2]`: the hash of the counter
    (0, data) under `key` (so `split(key, n)[i] == fold_in(key, i)`, as in JAX)."""
    shape = np.broadcast_shapes(key.shape[:-1], data.shape)
    n = math.prod(shape)
    k = xp.reshape(xp.broadcast_to(key, shape + (2,)), (n, 2))
    d = xp.reshape(xp.broadcast_to(data, shape), (n,))  # 1-d, so NumPy never sees a scalar
    y0, y1 = threefry2x32(xp, k[:, 0], k[:, 1], xp.zeros_like(d), d)
    return xp.reshape(xp.stack([y0, y1], axis=-1), shape + (2,))
