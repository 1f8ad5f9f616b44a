"""The rocm target's attention module: writes K/V into the paged cache, then attends (prefill or decode).

The engine passes an :class:`AttentionMetadata` for the whole (flattened) batch; the module owns no sequence state.

Two implementations of the same function:
  * torch reference (CPU, or ``MODELGEN_BACKEND=torch``): the ops in ``runtime/layers/attention/ops.py``;
  * GPU (tensors on CUDA/HIP and Triton importable): ``runtime/layers/attention/kernels.py``. Prefill writes the new K/V
    with one kernel and runs a varlen flash kernel over the block tables; decode is one flash-decoding launch that
    also writes the step's K/V (plus a reduce launch when the context is split). No host syncs, no data-dependent
    shapes, so decode steps can be captured in CUDA graphs.

RoPE fusion: a model may hand its rotary module to the attention (``PagedAttention(..., rotary_emb=rope)``) and pass
``positions`` to ``forward``; then q and k arrive un-rotated and the GPU path rotates them inside the cache-write
(prefill) or attention (decode) kernel, saving the separate RoPE launch. Without it (today's generated code) the
model rotates first and the module receives rotated q and k.

QK-norm fusion: a model with per-head QK RMSNorm (Qwen3, GLM4, Qwen3-Next, Gemma 3: one weight ``[head_dim]`` shared
by the heads) may also hand its norms over (``PagedAttention(..., qk_norm=(q_norm, k_norm))``) and pass q and k
un-normalised. The torch path calls the two modules first (exactly what the model would have run); the GPU path, when
RoPE is fused too, normalises each head inside the same cache-write / decode launch before rotating it (ATOM's "QK norm
folded into the RoPE / cache-write kernel"), so the two norm launches and the round trip of q and k disappear.

Sliding windows, attention sinks and logit soft-capping (Mistral/Gemma-style windows, GPT-OSS, Gemma 2) are options
of both implementations: the Triton kernels take them as compile-time switches (a layer without them pays nothing),
with the references' semantics (``runtime/layers/attention/ops.py``).

Chunked attention (Llama 4 ``attention_chunk_size``) and ALiBi (Falcon ``alibi``) are options of the torch
references only: a layer with either runs the torch path on the GPU too (:data:`TORCH_ONLY`, its reason in
``torch_only``), never the Triton kernels, which would ignore them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ... import distributed as dist
from ...ops import gpu
from ..kind import STEP_LAYOUTS, LayerKind
from . import ops

# Options the Triton kernels do not implement -> why a layer with them runs the torch references on the GPU.
TORCH_ONLY = {
    "chunk": "chunked attention (attention_chunk_size) is not in the Triton paged-attention kernels",
    "alibi": "the ALiBi position bias is not in the Triton paged-attention kernels",
}


@dataclass
class AttentionMetadata:
    """Per-step batch description (flattened tokens ``[num_tokens]``), built by the engine.

    is_prefill    : True when some sequence has more than one new token (varlen path), else decode
    slot_mapping  : [num_tokens] int64 cache slot of each new token (-1 = padding, not written)
    cu_seqlens_q  : [num_seqs + 1] int32 query offsets of each sequence in the flattened batch
    context_lens  : [num_seqs] int32 cached + new tokens of each sequence after this step
    block_tables  : [num_seqs, max_blocks] int32 physical block of each logical block
    max_seqlen_q  : longest query of the batch
    decode_splits : GPU decode only: context splits per (sequence, KV head); None = chosen from the shapes
    state         : per-sequence state-slot description for recurrent layers (Gated DeltaNet), or None when the
                    model has none (:class:`~modelgen.runtime.layers.gated_deltanet.StateMetadata`)
    """

    is_prefill: bool
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    context_lens: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int
    decode_splits: int | None = None
    state: Any = None


class PagedAttention(LayerKind):
    cache_kind = "paged_kv"

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, layer_name: str,
        rotary_emb: nn.Module | None = None, sliding_window: int | None = None, softcap: float | None = None,
        qk_norm: tuple[nn.Module, nn.Module] | None = None, chunk: int | None = None,
        alibi_slopes: torch.Tensor | None = None, alibi_scale: float = 1.0, alibi_bf16: bool = False,
    ):
        """``chunk``: Llama 4's attention chunk (a query sees only the keys of its own ``position // chunk``; None:
        off). ``alibi_slopes [num_heads]``: this rank's heads' ALiBi slopes (None: no ALiBi), the bias
        ``alibi_scale * slopes[h] * k`` formed in bfloat16 when ``alibi_bf16`` (:class:`ops.Alibi`)."""
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale
        self.sliding_window = ops.check_sliding_window(sliding_window, layer_name)  # None: full causal attention
        self.softcap = ops.check_softcap(softcap, layer_name)  # None: scores not soft-capped
        self.chunk = ops.check_chunk(chunk, layer_name)  # None: no chunking
        if alibi_slopes is not None:
            if alibi_slopes.shape != (num_heads,):
                raise ValueError(f"{layer_name}: alibi_slopes has shape {tuple(alibi_slopes.shape)}, expected "
                                 f"({num_heads},) (this rank's heads)")
            self.register_buffer("alibi_slopes", alibi_slopes.float(), persistent=False)
        else:
            self.alibi_slopes = None
        self.alibi_scale, self.alibi_bf16 = float(alibi_scale), bool(alibi_bf16)
        # Why this layer runs the torch references on the GPU (None: the Triton kernels serve it).
        self.torch_only = (TORCH_ONLY["chunk"] if self.chunk is not None
                           else TORCH_ONLY["alibi"] if alibi_slopes is not None else None)
        self.layer_name = layer_name
        # Optional fused RoPE (see module docstring); held outside the module tree so it is not a submodule twice.
        self._rotary = [rotary_emb] if rotary_emb is not None else []
        # Optional per-head (q_norm, k_norm), applied before RoPE; held outside the tree like the rotary module (the
        # model owns them: their checkpoint names stay ``self_attn.q_norm`` / ``self_attn.k_norm``).
        self._qk_norm = tuple(qk_norm) if qk_norm is not None else ()
        self.k_cache: torch.Tensor | None = None  # bound by the engine (bind_kv_cache)
        self.v_cache: torch.Tensor | None = None

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata,
        positions: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``q [T, H, D]``, ``k, v [T, KVH, D]`` -> ``[T, H * D]`` (q, k un-rotated only when ``positions`` is given
        and a rotary module was bound; un-normalised when QK norms were bound); ``sinks [H]``: this rank's per-head
        sink logits (GPT-OSS), or None."""
        if self.k_cache is None:
            raise RuntimeError(f"{self.layer_name}: no KV cache bound (call bind_kv_cache first)")
        rotary = self._rotary[0] if (self._rotary and positions is not None) else None
        if self.torch_only is None and gpu.enabled(q):
            qk_norm = self._fused_qk_norm(q) if rotary is not None else None
            if qk_norm is None and self._qk_norm:
                q, k = self._qk_norm[0](q), self._qk_norm[1](k)
            return self._forward_gpu(q, k, v, meta, rotary, positions, sinks, qk_norm)
        if self._qk_norm:
            q, k = self._qk_norm[0](q), self._qk_norm[1](k)
        if rotary is not None:
            q, k = rotary(positions, q, k)
        if self.torch_only is not None and q.is_cuda:  # no host sync: a decode step stays graph-capturable
            ops.write_paged_kv_static(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        else:
            ops.write_paged_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        alibi = None
        if self.alibi_slopes is not None:
            alibi = ops.Alibi(self.alibi_slopes, self.alibi_scale, self.alibi_bf16)
        if meta.is_prefill:
            o = ops.paged_prefill_attention(
                q, self.k_cache, self.v_cache, meta.cu_seqlens_q, meta.context_lens, meta.block_tables, self.scale,
                sliding_window=self.sliding_window, sinks=sinks, softcap=self.softcap, chunk=self.chunk, alibi=alibi,
            )
        else:
            o = ops.paged_decode_attention(
                q, self.k_cache, self.v_cache, meta.block_tables, meta.context_lens, self.scale,
                sliding_window=self.sliding_window, sinks=sinks, softcap=self.softcap, chunk=self.chunk, alibi=alibi,
            )
        return o.reshape(o.shape[0], self.num_heads * self.head_dim)

    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        if self.torch_only is not None and tokens_per_seq > 1:
            return frozenset()  # the torch prefill reference reads per-sequence lengths on the host: run eagerly
        # One token per sequence: either layout. More: not "rows" -- the Triton decode kernel writes a row's own K/V
        # inside the launch that the sequence's later rows read (a race); the varlen write-then-attend path is exact.
        return STEP_LAYOUTS if tokens_per_seq == 1 else frozenset({"varlen"})

    def _fused_qk_norm(self, q: torch.Tensor) -> tuple | None:
        """``(q_weight, k_weight, eps, mode)`` for the kernels when the bound norms are affine RMSNorms over
        ``head_dim`` in the activation dtype (every per-head QK norm a spec declares today); None = apply the modules."""
        if not self._qk_norm:
            return None
        from ..norm import RMSNorm

        qn, kn = self._qk_norm
        if not all(isinstance(n, RMSNorm) and n.weight is not None and n.weight.dtype == q.dtype
                   and n.weight.shape == (self.head_dim,) and n.eps == qn.eps for n in (qn, kn)):
            return None
        if (qn.zero_centred, qn.weight_float32) != (kn.zero_centred, kn.weight_float32):
            return None
        mode = "zero_centred_rms" if qn.zero_centred else ("rms_float32" if qn.weight_float32 else "rms")
        return qn.weight, kn.weight, qn.eps, mode

    def _forward_gpu(self, q, k, v, meta, rotary, positions, sinks=None, qk_norm=None) -> torch.Tensor:
        from . import kernels as gpu_attn

        rope = None
        if rotary is not None:
            rope = (positions, rotary.cos_sin_cache, rotary.rotary_dim, rotary.style == "pairwise")
        if meta.is_prefill:
            q_rot, _ = gpu_attn.write_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping, q=q, rope=rope,
                                       qk_norm=qk_norm)
            if rope is not None:
                q = q_rot
            o = gpu_attn.paged_prefill(
                q, self.k_cache, self.v_cache, meta.cu_seqlens_q, meta.context_lens, meta.block_tables, self.scale,
                meta.max_seqlen_q, sliding_window=self.sliding_window, sinks=sinks, softcap=self.softcap,
            )
        else:
            o = gpu_attn.paged_decode(
                q, k, v, self.k_cache, self.v_cache, meta.block_tables, meta.context_lens, meta.slot_mapping,
                self.scale, num_splits=meta.decode_splits, rope=rope, sliding_window=self.sliding_window, sinks=sinks,
                softcap=self.softcap, qk_norm=qk_norm,
            )
        return o.view(o.shape[0], self.num_heads * self.head_dim)


def head_sharded_loader(param: nn.Parameter, loaded: torch.Tensor) -> None:
    """``weight_loader`` of a per-query-head vector (GPT-OSS ``self_attn.sinks [num_heads]``): this rank keeps the
    slice of its heads, ``[rank * H_local, (rank + 1) * H_local)``, as QKVParallelLinear shards the queries."""
    local = param.shape[0]
    if loaded.dim() != 1 or loaded.shape[0] != local * dist.tp_size():
        raise ValueError(f"checkpoint tensor has shape {tuple(loaded.shape)}, expected ({local * dist.tp_size()},)")
    param.data.copy_(loaded.narrow(0, dist.tp_rank() * local, local))


def rank_alibi_slopes(num_heads: int, heads_per_rank: int) -> torch.Tensor:
    """This rank's heads' ALiBi slopes ``[heads_per_rank]`` (float32) of a ``num_heads``-head attention: the slice
    ``[rank * heads_per_rank, (rank + 1) * heads_per_rank)``, as QKVParallelLinear shards the queries."""
    rank = dist.tp_rank()
    return ops.alibi_slopes(num_heads)[rank * heads_per_rank:(rank + 1) * heads_per_rank]
