# ==================================================================================================================
# GENERATED FROM specs/falcon_h1.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/falcon_h1.yaml --target rocm
# source hash (spec + templates + generator): c6d883bdd38a51b9
# ==================================================================================================================
"""FalconH1 for the rocm target, in ATOM's style.

Parallel hybrid decoder: every layer sums a Mamba-2 (SSD) mixer (per-request conv and SSM states) and a GQA attention
with RoPE, both on the same normed input with muP input / output multipliers, then a SwiGLU MLP; RMSNorm.

Reference: transformers/models/falcon_h1/modeling_falcon_h1.py.

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

from .config import FalconH1Config
from .weights import (
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class FalconH1Attention(nn.Module):
    """GQA self-attention: fused QKV, RoPE (rotate_half), paged KV cache, row-parallel output."""

    def __init__(self, config: FalconH1Config, layer_idx: int):
        super().__init__()
        self.head_dim = config.head_dim
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
            rotary_dim=self.head_dim,
            max_position=config.max_position_embeddings,
            base=config.rope_theta,
            scaling=config.rope_scaling,
            style="rotate_half",
        )
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, scale=config.head_dim ** (-0.5) * config.key_multiplier,
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


class FalconH1Mixer(Mamba2):
    """Mamba-2 mixer: in_proj -> [z, xBC, dt]; act(causal depthwise conv1d(xBC)) -> x, B, C; the selective scan
    (SSD) with A = -exp(A_log), dt = softplus(dt + dt_bias) clamped, the D skip; RMSNorm(y * silu(z)) per group;
    out_proj.

    Parameters keep the checkpoint's names (``in_proj``, ``conv1d``, ``dt_bias``, ``A_log``, ``D``, ``norm``,
    ``out_proj``); each request's conv inputs and SSM state live in the engine's state pool, one slot per request
    (``kv_spec``).
    """

    def __init__(self, config: FalconH1Config, layer_idx: int):
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
            intermediate_size=config.mamba_intermediate,
            layer_name=f"layers.{layer_idx}.mamba",
            in_proj_scales=tuple(config.ssm_multipliers),  # [z, x, B, C, dt] factors on in_proj's output
            out_bias=config.projectors_bias,
            gated_norm=config.mamba_rms_norm,
            norm_before_gate=config.mamba_norm_before_gate,
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


class FalconH1MLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(self, config: FalconH1Config, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            config.hidden_size, [intermediate_size] * 2, bias=config.mlp_bias
        )
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = SiluAndMul()
        self.gate_multiplier = config.mlp_multipliers[0]  # gate_proj's output times this before the activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(torch.cat([gate * self.gate_multiplier, up], dim=-1)))


class FalconH1DecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: FalconH1Config, layer_idx: int):
        super().__init__()
        self.self_attn = FalconH1Attention(config, layer_idx)
        # The parallel mixer, beside the attention on the same normed input; mixer_scale: (input, output) factors
        self.mamba = FalconH1Mixer(config, layer_idx)
        self.attention_factors = (config.attention_in_multiplier, config.attention_out_multiplier)
        self.parallel_mixer_factors = (config.ssm_in_multiplier, config.ssm_out_multiplier)
        self.feed_forward = FalconH1MLP(config, config.intermediate_size)
        # Residual joins (residual_scale): (factor on the stream, factor on the sub-layer's output), per block.
        self.attention_scale = (1, 1)
        self.mlp_scale = (1, config.mlp_multipliers[1])
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def mixers(self, positions, hidden_states, attn_metadata) -> torch.Tensor:
        """Both token mixers on the same normed ``hidden_states``, each times its input and output factors
        (mixer_scale), summed as HF sums them: the parallel mixer's output first."""
        side = self.mamba(positions, hidden_states * self.parallel_mixer_factors[0], attn_metadata)
        attention = self.self_attn(positions, hidden_states * self.attention_factors[0], attn_metadata)
        return side * self.parallel_mixer_factors[1] + attention * self.attention_factors[1]

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
        # Scaled joins: stream * residual factor + output * output factor.
        residual = residual * self.attention_scale[0]
        hidden_states = self.mixers(positions, hidden_states, attn_metadata) * self.attention_scale[1]
        hidden_states, residual = self.pre_ff_layernorm(hidden_states, residual)
        residual = residual * self.mlp_scale[0]
        return self.feed_forward(hidden_states) * self.mlp_scale[1], residual


class FalconH1Model(nn.Module):
    def __init__(self, config: FalconH1Config):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([FalconH1DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.final_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.embedding_multiplier = config.embedding_multiplier

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        hidden_states = hidden_states * self.embedding_multiplier
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.final_layernorm(hidden_states, residual)
        return hidden_states


class FalconH1ForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: FalconH1Config):
        super().__init__()
        self.config = config
        self.model = FalconH1Model(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        self.logits_divisor = 1.0 / config.lm_head_multiplier  # logits / divisor (Granite logits_scaling)
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
        logits = self.lm_head.compute_logits(hidden_states)
        logits = logits / self.logits_divisor
        return logits

    def get_kv_spec(self) -> KVSpec:
        """Every layer's cache, as its attention declares it."""
        # Two caches a layer: its attention's and its parallel mixer's, each under its own name.
        return KVSpec(layers=[
            spec for layer in self.model.layers
            for spec in (layer.self_attn.kv_spec(), layer.mamba.kv_spec())
        ])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            layer.self_attn.bind_kv_cache(kv_caches)
            layer.mamba.bind_kv_cache(kv_caches)

    def get_expert_mapping(self) -> ExpertMapping:
        """No routed experts in this model."""
        return ExpertMapping()

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
