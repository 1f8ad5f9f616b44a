"""Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5), one home for the layer kind:

  layer.py    ``GatedDeltaNet`` over flattened tokens, its state in a ``runtime/state_cache.py`` pool slot
  ops.py      the torch references: causal conv1d, gating, chunked and recurrent gated delta rule, static mixer
  kernels.py  the Triton kernels (gating, conv update, recurrent step, gated RMSNorm; fla's chunked prefill)
  neuron.py   what the generated neuron code calls: the static mixer and the head-parts weight loader

Generated models import the layer names from here (``from modelgen.runtime.layers.gated_deltanet import ...``).
"""
from .layer import QWEN3_5_PACKED_MODULES, GatedDeltaNet

__all__ = ["QWEN3_5_PACKED_MODULES", "GatedDeltaNet"]
