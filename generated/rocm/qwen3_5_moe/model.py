# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5_moe.yaml --target rocm
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Qwen35Moe for the rocm target, in ATOM's style.

Qwen3.5 mixture-of-experts text model: Gated DeltaNet linear attention (split projections) with gated full attention
every full_attention_interval-th layer; every layer MoE with a sigmoid-gated shared expert.

Reference: transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. Attention projects Q, K and V with one fused GEMM (``qkv_proj``) and reads and writes paged K/V blocks. Gated
DeltaNet layers keep one recurrent state per request (conv history + delta-rule state) instead of paged blocks. The
MLP's gate and up projections are one fused GEMM (``gate_up_proj``). Routed experts run as one fused MoE op over stacked
``w13`` (gate then up) and ``w2`` weights. Fused weights load through ``weight_loader``s that take shard ids
(``PACKED_MODULES_MAPPING``). Ops run aiter's kernels where aiter imports (ROCm), otherwise the Triton kernels of
``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on the CPU (``runtime/backends.py`` chooses;
``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec, LayerSpec
from modelgen.runtime.layers.activation import SiluAndMul
from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.gated_deltanet import GatedDeltaNet
from modelgen.runtime.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
)
from modelgen.runtime.layers.moe import FusedMoE, TopKRouter, shared_slot
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.layers.rotary import get_rope
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping
from modelgen.runtime.state_cache import StateSpec

from .config import Qwen35MoeConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class Qwen35MoeAttention(nn.Module):
    """GQA self-attention: fused QKV, per-head QK RMSNorm, RoPE (rotate_half, partial), paged KV cache, row-parallel
    output."""

    def __init__(self, config: Qwen35MoeConfig, layer_idx: int):
        super().__init__()
        self.head_dim = config.head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            config.num_attention_heads,
            config.num_key_value_heads,
            bias=config.attention_bias,
            gated_query=True,
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.attention_bias
        )
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps, zero_centred=True)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps, zero_centred=True)
        self.rotary_emb = get_rope(
            self.head_dim,
            rotary_dim=int(self.head_dim * config.partial_rotary_factor),
            max_position=config.max_position_embeddings,
            base=config.rope_theta,
            scaling=config.rope_scaling,
            style="rotate_half",
        )
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, scale=self.head_dim ** -0.5,
            layer_name=f"layers.{layer_idx}.self_attn",
            rotary_emb=self.rotary_emb,  # RoPE is applied inside the cache-write / decode-attention kernels
            # q and k arrive un-normalised: the norms run before RoPE (on the GPU, inside the same kernels)
            qk_norm=(self.q_norm, self.k_norm),
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden_states)
        q_gate, k, v = qkv.split([2 * self.q_size, self.kv_size, self.kv_size], dim=-1)
        # Per head: [query (head_dim) | output gate (head_dim)], as HF's q_proj(x).view(..., 2 * head_dim).chunk(2)
        q, gate = q_gate.view(-1, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q, gate = q.contiguous(), gate.reshape(-1, self.q_size)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        return self.o_proj(self.attn(q, k, v, attn_metadata, positions=positions) * torch.sigmoid(gate))

    def kv_spec(self) -> LayerSpec:
        """This layer's cache, per rank: paged K and V blocks ``[num_blocks, num_kv_heads, block_size, head_dim]``."""
        return LayerSpec(
            name=self.attn.layer_name, num_kv_heads=self.num_kv_heads, head_size=self.head_dim,
            dtype=self.qkv_proj.weight.dtype, kind="paged_kv",
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.attn.k_cache, self.attn.v_cache = kv_caches[self.attn.layer_name]


class Qwen35MoeGatedDeltaNet(GatedDeltaNet):
    """Gated DeltaNet linear attention (qwen3_5 projection layout): projections -> causal conv1d + SiLU over
    q/k/v -> gated delta rule over the request's recurrent state -> gated RMSNorm -> out_proj.

    Parameters keep the checkpoint's names (``in_proj_qkvz``, ``in_proj_ba``, ``conv1d``, ``A_log``, ``dt_bias``,
    ``norm``, ``out_proj``); the state lives in the engine's state pool, one slot per request (``kv_spec``).
    """

    def __init__(self, config: Qwen35MoeConfig, layer_idx: int):
        super().__init__(
            hidden_size=config.hidden_size,
            num_k_heads=config.linear_num_key_heads,
            num_v_heads=config.linear_num_value_heads,
            head_k_dim=config.linear_key_head_dim,
            head_v_dim=config.linear_value_head_dim,
            conv_kernel=config.linear_conv_kernel_dim,
            rms_norm_eps=config.rms_norm_eps,
            layout="qwen3_5",
            layer_name=f"layers.{layer_idx}.linear_attn",
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        # Position-free: the conv history and the delta-rule state carry the order; `state` names each sequence's slot.
        return super().forward(hidden_states, attn_metadata.state)

    def kv_spec(self) -> StateSpec:
        """This layer's cache, per rank: one recurrent_state slot per request (conv history + delta-rule state)."""
        return self.state_spec()

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.bind_state(*kv_caches[self.layer_name])


class Qwen35MoeMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(self, config: Qwen35MoeConfig, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [intermediate_size] * 2, bias=False)
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=False)
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class Qwen35MoeSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router + shared experts, routed experts through the fused MoE op.

    Experts are stacked ``w13 [E, 2I, H]`` (gate then up) and ``w2 [E, H, I]``; each tensor-parallel rank owns a
    contiguous range of experts (expert parallelism) and the partial outputs are summed across ranks.
    """

    def __init__(self, config: Qwen35MoeConfig):
        super().__init__()
        self.gate = TopKRouter(
            config.hidden_size,
            config.num_experts,
            top_k=config.num_experts_per_tok,
            scoring="softmax",
            renormalize=True,
            weights_in_model_dtype=True,  # HF casts the top-k weights to the model dtype
        )
        self.experts = FusedMoE(
            config.num_experts, config.hidden_size, config.moe_intermediate_size, activation="silu"
        )
        self.shared_expert = Qwen35MoeMLP(config, config.shared_expert_intermediate_size)
        self.shared_expert_gate = ReplicatedLinear(config.hidden_size, 1, bias=False)

    def process_weights_after_loading(self) -> None:
        # The gated shared expert as slot E of the stacked experts and its gate as row E of the router weight (views:
        # held once), where runtime/layers/moe/shared_slot.py's rules allow (one rank, shared width == experts').
        shared_slot.fold(self.gate, self.experts, self.shared_expert, self.shared_expert_gate)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if shared_slot.active(self.gate, self.experts, hidden_states):
            # Triton GPU path: router GEMV over E + 1 rows, route (+ the sigmoid gate), gate-up, down: ~4 launches
            # instead of ~12 (the separate shared MLP, gate linear, sigmoid, multiply and add are launch-bound at bs1).
            return shared_slot.forward(self.gate, self.experts, hidden_states)
        topk_weights, topk_ids = self.gate(hidden_states)
        shared = self.shared_expert(hidden_states)
        shared = torch.sigmoid(self.shared_expert_gate(hidden_states)) * shared  # per-token gate of the shared expert
        return self.experts(hidden_states, topk_weights, topk_ids) + shared


class Qwen35MoeDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: Qwen35MoeConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block == "full":
            self.self_attn = Qwen35MoeAttention(config, layer_idx)
        else:
            self.linear_attn = Qwen35MoeGatedDeltaNet(config, layer_idx)
        self.mlp = Qwen35MoeSparseMoeBlock(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, zero_centred=True)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, zero_centred=True)

    def get_attention(self) -> nn.Module:
        """This layer's attention module (its name depends on the layer's block)."""
        if self.block == "full":
            return self.self_attn
        else:
            return self.linear_attn

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
        hidden_states = self.get_attention()(positions, hidden_states, attn_metadata)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class Qwen35MoeModel(nn.Module):
    def __init__(self, config: Qwen35MoeConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Qwen35MoeDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, zero_centred=True)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class Qwen35MoeForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: Qwen35MoeConfig):
        super().__init__()
        self.config = config
        self.model = Qwen35MoeModel(config)
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
        return KVSpec(layers=[layer.get_attention().kv_spec() for layer in self.model.layers])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            layer.get_attention().bind_kv_cache(kv_caches)

    def get_expert_mapping(self) -> ExpertMapping:
        """Routed-expert tables: per-expert and fused checkpoint names -> stacked parameters (and shared slots)."""
        return ExpertMapping(
            per_expert=EXPERT_PARAMS_MAPPING,
            fused=FUSED_EXPERT_MAPPING,
        )

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
