"""Gated DeltaNet pieces of the neuron target.

* :func:`gdn_mixer_static` (defined in ``runtime/layers/gated_deltanet/ops.py``, re-exported here for the generated
  neuron modules): the shape-static conv + gated delta rule over state-pool slots, one graph per bucket with
  ``torch.compile(fullgraph=True)``. Its metadata (``seq_ids`` per token, ``state_slots`` and ``state_fresh`` per row)
  is described beside it.
* :func:`head_parts_weight_loader`: the closure loader of GDN tensors sharded by heads (vLLM Neuron loader style).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .ops import gdn_mixer_static, read_state_rows, write_state_rows
from ...neuron.weight_loader import SafetensorsWeightLoader, _read

__all__ = ["gdn_mixer_static", "head_parts_weight_loader", "read_state_rows", "write_state_rows"]


def head_parts_weight_loader(
    parts: Sequence[Sequence[int]], num_shards: int, is_storage_transposed: bool = False
) -> SafetensorsWeightLoader:
    """Closure loader for Gated DeltaNet tensors sharded by heads in parts (the neuron twin of the rocm layer's
    ``HeadPartsParallelLinear`` / ``DepthwiseConv1dWeight`` / head-vector loaders).

    ``parts[i]`` lists the row blocks of checkpoint tensor ``i`` (dim 0, HF ``[out, ...]``), each split evenly across
    ranks; the rank's rows of every block of every tensor are concatenated in order. Examples:
      Qwen3.5 ``in_proj_qkvz`` from ``(in_proj_qkv, in_proj_z)``: ``[[Hk*Dk, Hk*Dk, Hv*Dv], [Hv*Dv]]``;
      Qwen3-Next ``in_proj_qkvz`` (interleaved per key head): ``[[total_rows]]``; ``conv1d.weight [C, 1, K]``:
      ``[[Hk*Dk, Hk*Dk, Hv*Dv]]``; ``A_log``: ``[[Hv]]``.
    2-D results are returned ``[in, out]`` when ``is_storage_transposed``.
    """

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        if len(slices) != len(parts):
            raise ValueError(f"head-sharded loader needs {len(parts)} checkpoint tensor(s), got {len(slices)}")
        pieces = []
        for i, (s, blocks) in enumerate(zip(slices, parts)):
            rows = s.get_shape()[0]
            if rows != sum(blocks):
                raise ValueError(f"checkpoint tensor {i} has {rows} rows, expected {sum(blocks)} ({list(blocks)})")
            start = 0
            for size in blocks:
                if size % num_shards:
                    raise ValueError(f"block of {size} rows is not divisible by the tensor-parallel size {num_shards}")
                local = size // num_shards
                pieces.append(_read(s, 0, start + rank * local, local))
                start += size
        t = torch.cat(pieces, dim=0)
        return t.t() if is_storage_transposed and t.dim() == 2 else t

    return SafetensorsWeightLoader(transform)
