# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/falcon.yaml --target rocm
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Falcon for the rocm target, in ATOM's style.

Dense decoder with a fused QKV grouped per KV head (multi-query, grouped or multi-head), RoPE, LayerNorms, optional
biases, an ungated GELU MLP and a parallel (shared or own norms) or sequential residual.

Reference: transformers/models/falcon/modeling_falcon.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. Attention projects Q, K and V with one fused GEMM (``qkv_proj``) and reads and writes paged K/V blocks. The MLP
has no gate (``up_proj``, activation, ``down_proj``). Fused weights load through ``weight_loader``s that take shard ids
(``PACKED_MODULES_MAPPING``). Ops run aiter's kernels where aiter imports (ROCm), otherwise the Triton kernels of
``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on the CPU (``runtime/backends.py`` chooses;
``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec, LayerSpec
from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention, rank_alibi_slopes
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from modelgen.runtime.layers.mlp import Activation
from modelgen.runtime.layers.norm import LayerNorm
from modelgen.runtime.layers.rotary import get_rope
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping

from .config import FalconConfig
from .weights import (
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class FalconAttention0(nn.Module):
    """GQA self-attention: fused QKV, RoPE (rotate_half), paged KV cache, row-parallel output."""

    def __init__(self, config: FalconConfig, layer_idx: int):
        super().__init__()
        self.head_dim = config.falcon_head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, self.head_dim, config.num_attention_heads, config.kv_heads, bias=config.bias
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.bias
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
            self.num_heads, self.num_kv_heads, self.head_dim, scale=self.head_dim ** -0.5,
            layer_name=f"layers.{layer_idx}.self_attention",
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


class FalconAttention1(nn.Module):
    """GQA self-attention: fused QKV, no RoPE (NoPE), paged KV cache, ALiBi, row-parallel output."""

    def __init__(self, config: FalconConfig, layer_idx: int):
        super().__init__()
        self.head_dim = config.falcon_head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, self.head_dim, config.num_attention_heads, config.kv_heads, bias=config.bias
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.bias
        )
        # NoPE layer: no rotary embedding (q and k attend unrotated)
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, scale=self.head_dim ** -0.5,
            layer_name=f"layers.{layer_idx}.self_attention",
            # ALiBi: scale * slopes[h] * k on the scores, this rank's heads' slopes
            alibi_slopes=rank_alibi_slopes(config.num_attention_heads, self.num_heads),
            alibi_scale=config.falcon_head_dim ** (-0.5), alibi_bf16=True,
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


class FalconMLP(nn.Module):
    """Ungated MLP: down_proj(act(up_proj(x))); intermediate dim sharded across ranks."""

    def __init__(self, config: FalconConfig, intermediate_size: int):
        super().__init__()
        self.up_proj = ColumnParallelLinear(config.hidden_size, intermediate_size, bias=config.bias)
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=config.bias)
        self.act_fn = Activation.from_hf(config.activation)  # transformers' ACT2FN name, from the config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


class FalconDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: FalconConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        if block == "decoder":
            self.self_attention = FalconAttention0(config, layer_idx)
        else:
            self.self_attention = FalconAttention1(config, layer_idx)
        self.mlp = FalconMLP(config, config.ffn_hidden_size)
        self.parallel_residual = config.parallel_layer  # attention and MLP both read the layer's input
        self.parallel_mlp_norm = config.own_mlp_norm  # a parallel MLP reads its own norm of the input
        self.input_layernorm = LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        if not self.parallel_residual or self.parallel_mlp_norm:
            self.post_attention_layernorm = LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)

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
        attn_output = self.self_attention(positions, hidden_states, attn_metadata)
        if self.parallel_residual:
            # x + attn(n) + mlp(m), n = input_layernorm(x), m = post_attention_layernorm(x) or n, summed in that order.
            mlp_input = self.post_attention_layernorm(residual) if self.parallel_mlp_norm else hidden_states
            return self.mlp(mlp_input), residual + attn_output
        hidden_states, residual = self.post_attention_layernorm(attn_output, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class FalconModel(nn.Module):
    def __init__(self, config: FalconConfig):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([FalconDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.ln_f = LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.word_embeddings(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.ln_f(hidden_states, residual)
        return hidden_states


class FalconForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: FalconConfig):
        super().__init__()
        self.config = config
        self.transformer = FalconModel(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        if config.tie_word_embeddings:
            # One tensor in memory; the loader fills it through the embedding (TIED_PARAMETERS).
            self.lm_head.weight = self.transformer.word_embeddings.weight

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
        return KVSpec(layers=[layer.self_attention.kv_spec() for layer in self.transformer.layers])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.transformer.layers:
            layer.self_attention.bind_kv_cache(kv_caches)

    def get_expert_mapping(self) -> ExpertMapping:
        """No routed experts in this model."""
        return ExpertMapping()

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
