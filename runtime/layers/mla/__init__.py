"""Multi-head latent attention (DeepSeek-V2/V3, GLM-5 with the DSA indexer), one home for the layer kind:

  layer.py    ``MLAttention`` (weight-absorbed), ``DSAIndexer``, the latent cache's ``LatentCacheSpec``
  ops.py      the torch references: absorbed attention over the paged latents, DSA top-k selection
  kernels.py  the Triton decode kernel over the paged latents

Generated models import the layer names from here (``from modelgen.runtime.layers.mla import ...``).
"""
from .layer import LatentCacheSpec, MLAttention, shared_index_inputs

__all__ = ["LatentCacheSpec", "MLAttention", "shared_index_inputs"]
