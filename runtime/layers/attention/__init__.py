"""Paged attention (GQA / MHA / MQA over the paged K/V cache), one home for the layer kind:

  layer.py    ``PagedAttention`` and the step's ``AttentionMetadata`` (what every layer of a step reads)
  ops.py      the torch references: cache writes and paged prefill / decode attention (the definition, CPU path)
  kernels.py  the Triton kernels computing the same functions on the GPU (capturable in CUDA graphs)

Generated models import the layer names from here (``from modelgen.runtime.layers.attention import ...``).
"""
from .layer import AttentionMetadata, PagedAttention, head_sharded_loader, rank_alibi_slopes
from .ops import alibi_slopes

__all__ = ["AttentionMetadata", "PagedAttention", "alibi_slopes", "head_sharded_loader", "rank_alibi_slopes"]
