"""Host side shared by the quantized-expert MoE kernels (``moe_fp8.py``, ``moe_mxfp4.py``): moe.py's expert alignment
and combine launches around their own GEMM kernels (imported, not copied; launch-chaining switches moe.py's kernels
may have, ``PDL``, off: the kernels launched around them here do not chain)."""
from __future__ import annotations

import torch
import triton

from . import next_pow2
from .moe import _align_kernel, _combine_kernel, padded_rows


def plain_launch(kernel) -> dict:
    return {"PDL": False} if "PDL" in getattr(kernel, "arg_names", ()) else {}


def align(topk_ids: torch.Tensor, P: int, KT: int, k: int, expert_offset: int, L: int, S: int, BM: int):
    """(sorted pair ids, expert id per row block, padded row count [1], number of row blocks): the pairs of this
    rank's ``L`` experts and ``S`` shared slots sorted by slot, each slot's rows padded to a multiple of ``BM``;
    buffers sized for the worst case so the grid does not depend on the routing (moe.py ``_align_kernel``)."""
    max_padded = padded_rows(P, L + S, BM)
    max_blocks = max_padded // BM
    dev = topk_ids.device
    nb = next_pow2(L + S + 1)
    sorted_ids = torch.empty(max_padded, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(max_blocks, dtype=torch.int32, device=dev)
    scratch = torch.empty(1 + nb, dtype=torch.int32, device=dev)  # [padded row count | per-expert cursors]
    _align_kernel[(1,)](
        topk_ids, sorted_ids, expert_ids, scratch[:1], scratch[1:],
        topk_ids.stride(0), P, KT, k, int(expert_offset), L, L + S, max_padded, max_blocks,
        BLOCK_M=BM, NB=nb, CHUNK=1024 if P > 256 else 256, CHUNK_B=128, num_warps=4, **plain_launch(_align_kernel),
    )
    return sorted_ids, expert_ids, scratch[:1], max_blocks


def combine(pair_out: torch.Tensor, topk_ids: torch.Tensor, out: torch.Tensor, KT: int, k: int, expert_offset: int,
            L: int) -> torch.Tensor:
    """``out[t] = sum`` of token t's weighted pair outputs this rank computed, in fp32, rounded once."""
    T, H = out.shape
    block_h = min(1024, next_pow2(H))
    _combine_kernel[(T, triton.cdiv(H, block_h))](
        pair_out, topk_ids, out, H, KT, k, int(expert_offset), L, topk_ids.stride(0), pair_out.stride(0),
        out.stride(0), BKT=max(2, next_pow2(KT)), BLOCK_H=block_h, num_warps=4, **plain_launch(_combine_kernel),
    )
    return out
