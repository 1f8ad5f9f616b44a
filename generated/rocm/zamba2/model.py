# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/zamba2.yaml --target rocm
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Zamba2 for the rocm target, in ATOM's style.

Hybrid decoder: Mamba-2 (SSD) mixers behind an RMSNorm; hybrid layers first run a shared attention + GELU MLP block
(num_mem_blocks weight sets, round-robin) on concat(hidden, embeddings) with per-use LoRA adapters and a per-layer K/V
cache, whose projected output joins the mixer's input.

Reference: transformers/models/zamba2/modeling_zamba2.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. The Mamba-2 mixers keep a conv state and an SSM state per request in the engine's state pool (chunked scan for
prefill, one recurrent step per decoded token). Hybrid layers run a shared block (the same weights at several depths)
whose K/V cache is each layer's own. Ops run aiter's kernels where aiter imports (ROCm), otherwise the Triton kernels of
``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on the CPU (``runtime/backends.py`` chooses;
``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec
from modelgen.runtime.layers.attention import AttentionMetadata
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
)
from modelgen.runtime.layers.mamba2 import Mamba2
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.layers.rotary import get_rope
from modelgen.runtime.layers.shared_block import LoRA, SharedPagedAttention, load_stored_fused, refuse_split_modes
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping
from modelgen.runtime.state_cache import StateSpec

from .config import Zamba2Config
from .weights import (
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class Zamba2Mixer(Mamba2):
    """Mamba-2 mixer: in_proj -> [z, xBC, dt]; act(causal depthwise conv1d(xBC)) -> x, B, C; the selective scan
    (SSD) with A = -exp(A_log), dt = softplus(dt + dt_bias) clamped, the D skip; RMSNorm(y * silu(z)) per group;
    out_proj.

    Parameters keep the checkpoint's names (``in_proj``, ``conv1d``, ``dt_bias``, ``A_log``, ``D``, ``norm``,
    ``out_proj``); each request's conv inputs and SSM state live in the engine's state pool, one slot per request
    (``kv_spec``).
    """

    def __init__(self, config: Zamba2Config, layer_idx: int):
        super().__init__(
            hidden_size=config.hidden_size,
            num_heads=config.n_mamba_heads,
            head_dim=config.mamba_head_dim,
            state_size=config.mamba_d_state,
            n_groups=config.mamba_ngroups,
            conv_kernel=config.mamba_d_conv,
            chunk_size=config.chunk_size,
            time_step_limit=tuple([config.time_step_min, float('inf')]),
            use_bias=config.add_bias_linear,
            use_conv_bias=True,
            activation="silu",
            eps=1e-05,
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


class Zamba2SharedBlock(nn.Module):
    """Shared transformer block, weights shared by every num_mem_blocks-th layer that uses it: concat(hidden,
    embeddings) -> input_layernorm -> attention (self_attn) -> pre_ff_layernorm -> gated MLP
    (feed_forward); no residual inside. Per use (the k-th using layer): LoRA adapters ``B(A(x))`` added to q, k, v
    and to the fused gate_up projection (HF's ``*_adapter_list.{k}``), and the calling layer's own K/V cache.
    """

    def __init__(self, config: Zamba2Config, copy: int, num_uses: int):
        super().__init__()
        hidden_size = config.hidden_size
        width = 2 * hidden_size  # the block's input
        self.copy = copy
        self.input_layernorm = RMSNorm(width, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        self.self_attn = nn.Module()
        self.feed_forward = nn.Module()
        attn, mlp = self.self_attn, self.feed_forward
        self.head_dim = config.attention_head_dim
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.kv_heads
        self.scale = (config.attention_head_dim / 2) ** (-0.5)
        # q/k/v kept apart as stored; heads sharded across TP ranks (K/V heads must divide them)
        attn.q_proj = ColumnParallelLinear(width, self.num_heads * self.head_dim, bias=False)
        attn.k_proj = ColumnParallelLinear(width, self.num_kv_heads * self.head_dim, bias=False)
        attn.v_proj = ColumnParallelLinear(width, self.num_kv_heads * self.head_dim, bias=False)
        attn.o_proj = RowParallelLinear(self.num_heads * self.head_dim, hidden_size, bias=False)
        self.rotary_emb = None
        if config.use_mem_rope:
            self.rotary_emb = get_rope(
                self.head_dim,
                rotary_dim=self.head_dim,
                max_position=16384 if config.use_long_context else config.max_position_embeddings,
                base=config.rope_theta,
                scaling=config.rope_scaling,
                style="rotate_half",
            )
        intermediate_size = config.mlp_width
        mlp.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=config.add_bias_linear)
        load_stored_fused(mlp.gate_up_proj)  # stored as one [gate | up] tensor
        mlp.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=config.add_bias_linear)
        # Per-use adapters: copy c holds those of the uses k with k % cycle == c % cycle (an Identity elsewhere, as
        # HF's lists); use k reads entry k
        rank, cycle = config.adapter_rank, config.num_mem_blocks
        mine = [k % cycle == copy % cycle for k in range(num_uses)]
        self.attention_adapters = config.use_shared_attention_adapter
        if self.attention_adapters:
            for name in ("linear_q_adapter_list", "linear_k_adapter_list", "linear_v_adapter_list"):
                setattr(attn, name, nn.ModuleList(
                    [LoRA(width, rank, self.num_heads * self.head_dim) if own else nn.Identity() for own in mine]
                ))
        mlp.gate_up_proj_adapter_list = nn.ModuleList(
            [LoRA(hidden_size, rank, [intermediate_size] * 2) if own else nn.Identity() for own in mine]
        )

    def cache_for(self, layer_name: str) -> SharedPagedAttention:
        """The paged K/V of one using layer (the weights are shared, the cache is not)."""
        q_proj = self.self_attn.q_proj
        heads = q_proj.out_features // self.head_dim
        kv_heads = self.self_attn.k_proj.out_features // self.head_dim
        return SharedPagedAttention(heads, kv_heads, self.head_dim, scale=self.scale, layer_name=layer_name,
                                    rotary_emb=self.rotary_emb)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, embeddings: torch.Tensor, use: int,
        cache: SharedPagedAttention, attn_metadata: AttentionMetadata,
    ) -> torch.Tensor:
        attn, mlp = self.self_attn, self.feed_forward
        x = self.input_layernorm(torch.cat([hidden_states, embeddings], dim=-1))
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
        if self.attention_adapters:
            q = q + attn.linear_q_adapter_list[use](x)
            k = k + attn.linear_k_adapter_list[use](x)
            v = v + attn.linear_v_adapter_list[use](x)
        q = q.view(q.shape[0], -1, self.head_dim)
        k = k.view(k.shape[0], -1, self.head_dim)
        v = v.view(v.shape[0], -1, self.head_dim)
        # RoPE (when configured) is applied inside the cache's write / attention
        x = attn.o_proj(cache(q, k, v, attn_metadata, positions=positions))
        x = self.pre_ff_layernorm(x)
        gate_up = mlp.gate_up_proj(x)
        gate_up = gate_up + mlp.gate_up_proj_adapter_list[use](x)
        gate, up = gate_up.chunk(2, dim=-1)
        return mlp.down_proj(torch.nn.functional.gelu(gate) * up)


class Zamba2DecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

    def __init__(self, config: Zamba2Config, layer_idx: int, shared: list[nn.Module], uses: list[int]):
        super().__init__()
        self.mamba = Zamba2Mixer(config, layer_idx)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # The shared block (shared_transformer): copy use % copies, registered in each layer that uses it (its
        # parameters keep the first user's names); this layer's own K/V cache and output projection.
        self.shared_use = uses.index(layer_idx) if layer_idx in uses else None
        if self.shared_use is not None:
            self.shared_transformer = shared[self.shared_use % len(shared)]
            self.shared_transformer_cache = self.shared_transformer.cache_for(f"layers.{layer_idx}.shared_transformer")
            self.linear = ReplicatedLinear(config.hidden_size, config.hidden_size, bias=False)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        attn_metadata: AttentionMetadata,
        embeddings: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x + mixer(input_layernorm(x + t)); t = linear(shared_transformer(...)) in layers with the shared block.
        if residual is not None:
            hidden_states = hidden_states + residual
        residual = hidden_states
        if self.shared_use is not None:
            shared = self.shared_transformer(
                positions, hidden_states, embeddings, self.shared_use, self.shared_transformer_cache, attn_metadata,
            )
            hidden_states = hidden_states + self.linear(shared)
        hidden_states = self.input_layernorm(hidden_states)
        return self.mamba(positions, hidden_states, attn_metadata), residual


class Zamba2Model(nn.Module):
    def __init__(self, config: Zamba2Config):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        # Layers whose block runs the shared block, in depth order; copy k % copies serves the k-th. The copies
        # are registered in their layers only, so their parameters keep the first user's checkpoint names.
        refuse_split_modes("Zamba2Model")  # no pipeline stages / attention DP: every layer reads the embeddings
        uses = [i for i in range(len(config.schedule)) if config.layer_block(i) in ["hybrid"]]
        # untied: each layer its own weights
        copies = config.num_mem_blocks if config.tie_word_embeddings else len(uses)
        shared = [Zamba2SharedBlock(config, c, len(uses)) for c in range(copies)]
        self.layers = nn.ModuleList(
            [Zamba2DecoderLayer(config, i, shared, uses) for i in range(len(config.schedule))]
        )
        self.final_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        embeddings = hidden_states  # the shared block reads them beside the hidden states
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata, embeddings)
        hidden_states, _ = self.final_layernorm(hidden_states, residual)
        return hidden_states


class Zamba2ForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: Zamba2Config):
        super().__init__()
        self.config = config
        self.model = Zamba2Model(config)
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
        # Each layer's mixer state, then the K/V of each use of the shared block (one cache per using layer).
        layers = self.model.layers
        return KVSpec(layers=[layer.mamba.kv_spec() for layer in layers] + [
            layer.shared_transformer_cache.kv_spec(layer.linear.weight.dtype)
            for layer in layers if layer.shared_use is not None
        ])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            if layer.shared_use is not None:
                layer.shared_transformer_cache.bind_kv_cache(kv_caches)
            layer.mamba.bind_kv_cache(kv_caches)

    def get_expert_mapping(self) -> ExpertMapping:
        """No routed experts in this model."""
        return ExpertMapping()

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
