# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/jamba.yaml --target rocm
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""Jamba for the rocm target, in ATOM's style.

Hybrid decoder: Mamba-1 selective-state-space mixers (RMSNorms on dt, B, C; a per-request conv history and SSM state)
and GQA attention layers without RoPE, by period and offset; softmax top-k MoE layers by period and offset, SwiGLU MLPs
elsewhere; RMSNorm.

Reference: transformers/models/jamba/modeling_jamba.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. Attention projects Q, K and V with one fused GEMM (``qkv_proj``) and reads and writes paged K/V blocks. Mamba
layers keep one recurrent state per request (conv history + SSM state) instead of paged blocks. The MLP's gate and up
projections are one fused GEMM (``gate_up_proj``). Routed experts run as one fused MoE op over stacked ``w13`` (gate
then up) and ``w2`` weights. Fused weights load through ``weight_loader``s that take shard ids
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
from modelgen.runtime.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from modelgen.runtime.layers.mamba import MambaMixer
from modelgen.runtime.layers.moe import FusedMoE, TopKRouter
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping
from modelgen.runtime.state_cache import StateSpec

from .config import JambaConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class JambaAttention(nn.Module):
    """GQA self-attention: fused QKV, no RoPE (NoPE), paged KV cache, row-parallel output."""

    def __init__(self, config: JambaConfig, layer_idx: int):
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
        # NoPE layer: no rotary embedding (q and k attend unrotated)
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, scale=self.head_dim ** -0.5,
            layer_name=f"layers.{layer_idx}.self_attn",
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


class JambaMambaMixer(MambaMixer):
    """Mamba-1 mixer: in_proj -> [x, z]; silu(causal depthwise conv1d(x)); x_proj -> [dt, B, C], each RMSNormed
    (dt_layernorm, b_layernorm, c_layernorm); softplus(dt_proj(dt)); selective scan (A = -exp(A_log), D skip);
    out_proj(y * silu(z)).

    Parameters keep the checkpoint's names (``in_proj``, ``conv1d``, ``x_proj``, ``dt_proj``, ``A_log``, ``D``,
    ``out_proj``); each request's conv history and SSM state live in the engine's state pool, one slot per request
    (``kv_spec``).
    """

    def __init__(self, config: JambaConfig, layer_idx: int):
        super().__init__(
            hidden_size=config.hidden_size,
            intermediate_size=config.mamba_expand * config.hidden_size,
            state_size=config.mamba_d_state,
            conv_kernel=config.mamba_d_conv,
            time_step_rank=config.mamba_dt_rank,
            conv_bias=config.mamba_conv_bias,
            proj_bias=config.mamba_proj_bias,
            rms_norm_eps=config.rms_norm_eps,
            layer_name=f"layers.{layer_idx}.mamba",
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        # Position-free: the conv history and the SSM state carry the order; `state` names each sequence's slot.
        return super().forward(hidden_states, attn_metadata.state)

    def kv_spec(self) -> StateSpec:
        """This layer's cache, per rank: one recurrent_state slot per request (conv history + SSM state)."""
        return self.state_spec()

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.bind_state(*kv_caches[self.layer_name])


class JambaMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(self, config: JambaConfig, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [intermediate_size] * 2, bias=False)
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=False)
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class JambaSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router, routed experts through the fused MoE op.

    Experts are stacked ``w13 [E, 2I, H]`` (gate then up) and ``w2 [E, H, I]``; each tensor-parallel rank owns a
    contiguous range of experts (expert parallelism) and the partial outputs are summed across ranks.
    """

    def __init__(self, config: JambaConfig):
        super().__init__()
        self.router = TopKRouter(
            config.hidden_size,
            config.num_experts,
            top_k=config.num_experts_per_tok,
            scoring="softmax",
            renormalize=False,
            weights_in_model_dtype=True,  # HF casts the top-k weights to the model dtype
        )
        self.experts = FusedMoE(
            config.num_experts, config.hidden_size, config.intermediate_size, activation="silu"
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = self.router(hidden_states)
        return self.experts(hidden_states, topk_weights, topk_ids)


class JambaDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: JambaConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block in ("attention_dense", "attention_moe"):
            self.self_attn = JambaAttention(config, layer_idx)
        else:
            self.mamba = JambaMambaMixer(config, layer_idx)
        if block in ("attention_dense", "mamba_dense"):
            self.feed_forward = JambaMLP(config, config.intermediate_size)
        else:
            self.feed_forward = JambaSparseMoeBlock(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def get_attention(self) -> nn.Module:
        """This layer's attention module (its name depends on the layer's block)."""
        if self.block in ("attention_dense", "attention_moe"):
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


class JambaModel(nn.Module):
    def __init__(self, config: JambaConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([JambaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
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


class JambaForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: JambaConfig):
        super().__init__()
        self.config = config
        self.model = JambaModel(config)
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
