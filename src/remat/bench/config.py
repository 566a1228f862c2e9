"""What `remat bench` runs: the models, their checkpoint plans, two sizes, and the inputs, made
once with NumPy so that every framework computes the same step on the same numbers.

Two models are unrolled stacks of layers, checkpointed per layer or in segments (`PLANS`); three
are loops (`LOOP_PLANS`): the same two as one scan over stacked weights, and a tanh RNN over T
time steps, checkpointed per step, in ⌈√T⌉-step segments, or with the binomial schedule."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

PLANS = ("none", "layer", "sqrt", "dots")  # see remat.models
PLAN_NAMES = {"none": "none", "layer": "per layer", "sqrt": "√L", "dots": "dots_saveable"}
LOOP_PLANS = ("none", "step", "sqrt", "binomial")  # rm.scan's checkpoint=: None, "step", segments(), binomial()
LOOP_PLAN_NAMES = {"none": "none", "step": "per step", "sqrt": "√T segments", "binomial": "binomial"}
MODELS = ("mlp", "gpt", "scanned-mlp", "scanned-gpt", "rnn")


@dataclass(frozen=True)
class MLP:
    """L layers of `h + tanh(h @ w + b)`, loss `mean(h * h)`."""

    scanned: ClassVar[bool] = False
    depth: int
    width: int
    batch: int

    def describe(self) -> str:
        act = self.batch * self.width * 4 / 2**20
        return (f"residual MLP: {self.depth} layers, width {self.width}, batch {self.batch} "
                f"(one activation: {act:g} MiB)")


@dataclass(frozen=True)
class UNet(MLP):
    """`MLP`'s layers as a U-Net: a down path, then an up path whose layers add their mirror's
    output (`remat.models.unet_loss`)."""

    def describe(self) -> str:
        return "U-Net-like " + super().describe()


@dataclass(frozen=True)
class GPT:
    """A pre-norm transformer: token and position embeddings, `layers` blocks of causal
    multi-head attention and a GELU MLP (4x wide), a final layer norm, next-token loss."""

    scanned: ClassVar[bool] = False
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


@dataclass(frozen=True)
class ScannedMLP(MLP):
    """`MLP` as one scan over its layers' stacked weights."""

    scanned: ClassVar[bool] = True

    def describe(self) -> str:
        return "scanned " + super().describe()


@dataclass(frozen=True)
class ScannedGPT(GPT):
    """`GPT` as one scan over its blocks' stacked weights."""

    scanned: ClassVar[bool] = True

    def describe(self) -> str:
        return "scanned " + super().describe()


@dataclass(frozen=True)
class RNN:
    """`h' = tanh(h @ wh + x @ wx + b)` over `steps` time steps; loss: the mean of every step's
    `mean(h * h)`; the gradient is the weights'."""

    scanned: ClassVar[bool] = True
    steps: int
    width: int
    inputs: int
    batch: int

    def describe(self) -> str:
        carry = self.batch * self.width * 4 / 2**10
        return (f"tanh RNN: {self.steps} steps, width {self.width}, {self.inputs} inputs, batch {self.batch} "
                f"(one carry: {carry:g} KiB)")

    @property
    def depth(self) -> int:
        return self.steps


SIZES = {
    ("mlp", False): MLP(depth=32, width=256, batch=1024),
    ("mlp", True): MLP(depth=8, width=64, batch=256),
    ("gpt", False): GPT(layers=8, d_model=128, heads=4, seq=128, batch=16, vocab=256),
    ("gpt", True): GPT(layers=2, d_model=32, heads=2, seq=32, batch=4, vocab=64),
    ("scanned-mlp", False): ScannedMLP(depth=32, width=256, batch=1024),
    ("scanned-mlp", True): ScannedMLP(depth=8, width=64, batch=256),
    ("scanned-gpt", False): ScannedGPT(layers=8, d_model=128, heads=4, seq=128, batch=16, vocab=256),
    ("scanned-gpt", True): ScannedGPT(layers=2, d_model=32, heads=2, seq=32, batch=4, vocab=64),
    # A carry of 128 KiB: every buffer above MALLOC_MMAP_THRESHOLD_ (64 KiB), so that resident
    # memory follows live memory in every framework (smaller ones stay in malloc's heap once freed).
    ("rnn", False): RNN(steps=1000, width=256, inputs=32, batch=128),
    ("rnn", True): RNN(steps=16, width=32, inputs=8, batch=4),
    ("unet", False): UNet(depth=32, width=256, batch=1024),
    ("unet", True): UNet(depth=8, width=64, batch=256),
}
KINDS = {cls.__name__: cls for cls in (MLP, GPT, ScannedMLP, ScannedGPT, RNN, UNet)}
_MODEL_OF = {type(size): model for (model, _), size in SIZES.items()}


def size_of(model: str, quick: bool):
    return SIZES[model, quick]


def plans_of(model: str) -> tuple[str, ...]:
    return LOOP_PLANS if size_of(model, True).scanned else PLANS


def plan_name(model: str, plan: str) -> str:
    return (LOOP_PLAN_NAMES if size_of(model, True).scanned else PLAN_NAMES)[plan]


def loss_of(size, plan, losses: dict[str, Callable]) -> Callable:
    """`size`'s model's loss in one framework, as a function of (params, data). `losses` holds
    that framework's loss of each model, by its name in `MODELS`, taking (params, data, plan)
    and a GPT's number of heads; `plan` is as that framework takes it."""
    model = _MODEL_OF[type(size)]
    if model not in losses:
        raise NotSupported(f"this framework's benchmark has no {model} model")
    loss = losses[model]
    heads = (size.heads,) if isinstance(size, GPT) else ()
    return lambda params, data: loss(params, data, plan, *heads)


def size_to_dict(size) -> dict:
    return {"kind": type(size).__name__, **asdict(size)}


def size_from_dict(d: dict):
    d = dict(d)
    return KINDS[d.pop("kind")](**d)


def inputs(size, seed: int = 0):
    """`(params, data)` as NumPy float32 (and int32) arrays; a scanned model's layers' weights
    stacked along a new leading axis."""
    rng = np.random.default_rng(seed)
    normal = functools.partial(_normal32, rng)
    if isinstance(size, RNN):
        w, i = size.width, size.inputs  # scaled as remat.models.rnn_params: the state neither dies nor saturates
        params = {"wh": normal(0.9 / math.sqrt(w), w, w), "wx": normal(1 / math.sqrt(i), i, w),
                  "b": np.zeros(w, np.float32)}
        return params, (np.zeros((size.batch, w), np.float32), normal(1.0, size.steps, size.batch, i))
    params, data = _layers_inputs(size, rng, normal)
    if isinstance(size, ScannedMLP):
        return (np.stack([w for w, _ in params]), np.stack([b for _, b in params])), data
    if isinstance(size, ScannedGPT):
        blocks = params["blocks"]
        return {**params, "blocks": {k: np.stack([b[k] for b in blocks]) for k in blocks[0]}}, data
    return params, data


def _normal32(rng: np.random.Generator, scale: float, *shape: int) -> np.ndarray:
    """`rng.normal(0, scale, shape)` as float32, drawn a slab at a time along the first axis (the
    same numbers: a Generator draws them in order), so that no float64 copy of a long RNN
    sequence is ever whole: `remat fit` counts every byte a try's process holds."""
    out = np.empty(shape, np.float32)
    rows = max(1, (1 << 20) // max(1, math.prod(shape[1:])))  # about 8 MiB of float64 at a time
    for start in range(0, shape[0], rows):
        out[start : start + rows] = rng.normal(0, scale, (min(rows, shape[0] - start), *shape[1:]))
    return out


def _layers_inputs(size, rng, normal):
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
    """A framework has no equivalent of a plan (torch has no dots_saveable; neither JAX nor torch
    has a binomial schedule)."""
