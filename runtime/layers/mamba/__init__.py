"""Mamba-1 selective-state-space mixer (transformers ``MambaMixer`` / ``JambaMambaMixer``), one home for the layer kind:

  layer.py  ``MambaMixer`` over flattened tokens, its conv history and SSM state in a ``runtime/state_cache.py`` slot
  ops.py    the torch references: causal depthwise conv + SiLU, the chunked selective scan (prefill) and its one-token
            recurrent step (decode), and the shape-static forms the neuron target calls
  vllm.py   the vllm target's wrapper of vLLM's own ``MambaMixer`` (imported only by generated vllm modules)

Generated models import the layer names from here (``from modelgen.runtime.layers.mamba import ...``).
"""
from .layer import MambaMixer

__all__ = ["MambaMixer"]
