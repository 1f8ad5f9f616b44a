"""Multi-head latent attention (DeepSeek-V2/V3, HF ``DeepseekV3Attention``) for the rocm target, and its cache spec.

    q      = q_proj(x)                                  (q_lora_rank null)
           | q_b_proj(q_a_layernorm(q_a_proj(x)))        -> [T, H, dn + dr] = [q_nope | q_pe]
    c, kpe = kv_a_proj_with_mqa(x)                       -> [r | dr];  c = kv_a_layernorm(c)
    q_pe, kpe = RoPE(q_pe, kpe)                          (interleaved pairs when config.rope_interleave)
    cache  <- [c | kpe] per token (the latent cache: r + dr values per token and layer, not K/V heads)
    out    = o_proj(W_UV . attention([W_UK^T q_nope | q_pe], [c | kpe], value c))

The attention is the weight-absorbed form of runtime/layers/mla/ops.py for prefill and decode alike (one path, equal to
the un-absorbed decompression of HF's ``expand_kv``: tests/test_mla_ops.py). Tensor parallelism shards heads
(``q_proj``/``q_b_proj``/``kv_b_proj`` column-parallel by head, ``o_proj`` row-parallel); the latent path
(``q_a_proj``, ``kv_a_proj_with_mqa``, both norms) and the latent cache are replicated on every rank.

DSA (DeepSeek-V3.2, GLM-5: ``index_topk`` given) adds ``indexer.{wq_b, wk, k_norm, weights_proj}`` (replicated: every
rank selects the same keys), an index key per token after the latent in the cache row, and restricts each query's
attention to its top-``index_topk`` keys by index score (runtime/layers/mla/ops.py).

Shared DSA layers (GLM-5 ``indexer_types: shared``, ``index_shared=True``) have no indexer: like HF's
``prev_topk_indices`` they reuse the top-k of the nearest earlier layer that has one. That layer leaves its step's
index inputs ``(q_idx, w, k_idx)`` on the step's metadata (``dsa_index``); the shared layer stores the same ``k_idx``
after its own latent and selects with the same queries and weights, so its selection equals the source layer's at
every step (prefill, chunked prefill, decode) without passing masks between layers -- at the cost of the index key
in its cache row and one more top-k.

Parameter names are the checkpoint's, so the loader maps them one to one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..attention import AttentionMetadata
from ..kind import LayerKind
from ..linear import ColumnParallelLinear, ReplicatedLinear, RowParallelLinear
from ..norm import RMSNorm
from ..rotary import get_rope
from . import ops

CACHE_KIND = "paged_latent"


@dataclass(frozen=True)
class LatentCacheSpec:
    """One layer's latent cache: ``[num_blocks, block_size, latent_dim]`` with ``latent_dim = kv_lora_rank +
    qk_rope_head_dim`` (+ ``index_head_dim`` with DSA; the same on every rank). Bytes per token:
    ``latent_dim * itemsize``, against GQA's ``2 * kv_heads * head_dim * itemsize``."""

    name: str
    latent_dim: int
    dtype: torch.dtype
    kind: str = CACHE_KIND

    def bytes_per_token(self) -> int:
        return self.latent_dim * torch.empty((), dtype=self.dtype).element_size()

    def bytes_per_block(self, block_size: int) -> int:
        return block_size * self.bytes_per_token()

    def allocate(self, num_blocks: int, block_size: int, device: torch.device | str) -> list[torch.Tensor]:
        # Zeros: the static write path (neuron) subtracts the old contents, which must be finite.
        return [torch.zeros(num_blocks, block_size, self.latent_dim, dtype=self.dtype, device=device)]


class DSAIndexer(nn.Module):
    """The indexer's weights under the checkpoint's names (HF ``DeepseekV32Indexer``); the math is in ops.py."""

    def __init__(self, hidden_size: int, q_lora_rank: int, num_heads: int, head_dim: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.wq_b = ReplicatedLinear(q_lora_rank, num_heads * head_dim, bias=False)
        self.wk = ReplicatedLinear(hidden_size, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.weights_proj = ReplicatedLinear(hidden_size, num_heads, bias=False)


def shared_index_inputs(metadata: Any, layer_name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q_idx, w, k_idx)`` the nearest earlier DSA layer with an indexer left on this step's metadata (an
    ``AttentionMetadata`` attribute on rocm, a key of the per-step dict on neuron)."""
    got = metadata.get("dsa_index") if isinstance(metadata, dict) else getattr(metadata, "dsa_index", None)
    if got is None:
        raise ValueError(f"{layer_name}: a shared DSA layer needs an earlier layer with its own indexer (HF raises "
                         f"'Shared DSA layers require top-k indices from a previous full indexer layer')")
    return got


class MLAttention(LayerKind):
    cache_kind = CACHE_KIND

    def __init__(
        self,
        *,
        hidden_size: int,
        num_heads: int,
        q_lora_rank: int | None,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        bias: bool,
        latent_norm_eps: float,
        rope_interleave: bool,
        rope_style: str,
        max_position: int,
        rope_theta: float,
        rope_scaling: dict[str, Any] | None,
        scale: float | None,
        layer_name: str,
        index_heads: int | None = None,
        index_head_dim: int | None = None,
        index_topk: int | None = None,
        index_rope_style: str = "rotate_half",
        index_shared: bool = False,
    ):
        super().__init__()
        self.layer_name = layer_name
        self.q_lora_rank, self.kv_lora_rank = q_lora_rank, kv_lora_rank
        self.nope_dim, self.rope_dim, self.v_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        if q_lora_rank is None:
            self.q_proj = ColumnParallelLinear(hidden_size, num_heads * qk_head_dim, bias=False)
        else:
            self.q_a_proj = ReplicatedLinear(hidden_size, q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(q_lora_rank, eps=latent_norm_eps)
            self.q_b_proj = ColumnParallelLinear(q_lora_rank, num_heads * qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = ReplicatedLinear(hidden_size, kv_lora_rank + qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, eps=latent_norm_eps)
        self.kv_b_proj = ColumnParallelLinear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
        self.o_proj = RowParallelLinear(num_heads * v_head_dim, hidden_size, bias=bias)
        self.num_heads = self.kv_b_proj.out_features // (qk_nope_head_dim + v_head_dim)  # this rank's heads
        self.scale = ops.softmax_scale(qk_head_dim, rope_scaling) if scale is None else scale
        self.rotary_emb = get_rope(qk_rope_head_dim, qk_rope_head_dim, max_position, rope_theta, rope_scaling,
                                   ops.rope_style(rope_interleave, rope_style))
        self.index_topk, self.index_rope_style = index_topk, index_rope_style
        self.index_dim = 0
        if index_topk is not None:
            if q_lora_rank is None:
                raise ValueError(f"{layer_name}: the DSA indexer reads the low-rank query; q_lora_rank must be set")
            if not index_shared:
                self.indexer = DSAIndexer(hidden_size, q_lora_rank, index_heads, index_head_dim)
            self.index_dim = index_head_dim
        self.index_shared = index_shared and index_topk is not None
        self.cache: torch.Tensor | None = None  # bound by bind_kv_cache: [num_blocks, block_size, r + dr (+ Di)]

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        if self.cache is None:
            raise RuntimeError(f"{self.layer_name}: no latent cache bound (call bind_kv_cache first)")
        T = hidden_states.shape[0]
        if self.q_lora_rank is None:
            q = self.q_proj(hidden_states)
        else:
            q_resid = self.q_a_layernorm(self.q_a_proj(hidden_states))
            q = self.q_b_proj(q_resid)
        q_nope, q_pe = q.view(T, self.num_heads, -1).split([self.nope_dim, self.rope_dim], dim=-1)
        c, k_pe = self.kv_a_proj_with_mqa(hidden_states).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        c = self.kv_a_layernorm(c.contiguous())
        q_pe, k_pe = self.rotary_emb(positions, q_pe.contiguous(), k_pe.reshape(T, 1, self.rope_dim))
        row, index = [c, k_pe[:, 0]], None
        if self.index_shared:
            q_idx, w, k_idx = shared_index_inputs(attn_metadata, self.layer_name)
            row.append(k_idx)
            index = (q_idx, w, self.index_topk)
        elif self.index_topk is not None:
            ix = self.indexer
            q_idx, k_idx, w = ops.index_inputs(
                ix.wq_b(q_resid), ix.wk(hidden_states), ix.weights_proj(hidden_states), ix.k_norm.weight,
                ix.k_norm.bias, self.rotary_emb.cos_sin_cache, positions, self.rope_dim, self.index_rope_style,
            )
            # The step's index inputs, for the shared DSA layers after this one (a per-step scratch value).
            attn_metadata.dsa_index = (q_idx, w, k_idx)
            row.append(k_idx)
            index = (q_idx, w, self.index_topk)
        # Decode steps may be captured in CUDA graphs: their write is the shape-static one (no host sync).
        write = ops.write_latent if attn_metadata.is_prefill else ops.write_latent_static
        write(torch.cat(row, dim=-1), self.cache, attn_metadata.slot_mapping)

        w_uk, w_uv = ops.split_kv_b(self.kv_b_proj.weight, self.num_heads, self.nope_dim, self.v_dim)
        q = torch.cat([ops.absorb_query(q_nope, w_uk), q_pe], dim=-1)  # [T, H, r + dr]
        m = attn_metadata
        if m.is_prefill:
            o = ops.paged_prefill(q, self.cache, m.cu_seqlens_q, m.context_lens, m.block_tables, self.scale,
                                  self.kv_lora_rank, index)
        else:
            o = ops.paged_decode(q, self.cache, m.block_tables, m.context_lens, self.scale, self.kv_lora_rank, index)
        return self.o_proj(ops.expand_output(o, w_uv).reshape(T, self.num_heads * self.v_dim))

    def latent_cache_spec(self) -> LatentCacheSpec:
        return LatentCacheSpec(name=self.layer_name, latent_dim=self.kv_lora_rank + self.rope_dim + self.index_dim,
                               dtype=self.kv_a_proj_with_mqa.weight.dtype)

    # ------------------------------------------------------------------------- what the engine asks (LayerKind)
    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        # Every row writes its latent (write_latent_static) before the decode kernel reads the paged latents, so each
        # token may be its own decode row; the varlen path is not graphed for MLA.
        return frozenset({"rows"})

    def sequence_parallel_refusal(self) -> str | None:
        return "its latent-cache writes come from replicated projections of every token"

    def step_metadata_writes(self) -> bool:
        return getattr(self, "indexer", None) is not None  # attn_metadata.dsa_index, for the shared layers after it

    def step_metadata_reads(self) -> str | None:
        return "DSA layer {layer} shares the top-k of an indexer" if self.index_shared else None

    def linears_read_as_matrix(self) -> list[nn.Module]:
        return [self.kv_b_proj]  # split into the absorbed W_UK / W_UV (ops.split_kv_b), never called as a GEMM
