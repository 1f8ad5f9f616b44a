"""Triton version of ``runtime/ops/tokens.py::chain_token_ids``: one launch instead of torch's five (not, clamp,
gather, compare, where) at the head of every graphed decode step."""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _chain_kernel(ids_ptr, chain_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    t = tl.load(ids_ptr + offs, mask=mask, other=0)
    fed = t < 0
    prev = tl.load(chain_ptr + (-1 - t), mask=mask & fed, other=0)
    tl.store(out_ptr + offs, tl.where(fed, prev, t), mask=mask)


def chain_token_ids(ids: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
    flat = ids.reshape(-1).contiguous()
    out = torch.empty_like(flat)
    n = flat.numel()
    if n:
        block = min(1024, triton.next_power_of_2(n))
        _chain_kernel[(triton.cdiv(n, block),)](flat, chain, out, n, BLOCK=block, num_warps=1 if block <= 256 else 4)
    return out.view(ids.shape)
