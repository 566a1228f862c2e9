"""Reference set-ups for the GPT-style model (`remat.models.gpt_loss`) on many devices, with XLA's
SPMD partitioner doing the communication: a set-up is shardings (data) and a loss with a few
`rm.shard` annotations, never collective code.

- `data_parallel(mesh, heads)`: the batch is split over the mesh axis "data", every parameter is
  replicated. Each device runs the whole model on its part of the batch; the gradients are summed
  over "data" by all-reduces, which XLA combines into one per executable.
- `tensor_parallel(mesh, heads)`: Megatron-style (Shoeybi et al. 2019), on a mesh with axes
  ("data", "model"): the batch is split over "data" as above, and inside each block the
  attention heads and the MLP's hidden units are split over "model". The first matrix of each
  half (`qkv`, `fc`) is split by columns, the second (`proj`, `out`) by rows, so each half of a
  block runs on its own columns with no communication until the second product, whose partial
  sums one all-reduce adds: two all-reduces per block forward (attention, MLP) and two backward
  (their transposes, for the gradient of the block's input). Embeddings, layer norms and the
  output head are replicated. `qkv` is kept in head-major layout (`to_head_major`) so that a
  block of columns holds whole heads.

    import jax, numpy as np, remat as rm
    from jax.sharding import Mesh
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    setup = rm.parallel.tensor_parallel(mesh, heads=4)
    params = setup.layout(params)                      # head-major qkv
    step = rm.jit(rm.value_and_grad(setup.loss), backend="xla", static_argnums=(2,),
                  in_shardings=(setup.param_shardings(params), setup.batch_shardings()))
    loss, grads = step(params, (tokens, targets), "layer")

Needs JAX (`jax.sharding`): `import remat` does not import this module; `rm.parallel` does, when
first used. Measured figures: docs/many-devices.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import remat as rm
from remat import models, tree
from remat.errors import ArgumentTypeError, ArgumentValueError, ShapeError

DATA, MODEL = "data", "model"

# Megatron's split of a block's matrices: the first of each pair by columns, the second by rows.
_MEGATRON = {"qkv": P(None, MODEL), "fc": P(None, MODEL), "proj": P(MODEL, None), "out": P(MODEL, None)}


@dataclass(frozen=True)
class Setup:
    """How the GPT-style model is laid out on `mesh`: `param_shardings(params)` and
    `batch_shardings()` for `rm.jit(..., in_shardings=...)`, `layout`/`standard` to convert
    parameters (and gradients) between `models.gpt_loss`'s layout and this set-up's, and `loss`,
    the model with its sharding annotations."""

    mesh: Mesh
    heads: int
    tensor_parallel: bool

    @property
    def name(self) -> str:
        return "data + tensor parallel" if self.tensor_parallel else "data parallel"

    def sharding(self, *spec) -> NamedSharding:
        """`NamedSharding(mesh, PartitionSpec(*spec))`."""
        return NamedSharding(self.mesh, P(*spec))

    def param_shardings(self, params: dict):
        """A pytree like `params` (as `models.gpt_loss` takes them) of `NamedSharding`s."""
        _check_params(params, f"{self._where}.param_shardings")
        replicated = self.sharding()
        blocks = [{k: self._block_sharding(k) for k in block} for block in params["blocks"]]
        return {**{k: replicated for k in params if k != "blocks"}, "blocks": blocks}

    def _block_sharding(self, name: str) -> NamedSharding:
        if self.tensor_parallel and name in _MEGATRON:
            return NamedSharding(self.mesh, _MEGATRON[name])
        return self.sharding()

    def batch_shardings(self) -> tuple[NamedSharding, NamedSharding]:
        """(tokens, targets): both `(batch, seq)`, the batch split over "data"."""
        return self.sharding(DATA, None), self.sharding(DATA, None)

    def layout(self, params: dict) -> dict:
        """`params` in this set-up's layout: `qkv` head-major under tensor parallelism (NumPy arrays)."""
        _check_params(params, f"{self._where}.layout")
        return _map_qkv(params, lambda w: to_head_major(w, self.heads)) if self.tensor_parallel else params

    def standard(self, params: dict) -> dict:
        """The inverse of `layout`: parameters or gradients back in `models.gpt_loss`'s layout."""
        _check_params(params, f"{self._where}.standard")
        return _map_qkv(params, lambda w: from_head_major(w, self.heads)) if self.tensor_parallel else params

    def loss(self, params: dict, data, plan: str | int = "none"):
        """`models.gpt_loss` on parameters in this set-up's layout, with the residual stream
        pinned to the batch split (`rm.shard`) at the embeddings and at every block's input: a
        block's input is what its checkpoint saves, so it stays split whatever the partitioner
        would choose there."""
        tokens, targets = data
        mask = models.causal_mask(tokens.shape[1])
        stream = self.sharding(DATA, None, None)

        def layer(h, p):
            return models.gpt_block(p, rm.shard(h, stream), self.heads, mask, head_major=self.tensor_parallel)

        layers = [lambda h, p=p: layer(h, p) for p in params["blocks"]]
        h = models.checkpointed(layers, rm.shard(models._embed(params, tokens), stream), plan)
        return models._next_token_loss(params, h, targets)

    def jax_loss(self, params: dict, data, plan: str | int = "none", run=None):
        """The same model written directly in JAX (`remat.bench.impl_jax`, `jax.checkpoint`),
        with the same annotations (`jax.lax.with_sharding_constraint`): what `jax.jit` makes of
        it with the same shardings is the yardstick for the collectives remat's programs hold.
        Plan "kept": each block checkpointed so that XLA:CPU keeps the savings (`impl_jax.kept`:
        its recomputation and VJP in a conditional on `run`, a boolean argument of the step passed
        true), the yardstick for remat's conditionals on the CPU."""
        import jax

        from remat.bench import impl_jax

        tokens, targets = data
        mask = models.causal_mask(tokens.shape[1])
        stream = self.sharding(DATA, None, None)

        block = _jax_block if self.tensor_parallel else impl_jax.gpt_block

        def layer(p, h):
            return block(p, jax.lax.with_sharding_constraint(h, stream), self.heads, mask)

        h = jax.lax.with_sharding_constraint(params["tok"][tokens] + params["pos"], stream)
        h = impl_jax._checkpointed(layer, params["blocks"], h, plan, run)
        return impl_jax._next_token_loss(params, h, targets)

    @property
    def _where(self) -> str:
        return "tensor_parallel" if self.tensor_parallel else "data_parallel"


def data_parallel(mesh: Mesh, heads: int) -> Setup:
    """The batch split over the mesh axis "data", every parameter replicated.

    >>> import jax, numpy as np
    >>> from jax.sharding import Mesh
    >>> setup = data_parallel(Mesh(np.array(jax.devices()[:1]), ("data",)), heads=2)
    >>> tuple(setup.batch_shardings()[0].spec)
    ('data', None)
    """
    _check_mesh(mesh, "data_parallel", (DATA,))
    _check_heads(heads, "data_parallel")
    return Setup(mesh, heads, tensor_parallel=False)


def tensor_parallel(mesh: Mesh, heads: int) -> Setup:
    """Data parallel over "data" and Megatron tensor parallel over "model" (see the module).
    `heads` must be a multiple of the size of "model": each device holds whole heads.

    >>> import jax, numpy as np
    >>> from jax.sharding import Mesh
    >>> setup = tensor_parallel(Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model")), heads=2)
    >>> setup.name
    'data + tensor parallel'
    >>> to_head_major(np.arange(6).reshape(1, 6), heads=2)  # columns q0 q1 k0 k1 v0 v1
    array([[0, 2, 4, 1, 3, 5]])
    """
    _check_mesh(mesh, "tensor_parallel", (DATA, MODEL))
    _check_heads(heads, "tensor_parallel")
    size = mesh.shape[MODEL]
    if heads % size:
        raise ShapeError(
            f"tensor_parallel: heads={heads} cannot be split over the mesh axis 'model' of size {size}: "
            f"each device holds whole heads; use a number of heads divisible by {size} or a smaller 'model' axis")
    return Setup(mesh, heads, tensor_parallel=True)


def to_head_major(w, heads: int) -> np.ndarray:
    """`qkv` weights `(d, 3 * d)` with columns (q/k/v, head, dh) reordered to (head, q/k/v, dh)."""
    w = np.asarray(w)
    d = w.shape[0]
    return w.reshape(d, 3, heads, -1).transpose(0, 2, 1, 3).reshape(d, -1)


def from_head_major(w, heads: int) -> np.ndarray:
    """The inverse of `to_head_major`."""
    w = np.asarray(w)
    d = w.shape[0]
    return w.reshape(d, heads, 3, -1).transpose(0, 2, 1, 3).reshape(d, -1)


def _jax_block(p: dict, h, heads: int, mask):
    """`impl_jax.gpt_block` with head-major `qkv` (`models.gpt_block(..., head_major=True)`)."""
    import jax

    from remat.bench.impl_jax import _layer_norm

    b, t, d = h.shape
    dh = d // heads
    qkv = _layer_norm(h, p["ln1_g"], p["ln1_b"]) @ p["qkv"]
    q, k, v = qkv.reshape(b, t, heads, 3, dh).transpose(3, 0, 2, 1, 4)
    scores = (q @ k.swapaxes(-1, -2)) * (1.0 / math.sqrt(dh)) + mask
    att = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    h = h + att @ p["proj"]
    m = _layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["fc"]
    return h + jax.nn.gelu(m, approximate=True) @ p["out"]


COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
# An instruction of optimized HLO text: `%name = <result type> <op>(operands), ...`; an async
# collective is a `-start` and a `-done`, counted at its start.
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.-]+\s*=\s*(.*?)\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(",
                          re.MULTILINE)
_ARRAY_TYPE = re.compile(r"\b[a-z]+(\d*)\[([\d,]*)\]")


def count_collectives(hlo: str) -> dict[str, int]:
    """How many of each collective (`COLLECTIVES`) an optimized HLO text holds
    (`jax.stages.Compiled.as_text()`, or `executables`').

    >>> count_collectives("%x = f32[4]{0} all-reduce(f32[4]{0} %y), to_apply=%add")["all-reduce"]
    1
    """
    counts = dict.fromkeys(COLLECTIVES, 0)
    for match in _INSTRUCTION.finditer(hlo):
        counts[match.group(2)] += 1
    return counts


def collective_bytes(hlo: str) -> dict[str, int]:
    """Bytes each kind of collective produces per device in an optimized HLO text: the sizes of
    the results (a tuple's elements summed), so an all-reduce of the gradients counts their bytes.

    >>> collective_bytes("%x = (f32[4]{0}, bf16[2,3]{1,0}) all-reduce(%a, %b), to_apply=%add")["all-reduce"]
    28
    """
    total = dict.fromkeys(COLLECTIVES, 0)
    for match in _INSTRUCTION.finditer(hlo):
        for bits, dims in _ARRAY_TYPE.findall(match.group(1)):
            size = math.prod(int(d) for d in dims.split(",") if d)
            total[match.group(2)] += size * max(int(bits or 8), 8) // 8  # pred (bool): a byte
    return total


def executables(fn, *args, **kwargs) -> list:
    """The XLA executables (`jax.stages.Compiled`) one call `fn(*args, **kwargs)` runs, for a
    function made by `rm.jit(..., backend="xla")`: a step is one. Their `as_text()` is the
    optimized, partitioned HLO, whose collectives `count_collectives` counts.

    >>> import numpy as np, remat as rm
    >>> f = rm.jit(lambda x: rm.sum(x * 2.0), backend="xla")
    >>> [count_collectives(e.as_text())["all-reduce"] for e in executables(f, np.ones(4, np.float32))]
    [0]
    """
    return [fn.lower(*args, **kwargs)._program.executable()]


def _map_qkv(params: dict, fn) -> dict:
    return {**params, "blocks": [{**b, "qkv": fn(b["qkv"])} for b in params["blocks"]]}


def _check_mesh(mesh, where: str, axes: tuple[str, ...]) -> None:
    if not isinstance(mesh, Mesh):
        raise ArgumentTypeError(f"{where}: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}; "
                                f"make one with Mesh(devices, {axes!r})")
    if tuple(mesh.axis_names) != axes:
        raise ArgumentValueError(
            f"{where}: mesh has axes {tuple(mesh.axis_names)!r}, this set-up needs exactly {axes!r}; "
            f"make the mesh with axis_names={axes!r}")


def _check_heads(heads, where: str) -> None:
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ArgumentValueError(f"{where}: heads must be a positive int, got {heads!r}")


def _check_params(params, where: str) -> None:
    """The parameter tree of `models.gpt_loss`: a dict with a list of block dicts."""
    blocks = params.get("blocks") if isinstance(params, dict) else None
    if not isinstance(blocks, (list, tuple)) or not all(isinstance(b, dict) and "qkv" in b for b in blocks):
        got = tree.flatten(params)[1] if isinstance(params, dict) else type(params).__name__
        raise ArgumentTypeError(
            f"{where}: params must be the GPT-style model's parameters (a dict whose 'blocks' is a list "
            f"of dicts with 'qkv', 'proj', 'fc', 'out', ...), as remat.bench.config.inputs makes them; got {got}")
