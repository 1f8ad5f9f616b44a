"""LFM2 short convolution (``Lfm2ShortConv``), one home for the layer kind:

  layer.py  ``ShortConv`` over flattened tokens, its conv history in a ``runtime/state_cache.py`` pool slot
  ops.py    the torch references: gated input, causal depthwise conv over a prompt (prefill) and its one-step update
            (decode), and the shape-static mixer the neuron target calls

Generated models import the layer names from here (``from modelgen.runtime.layers.short_conv import ...``).
"""
from .layer import ShortConv

__all__ = ["ShortConv"]
