"""MiniMax lightning attention (``MiniMaxLightningAttention``), one home for the layer kind:

  layer.py  ``LightningAttention`` over flattened tokens, its ``[heads, D, D]`` state in a ``runtime/state_cache.py``
            pool slot
  ops.py    the torch references: the per-head decay schedule, blockwise prefill, the one-token recurrent step
            (decode) and the shape-static op the neuron target calls

Generated models import the layer names from here (``from modelgen.runtime.layers.lightning_attention import ...``).
"""
from .layer import LightningAttention

__all__ = ["LightningAttention"]
