# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/bamba.yaml --target rocm
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""Bamba for the rocm target, in ATOM's style.

Hybrid decoder: Mamba-2 (SSD) mixers with per-request conv and SSM states and GQA attention layers with partial RoPE
(attn_layer_indices), each followed by a SwiGLU MLP; RMSNorm.

Reference: transformers/models/bamba/modeling_bamba.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. Attention projects Q, K and V with one fused GEMM (``qkv_proj``) and reads and writes paged K/V blocks. The
Mamba-2 mixers keep a conv state and an SSM state per request in the engine's state pool (chunked scan for prefill, one
recurrent step per decoded token). The MLP's gate and up projections are one fused GEMM (``gate_up_proj``). Fused
weights load through ``weight_loader``s that take shard ids (``PACKED_MODULES_MAPPING``). Ops run aiter's kernels where
aiter imports (ROCm), otherwise the Triton kernels of ``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on
the CPU (``runtime/backends.py`` chooses; ``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec, LayerSpec
from modelgen.runtime.layers.activation import SiluAndMul
from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from modelgen.runtime.layers.mamba2 import Mamba2
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.layers.rotary import get_rope
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping
from modelgen.runtime.state_cache import StateSpec

from .config import BambaConfig
from .weights import (
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class BambaAttention(nn.Module):
    """GQA self-attention: fused QKV, RoPE (rotate_half, partial), paged KV cache, row-parallel output."""

    def __init__(self, config: BambaConfig, layer_idx: int):
        super().__init__()
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            config.num_attention_heads,
            config.num_key_value_heads,
            bias=config.attention_bias,
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.attention_bias
        )
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
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden_states)
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


class BambaMixer(Mamba2):
    """Mamba-2 mixer: in_proj -> [z, xBC, dt]; act(causal depthwise conv1d(xBC)) -> x, B, C; the selective scan
    (SSD) with A = -exp(A_log), dt = softplus(dt + dt_bias) clamped, the D skip; RMSNorm(y * silu(z)) per group;
    out_proj.

    Parameters keep the checkpoint's names (``in_proj``, ``conv1d``, ``dt_bias``, ``A_log``, ``D``, ``norm``,
    ``out_proj``); each request's conv inputs and SSM state live in the engine's state pool, one slot per request
    (``kv_spec``).
    """

    def __init__(self, config: BambaConfig, layer_idx: int):
        super().__init__(
            hidden_size=config.hidden_size,
            num_heads=config.mamba_n_heads,
            head_dim=config.mamba_d_head,
            state_size=config.mamba_d_state,
            n_groups=config.mamba_n_groups,
            conv_kernel=config.mamba_d_conv,
            chunk_size=config.mamba_chunk_size,
            time_step_limit=tuple(config.time_step_limit),
            use_bias=config.mamba_proj_bias,
            use_conv_bias=config.mamba_conv_bias,
            activation=config.hidden_act,
            eps=config.rms_norm_eps,
            intermediate_size=config.mamba_expand * config.hidden_size,
            layer_name=f"layers.{layer_idx}.mamba",
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        # Position-free: the states carry the order; `state` names each sequence's slot.
        return super().forward(hidden_states, attn_metadata.state)

    def kv_spec(self) -> StateSpec:
        """This layer's cache, per rank: one recurrent_state slot per request (conv inputs and SSM state)."""
        return self.state_spec()

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.bind_state(*kv_caches[self.layer_name])


class BambaMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(self, config: BambaConfig, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            config.hidden_size, [intermediate_size] * 2, bias=config.mlp_bias
        )
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class BambaDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: BambaConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block == "attention":
            self.self_attn = BambaAttention(config, layer_idx)
        else:
            self.mamba = BambaMixer(config, layer_idx)
        self.feed_forward = BambaMLP(config, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def get_attention(self) -> nn.Module:
        """This layer's attention module (its name depends on the layer's block)."""
        if self.block == "attention":
            return self.self_attn
        else:
            return self.mamba

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
        hidden_states, residual = self.pre_ff_layernorm(hidden_states, residual)
        hidden_states = self.feed_forward(hidden_states)
        return hidden_states, residual


class BambaModel(nn.Module):
    def __init__(self, config: BambaConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([BambaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.final_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.final_layernorm(hidden_states, residual)
        return hidden_states


class BambaForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: BambaConfig):
        super().__init__()
        self.config = config
        self.model = BambaModel(config)
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
        """No routed experts in this model."""
        return ExpertMapping()

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
