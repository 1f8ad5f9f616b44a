"""Blocks whose weights several decoder layers share (Zamba2's shared transformer), one home for the helpers their
generated classes build on:

  layer.py  ``LoRA`` (a per-use low-rank adapter, HF's ``nn.Sequential(Linear(in, r), Linear(r, out))``),
            ``load_stored_fused`` (a merged projection stored as one tensor), ``refuse_split_modes`` (no pipeline or
            attention data parallelism: later stages have no embeddings), and the per-layer caches of a shared
            attention: ``SharedPagedAttention`` (rocm: paged K/V of one use) and ``PagedKV`` (neuron: the cache
            tensors of one use) -- the weights are shared, every use keeps its own K/V;
  neuron.py ``merged_rows_loader``: the neuron target's closure loader of a stored fused projection;
  vllm.py   ``LoRA`` on vLLM's parallel linears (the vllm target; imported only there).

Generated models import the names from here (``from modelgen.runtime.layers.shared_block import ...``).
"""
from .layer import LoRA, PagedKV, SharedPagedAttention, load_stored_fused, refuse_split_modes

__all__ = ["LoRA", "PagedKV", "SharedPagedAttention", "load_stored_fused", "refuse_split_modes"]
