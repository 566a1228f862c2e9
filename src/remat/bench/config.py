"""What `remat bench` runs: two models, four checkpoint plans, two sizes, and the inputs, made
once with NumPy so that every framework computes the same step on the same numbers."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

PLANS = ("none", "layer", "sqrt", "dots")  # see remat.models
PLAN_NAMES = {"none": "none", "layer": "per layer", "sqrt": "√L", "dots": "dots_saveable"}
MODELS = ("mlp", "gpt")


@dataclass(frozen=True)
class MLP:
    """L layers of `h + tanh(h @ w + b)`, loss `mean(h * h)`."""

    depth: int
    width: int
    batch: int

    def describe(self) -> str:
        act = self.batch * self.width * 4 / 2**20
        return (f"residual MLP: {self.depth} layers, width {self.width}, batch {self.batch} "
                f"(one activation: {act:g} MiB)")


@dataclass(frozen=True)
class GPT:
    """A pre-norm transformer: token and position embeddings, `layers` blocks of causal
    multi-head attention and a GELU MLP (4x wide), a final layer norm, next-token loss."""

    layers: int
    d_model: int
    heads: int
    seq: int
    batch: int
    vocab: int

    def describe(self) -> str:
        return (f"GPT-style: {self.layers} blocks, d_model {self.d_model}, {self.heads} heads, "
                f"sequence {self.seq}, batch {self.batch}, vocabulary {self.vocab}")

    @property
    def depth(self) -> int:
        return self.layers


SIZES = {
    ("mlp", False): MLP(depth=32, width=256, batch=1024),
    ("mlp", True): MLP(depth=8, width=64, batch=256),
    ("gpt", False): GPT(layers=8, d_model=128, heads=4, seq=128, batch=16, vocab=256),
    ("gpt", True): GPT(layers=2, d_model=32, heads=2, seq=32, batch=4, vocab=64),
}


def size_of(model: str, quick: bool):
    return SIZES[model, quick]


def size_to_dict(size) -> dict:
    return {"kind": type(size).__name__, **asdict(size)}


def size_from_dict(d: dict):
    d = dict(d)
    return {"MLP": MLP, "GPT": GPT}[d.pop("kind")](**d)


def inputs(size, seed: int = 0):
    """`(params, data)` as NumPy float32 (and int32) arrays."""
    rng = np.random.default_rng(seed)
    normal = lambda scale, *shape: rng.normal(0, scale, shape).astype(np.float32)  # noqa: E731
    if isinstance(size, MLP):
        d = size.width
        params = [(normal(1 / math.sqrt(d), d, d), np.zeros(d, np.float32)) for _ in range(size.depth)]
        return params, normal(1.0, size.batch, d)
    d, v = size.d_model, size.vocab
    blocks = [{
        "ln1_g": np.ones(d, np.float32), "ln1_b": np.zeros(d, np.float32),
        "qkv": normal(0.02, d, 3 * d), "proj": normal(0.02 / math.sqrt(2 * size.layers), d, d),
        "ln2_g": np.ones(d, np.float32), "ln2_b": np.zeros(d, np.float32),
        "fc": normal(0.02, d, 4 * d), "out": normal(0.02 / math.sqrt(2 * size.layers), 4 * d, d),
    } for _ in range(size.layers)]
    params = {
        "tok": normal(0.02, v, d), "pos": normal(0.01, size.seq, d), "blocks": blocks,
        "lnf_g": np.ones(d, np.float32), "lnf_b": np.zeros(d, np.float32), "head": normal(0.02, d, v),
    }
    tokens = rng.integers(0, v, (size.batch, size.seq + 1)).astype(np.int32)
    return params, (tokens[:, :-1], tokens[:, 1:])


class NotSupported(Exception):
    """A framework has no equivalent of a plan (torch has no dots_saveable)."""
