# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/dbrx.yaml --target rocm
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""Dbrx for the rocm target, in ATOM's style.

Mixture-of-experts decoder with GQA from a fused Wqkv (optional clip_qkv), bias-free LayerNorms, RoPE and softmax top-k
routing with p-norm renormalisation over DBRX's flat expert tensors.

Reference: transformers/models/dbrx/modeling_dbrx.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. Attention projects Q, K and V with one fused GEMM (``qkv_proj``) and reads and writes paged K/V blocks. Routed
experts run as one fused MoE op over stacked ``w13`` (gate then up) and ``w2`` weights. Fused weights load through
``weight_loader``s that take shard ids (``PACKED_MODULES_MAPPING``). Ops run aiter's kernels where aiter imports (ROCm),
otherwise the Triton kernels of ``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on the CPU
(``runtime/backends.py`` chooses; ``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec, LayerSpec
from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.linear import QKVParallelLinear, RowParallelLinear
from modelgen.runtime.layers.moe import FusedMoE, TopKRouter
from modelgen.runtime.layers.norm import LayerNorm
from modelgen.runtime.layers.rotary import get_rope
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping

from .config import DbrxConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class DbrxAttention(nn.Module):
    """GQA self-attention: fused QKV, RoPE (rotate_half), paged KV cache, row-parallel output."""

    def __init__(self, config: DbrxConfig, layer_idx: int):
        super().__init__()
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, self.head_dim, config.num_attention_heads, config.num_key_value_heads, bias=False
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)
        self.clip_qkv = config.clip_qkv  # None: not clamped
        self.rotary_emb = get_rope(
            self.head_dim,
            rotary_dim=self.head_dim,
            max_position=config.max_position_embeddings,
            base=config.rope_theta,
            scaling=config.rope_scaling,
            style="rotate_half",
        )
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, scale=self.head_dim ** -0.5,
            layer_name=f"layers.{layer_idx}.attn",
            rotary_emb=self.rotary_emb,  # RoPE is applied inside the cache-write / decode-attention kernels
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden_states)
        if self.clip_qkv is not None:
            qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        return self.o_proj(self.attn(q, k, v, attn_metadata, positions=positions))

    def kv_spec(self) -> LayerSpec:
        """This layer's cache, per rank: paged K and V blocks ``[num_blocks, num_kv_heads, block_size, head_dim]``."""
        return LayerSpec(
            name=self.attn.layer_name, num_kv_heads=self.num_kv_heads, head_size=self.head_dim,
            dtype=self.qkv_proj.weight.dtype, kind="paged_kv",
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.attn.k_cache, self.attn.v_cache = kv_caches[self.attn.layer_name]


class DbrxSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router, routed experts through the fused MoE op.

    Experts are stacked ``w13 [E, 2I, H]`` (gate then up) and ``w2 [E, H, I]``; each tensor-parallel rank owns a
    contiguous range of experts (expert parallelism) and the partial outputs are summed across ranks.
    """

    def __init__(self, config: DbrxConfig):
        super().__init__()
        self.router = TopKRouter(
            config.hidden_size,
            config.num_local_experts,
            top_k=config.num_experts_per_tok,
            scoring="softmax",
            renormalize=config.moe_normalize_expert_weights is not None,
            renormalize_p=config.moe_normalize_expert_weights or 1.0,
        )
        self.experts = FusedMoE(
            config.num_local_experts, config.hidden_size, config.intermediate_size, activation="silu",
            fused_layout="flat",  # checkpoint layout of the fused expert tensors
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = self.router(hidden_states)
        return self.experts(hidden_states, topk_weights, topk_ids)


class DbrxDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: DbrxConfig, layer_idx: int):
        super().__init__()
        self.attn = DbrxAttention(config, layer_idx)
        self.ffn = DbrxSparseMoeBlock(config)
        self.norm_1 = LayerNorm(config.hidden_size, eps=1e-05, bias=False)
        self.norm_2 = LayerNorm(config.hidden_size, eps=1e-05, bias=False)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        attn_metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.norm_1(hidden_states)
        else:
            hidden_states, residual = self.norm_1(hidden_states, residual)
        hidden_states = self.attn(positions, hidden_states, attn_metadata)
        hidden_states, residual = self.norm_2(hidden_states, residual)
        hidden_states = self.ffn(hidden_states)
        return hidden_states, residual


class DbrxModel(nn.Module):
    def __init__(self, config: DbrxConfig):
        super().__init__()
        self.wte = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DbrxDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm_f = LayerNorm(config.hidden_size, eps=1e-05, bias=False)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.wte(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.norm_f(hidden_states, residual)
        return hidden_states


class DbrxForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: DbrxConfig):
        super().__init__()
        self.config = config
        self.transformer = DbrxModel(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        if config.tie_word_embeddings:
            # One tensor in memory; the loader fills it through the embedding (TIED_PARAMETERS).
            self.lm_head.weight = self.transformer.wte.weight

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        """``input_ids, positions [num_tokens]`` -> final hidden states ``[num_tokens, hidden]``."""
        return self.transformer(input_ids, positions, attn_metadata)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Hidden states of the sampled positions -> logits over the full vocabulary (gathered across ranks)."""
        return self.lm_head.compute_logits(hidden_states)

    def get_kv_spec(self) -> KVSpec:
        """Every layer's cache, as its attention declares it."""
        return KVSpec(layers=[layer.attn.kv_spec() for layer in self.transformer.layers])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.transformer.layers:
            layer.attn.bind_kv_cache(kv_caches)

    def get_expert_mapping(self) -> ExpertMapping:
        """Routed-expert tables: per-expert and fused checkpoint names -> stacked parameters (and shared slots)."""
        return ExpertMapping(
            per_expert=EXPERT_PARAMS_MAPPING,
            fused=FUSED_EXPERT_MAPPING,
        )

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
