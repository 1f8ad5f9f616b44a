# ==================================================================================================================
# GENERATED FROM specs/deepseek_v2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/deepseek_v2.yaml --target rocm
# source hash (spec + templates + generator): 5fd290e32d6c3b46
# ==================================================================================================================
"""DeepseekV2 for the rocm target, in ATOM's style.

Mixture-of-experts decoder with multi-head latent attention (latent KV cache), softmax top-k routing with shared
experts.

Reference: transformers/models/deepseek_v2/modeling_deepseek_v2.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. Multi-head latent attention has no fused QKV: its low-rank projections stay separate GEMMs, and it caches one
compressed latent per token instead of K and V. The MLP's gate and up projections are one fused GEMM (``gate_up_proj``).
Routed experts run as one fused MoE op over stacked ``w13`` (gate then up) and ``w2`` weights. Fused weights load
through ``weight_loader``s that take shard ids (``PACKED_MODULES_MAPPING``). Ops run aiter's kernels where aiter imports
(ROCm), otherwise the Triton kernels of ``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on the CPU
(``runtime/backends.py`` chooses; ``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec
from modelgen.runtime.layers.activation import SiluAndMul
from modelgen.runtime.layers.attention import AttentionMetadata
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.linear import MergedColumnParallelLinear, RowParallelLinear
from modelgen.runtime.layers.mla import LatentCacheSpec, MLAttention
from modelgen.runtime.layers.moe import FusedMoE, TopKRouter
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping

from .config import DeepseekV2Config
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    SHARED_EXPERT_MAPPING,
    TIED_PARAMETERS,
)


class DeepseekV2Attention(MLAttention):
    """Multi-head latent attention: low-rank query, compressed KV latent + shared RoPE key, kv_b_proj absorbed into
    the query and the output, one paged_latent entry per token (kv_lora_rank + qk_rope_head_dim values).

    Parameters keep the checkpoint's names (``q_a_proj``/``q_a_layernorm``/``q_b_proj`` or ``q_proj``,
    ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``).
    """

    def __init__(self, config: DeepseekV2Config, layer_idx: int):
        super().__init__(
            hidden_size=config.hidden_size,
            num_heads=config.num_attention_heads,
            q_lora_rank=config.q_lora_rank,
            kv_lora_rank=config.kv_lora_rank,
            qk_nope_head_dim=config.qk_nope_head_dim,
            qk_rope_head_dim=config.qk_rope_head_dim,
            v_head_dim=config.v_head_dim,
            bias=config.attention_bias,
            latent_norm_eps=1e-06,
            rope_interleave=True,
            rope_style="rotate_half",
            max_position=config.max_position_embeddings,
            rope_theta=config.rope_theta,
            rope_scaling=config.rope_scaling,
            scale=None,
            layer_name=f"layers.{layer_idx}.self_attn",
        )

    def kv_spec(self) -> LatentCacheSpec:
        """This layer's cache (replicated on every rank): one latent of kv_lora_rank + qk_rope_head_dim per token."""
        return self.latent_cache_spec()

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        (self.cache,) = kv_caches[self.layer_name]


class DeepseekV2MLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(self, config: DeepseekV2Config, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [intermediate_size] * 2, bias=False)
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=False)
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class DeepseekV2SparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router (grouped) + shared experts, routed experts through the fused MoE op.

    Experts are stacked ``w13 [E, 2I, H]`` (gate then up) and ``w2 [E, H, I]``; each tensor-parallel rank owns a
    contiguous range of experts (expert parallelism) and the partial outputs are summed across ranks.
    """

    def __init__(self, config: DeepseekV2Config):
        super().__init__()
        self.gate = TopKRouter(
            config.hidden_size,
            config.n_routed_experts,
            top_k=config.num_experts_per_tok,
            scoring="softmax",
            renormalize=False,
            n_group=config.expert_groups,
            topk_group=config.topk_group,
            group_score="max",
            routed_scaling_factor=config.routed_scaling_factor,
            float32=True,  # router weight and scores in float32 (HF keeps it out of bf16)
        )
        # Shared experts ride in the fused op as extra expert slots with weight 1 (ATOM's shared-expert fusion);
        # their checkpoint tensors are split into slots by SHARED_EXPERT_MAPPING.
        self.experts = FusedMoE(
            config.n_routed_experts, config.hidden_size, config.moe_intermediate_size, activation="silu",
            num_shared_experts=config.n_shared_experts,
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = self.gate(hidden_states)
        return self.experts(hidden_states, topk_weights, topk_ids)


class DeepseekV2DecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: DeepseekV2Config, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.self_attn = DeepseekV2Attention(config, layer_idx)
        if block == "dense":
            self.mlp = DeepseekV2MLP(config, config.intermediate_size)
        else:
            self.mlp = DeepseekV2SparseMoeBlock(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        attn_metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states, attn_metadata)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class DeepseekV2Model(nn.Module):
    def __init__(self, config: DeepseekV2Config):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DeepseekV2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class DeepseekV2ForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: DeepseekV2Config):
        super().__init__()
        self.config = config
        self.model = DeepseekV2Model(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        if config.tie_word_embeddings:
            # One tensor in memory; the loader fills it through the embedding (TIED_PARAMETERS).
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        """``input_ids, positions [num_tokens]`` -> final hidden states ``[num_tokens, hidden]``."""
        return self.model(input_ids, positions, attn_metadata)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Hidden states of the sampled positions -> logits over the full vocabulary (gathered across ranks)."""
        return self.lm_head.compute_logits(hidden_states)

    def get_kv_spec(self) -> KVSpec:
        """Every layer's cache, as its attention declares it."""
        return KVSpec(layers=[layer.self_attn.kv_spec() for layer in self.model.layers])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            layer.self_attn.bind_kv_cache(kv_caches)

    def get_expert_mapping(self) -> ExpertMapping:
        """Routed-expert tables: per-expert and fused checkpoint names -> stacked parameters (and shared slots)."""
        return ExpertMapping(
            per_expert=EXPERT_PARAMS_MAPPING,
            fused=FUSED_EXPERT_MAPPING,
            shared=SHARED_EXPERT_MAPPING,
        )

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
