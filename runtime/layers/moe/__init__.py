"""Mixture of experts, one home for the layer kind:

  layer.py          ``TopKRouter`` and ``FusedMoE`` (stacked experts, expert parallelism)
  fp8.py, mxfp4.py  the quantized expert methods (FP8 block scales, MXFP4) a ``FusedMoE`` switches to before loading
  ops.py            the torch references: routing, fused experts, fused-checkpoint layouts
  kernels.py        the Triton MoE (route, align, gate-up, down, combine); kernels_fp8.py / kernels_mxfp4.py reuse it
  neuron.py         neuron closure loaders for fused expert tensors

Generated models import the layer names from here (``from modelgen.runtime.layers.moe import ...``).
"""
from .layer import FusedMoE, TopKRouter

__all__ = ["FusedMoE", "TopKRouter"]
