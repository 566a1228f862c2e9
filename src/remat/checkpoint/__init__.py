"""The checkpoint: `rm.checkpoint`, `rm.remat`, `rm.checkpoint_sequential`.

- `block.py`: the block, one node holding its body Graph, which inputs are explicit, a policy;
  its rules (gradient, forward mode, vmap, pruning) and backend implementations.
- `derived.py`: values its derivative rules compute from primal values alone, which a policy may
  save too.
- `cache.py`: eager calls, traced once per signature.

The policies are `rm.policies` (remat/policies.py).

"""

from remat.checkpoint.block import checkpoint, checkpoint_sequential, remat

__all__ = ["checkpoint", "checkpoint_sequential", "remat"]
