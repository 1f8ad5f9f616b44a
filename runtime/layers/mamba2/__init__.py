"""The Mamba-2 mixer (transformers ``Mamba2Mixer`` / ``BambaMixer`` / ``NemotronHMamba2Mixer``), one home for the
layer kind:

  layer.py  ``Mamba2`` over flattened tokens, its conv and SSM states in a ``runtime/state_cache.py`` pool slot
  ops.py    the torch references: projection split, causal depthwise conv over padded rows, the chunked SSD scan
            (prefill) and its recurrent step (decode), the gated grouped RMSNorm, and the shape-static mixer the
            neuron target calls
  vllm.py   the vllm target: vLLM's own ``MambaMixer2`` behind modelgen's constructor (imported only there)

Generated models import the layer names from here (``from modelgen.runtime.layers.mamba2 import ...``).
"""
from .layer import Mamba2

__all__ = ["Mamba2"]
