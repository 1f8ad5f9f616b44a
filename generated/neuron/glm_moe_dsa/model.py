# ==================================================================================================================
# GENERATED FROM specs/glm_moe_dsa.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm_moe_dsa.yaml --target neuron
# source hash (spec + templates + generator): c7d36e698e90fbf2
# ==================================================================================================================
"""GlmMoeDsa for the neuron target, in vLLM Neuron's style.

Mixture-of-experts decoder with multi-head latent attention and DeepSeek sparse attention (interleaved-RoPE indexer),
sigmoid grouped top-k routing.

Reference: transformers/models/glm_moe_dsa/modeling_glm_moe_dsa.py.

The runner calls the fixed ``forward(input_ids, positions, attn_metadata, sampling_positions, sampling_params, ...)``
with inputs padded to a compiled bucket; every shape is static, so each bucket traces to one
``torch.compile(fullgraph=True)`` graph. Weights are stored ``[in, out]`` and filled by closure loaders
``transform(slices, rank)``; ops are ``runtime.targets.neuron.functional`` (NKI on Neuron, torch here).
"""
from __future__ import annotations

import torch
from torch import nn

import modelgen.runtime.targets.neuron.functional as NF
from modelgen.runtime import distributed as dist
from modelgen.runtime.kv_cache import KVSpec
from modelgen.runtime.layers.mla import LatentCacheSpec, ops as mla_ops, shared_index_inputs
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.mapped import load_mapped_weights
from modelgen.runtime.neuron.weight_loader import (
    padded_vocab_loader,
    set_weight_loader,
    sharding_weight_loader,
    transposed_loader,
)
from modelgen.runtime.ops.rope import cos_sin_cache
from modelgen.runtime.targets.neuron.experts import expert_loaders

from .config import GlmMoeDsaConfig
from .weights import IGNORED_KEYS, RENAMES, checkpoint_mappings


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class GlmMoeDsaAttention0(nn.Module):
    """Multi-head latent attention with static shapes: the latent ``[c_kv | k_pe]`` of every token goes to the
    paged_latent cache; queries are absorbed through kv_b_proj's key part and outputs through its value part."""

    def __init__(self, config: GlmMoeDsaConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.self_attn"
        # >>> PARALLELISM <<< heads are sharded across TP ranks; the latent path and its cache are replicated.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.num_heads = dist.divide(config.num_attention_heads, world, "num_attention_heads")
        self.q_lora_rank, self.kv_lora_rank = config.q_lora_rank, config.kv_lora_rank
        self.nope_dim, self.rope_dim = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        qk_size = self.num_heads * (self.nope_dim + self.rope_dim)
        self.rope_style = mla_ops.rope_style(True, "rotate_half")
        # qk_head_dim ** -0.5, with YaRN's mscale_all_dim folded in as DeepseekV3Attention does
        self.scale = mla_ops.softmax_scale(self.nope_dim + self.rope_dim, config.rope_scaling)
        use_bias = config.attention_bias
        if self.q_lora_rank is None:
            self.q_proj_weight = _param(hidden_size, qk_size)
            set_weight_loader(self.q_proj_weight, sharding_weight_loader(1, qk_size, world, is_storage_transposed=True))
        else:
            self.q_a_proj_weight = _param(hidden_size, self.q_lora_rank)
            set_weight_loader(self.q_a_proj_weight, transposed_loader())
            self.q_a_proj_bias = _param(self.q_lora_rank) if use_bias else None
            self.q_a_layernorm = RMSNorm(self.q_lora_rank, eps=1e-06)
            self.q_b_proj_weight = _param(self.q_lora_rank, qk_size)
            set_weight_loader(
                self.q_b_proj_weight, sharding_weight_loader(1, qk_size, world, is_storage_transposed=True)
            )
        self.kv_a_proj_with_mqa_weight = _param(hidden_size, self.kv_lora_rank + self.rope_dim)
        set_weight_loader(self.kv_a_proj_with_mqa_weight, transposed_loader())
        self.kv_a_proj_with_mqa_bias = _param(self.kv_lora_rank + self.rope_dim) if use_bias else None
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, eps=1e-06)
        # Kept [out, in] = [heads * (nope + v), kv_lora_rank] as HF stores it: absorption views it per head.
        kv_b_size = self.num_heads * (self.nope_dim + self.v_dim)
        self.kv_b_proj_weight = _param(kv_b_size, self.kv_lora_rank)
        set_weight_loader(self.kv_b_proj_weight, sharding_weight_loader(0, kv_b_size, world))
        self.o_proj_weight = _param(self.num_heads * self.v_dim, hidden_size)
        set_weight_loader(
            self.o_proj_weight,
            sharding_weight_loader(0, self.num_heads * self.v_dim, world, is_storage_transposed=True),
        )
        self.o_proj_bias = _param(hidden_size) if use_bias else None  # replicated: added once after the all-reduce
        # DSA indexer (replicated: every rank selects the same keys); its key follows the latent in the cache row.
        self.index_heads, self.index_dim = config.index_n_heads, config.index_head_dim
        self.index_topk = config.index_topk
        if self.q_lora_rank is None:
            raise ValueError("the DSA indexer reads the low-rank query; q_lora_rank must be set")
        self.indexer_wq_b_weight = _param(self.q_lora_rank, self.index_heads * self.index_dim)
        self.indexer_wk_weight = _param(hidden_size, self.index_dim)
        self.indexer_weights_proj_weight = _param(hidden_size, self.index_heads)
        for w in (self.indexer_wq_b_weight, self.indexer_wk_weight, self.indexer_weights_proj_weight):
            set_weight_loader(w, transposed_loader())
        self.indexer_k_norm_weight = _param(self.index_dim)
        self.indexer_k_norm_bias = _param(self.index_dim)
        self.cache: torch.Tensor | None = None  # bound by bind_kv_cache: [num_blocks, block_size, r + dr (+ Di)]

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        meta = attn_metadata[self.layer_name]
        T = hidden_states.shape[0]
        if self.q_lora_rank is None:
            q = NF.linear(hidden_states, self.q_proj_weight)
        else:
            q_resid = self.q_a_layernorm(NF.linear(hidden_states, self.q_a_proj_weight, self.q_a_proj_bias))
            q = NF.linear(q_resid, self.q_b_proj_weight)
        q_nope, q_pe = q.view(T, self.num_heads, -1).split([self.nope_dim, self.rope_dim], dim=-1)
        kv = NF.linear(hidden_states, self.kv_a_proj_with_mqa_weight, self.kv_a_proj_with_mqa_bias)
        c, k_pe = kv.split([self.kv_lora_rank, self.rope_dim], dim=-1)
        c = self.kv_a_layernorm(c)
        q_pe = NF.rope(q_pe, cos_sin, positions, self.rope_dim, self.rope_style)
        k_pe = NF.rope(k_pe[:, None, :], cos_sin, positions, self.rope_dim, self.rope_style)[:, 0]
        q_idx, k_idx, w = mla_ops.index_inputs(
            NF.linear(q_resid, self.indexer_wq_b_weight), NF.linear(hidden_states, self.indexer_wk_weight),
            NF.linear(hidden_states, self.indexer_weights_proj_weight), self.indexer_k_norm_weight,
            self.indexer_k_norm_bias, cos_sin, positions, self.rope_dim, "pairwise",
        )
        meta["dsa_index"] = (q_idx, w, k_idx)  # for the shared DSA layers after this one (one dict per step)
        latent = torch.cat([c, k_pe, k_idx.to(c.dtype)], dim=-1)
        index = (q_idx, w, self.index_topk)
        # The model owns cache writes; padding tokens carry slot -1 and leave the cache untouched.
        mla_ops.write_latent_static(latent, self.cache, meta["slot_mapping"])
        w_uk, w_uv = mla_ops.split_kv_b(self.kv_b_proj_weight, self.num_heads, self.nope_dim, self.v_dim)
        q = torch.cat([mla_ops.absorb_query(q_nope, w_uk), q_pe], dim=-1)
        r = self.kv_lora_rank
        if meta["max_query_len"] <= meta["decode_token_threshold"]:
            o = mla_ops.paged_decode(q, self.cache, meta["block_table_tensor"], positions + 1, self.scale, r, index)
        elif meta["kv_segment_size"] > 0:
            # Segmented (chunked) prefill: the chunk's latents were just written next to the cached prefix.
            o = mla_ops.segment_prefill(
                q, self.cache, meta["block_table_tensor"], meta["seq_ids"], positions, self.scale, r, index
            )
        else:
            o = mla_ops.packed_prefill(q, latent, meta["seq_ids"], positions, self.scale, r, index)
        o = mla_ops.expand_output(o, w_uv).reshape(T, self.num_heads * self.v_dim)
        return NF.o_proj(o, self.o_proj_weight, self.o_proj_bias)

    def kv_spec(self) -> LatentCacheSpec:
        """This layer's cache (replicated on every rank): one latent of kv_lora_rank + qk_rope_head_dim per token."""
        return LatentCacheSpec(
            name=self.layer_name, latent_dim=self.kv_lora_rank + self.rope_dim + self.index_dim,
            dtype=self.kv_a_proj_with_mqa_weight.dtype,
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        (self.cache,) = kv_caches[self.layer_name]


class GlmMoeDsaAttention1(nn.Module):
    """Multi-head latent attention with static shapes: the latent ``[c_kv | k_pe]`` of every token goes to the
    paged_latent cache; queries are absorbed through kv_b_proj's key part and outputs through its value part."""

    def __init__(self, config: GlmMoeDsaConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.self_attn"
        # >>> PARALLELISM <<< heads are sharded across TP ranks; the latent path and its cache are replicated.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.num_heads = dist.divide(config.num_attention_heads, world, "num_attention_heads")
        self.q_lora_rank, self.kv_lora_rank = config.q_lora_rank, config.kv_lora_rank
        self.nope_dim, self.rope_dim = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        qk_size = self.num_heads * (self.nope_dim + self.rope_dim)
        self.rope_style = mla_ops.rope_style(True, "rotate_half")
        # qk_head_dim ** -0.5, with YaRN's mscale_all_dim folded in as DeepseekV3Attention does
        self.scale = mla_ops.softmax_scale(self.nope_dim + self.rope_dim, config.rope_scaling)
        use_bias = config.attention_bias
        if self.q_lora_rank is None:
            self.q_proj_weight = _param(hidden_size, qk_size)
            set_weight_loader(self.q_proj_weight, sharding_weight_loader(1, qk_size, world, is_storage_transposed=True))
        else:
            self.q_a_proj_weight = _param(hidden_size, self.q_lora_rank)
            set_weight_loader(self.q_a_proj_weight, transposed_loader())
            self.q_a_proj_bias = _param(self.q_lora_rank) if use_bias else None
            self.q_a_layernorm = RMSNorm(self.q_lora_rank, eps=1e-06)
            self.q_b_proj_weight = _param(self.q_lora_rank, qk_size)
            set_weight_loader(
                self.q_b_proj_weight, sharding_weight_loader(1, qk_size, world, is_storage_transposed=True)
            )
        self.kv_a_proj_with_mqa_weight = _param(hidden_size, self.kv_lora_rank + self.rope_dim)
        set_weight_loader(self.kv_a_proj_with_mqa_weight, transposed_loader())
        self.kv_a_proj_with_mqa_bias = _param(self.kv_lora_rank + self.rope_dim) if use_bias else None
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, eps=1e-06)
        # Kept [out, in] = [heads * (nope + v), kv_lora_rank] as HF stores it: absorption views it per head.
        kv_b_size = self.num_heads * (self.nope_dim + self.v_dim)
        self.kv_b_proj_weight = _param(kv_b_size, self.kv_lora_rank)
        set_weight_loader(self.kv_b_proj_weight, sharding_weight_loader(0, kv_b_size, world))
        self.o_proj_weight = _param(self.num_heads * self.v_dim, hidden_size)
        set_weight_loader(
            self.o_proj_weight,
            sharding_weight_loader(0, self.num_heads * self.v_dim, world, is_storage_transposed=True),
        )
        self.o_proj_bias = _param(hidden_size) if use_bias else None  # replicated: added once after the all-reduce
        # Shared DSA layer: no indexer; the nearest earlier indexer's top-k, whose index keys this cache row keeps.
        self.index_dim, self.index_topk = config.index_head_dim, config.index_topk
        self.cache: torch.Tensor | None = None  # bound by bind_kv_cache: [num_blocks, block_size, r + dr (+ Di)]

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        meta = attn_metadata[self.layer_name]
        T = hidden_states.shape[0]
        if self.q_lora_rank is None:
            q = NF.linear(hidden_states, self.q_proj_weight)
        else:
            q_resid = self.q_a_layernorm(NF.linear(hidden_states, self.q_a_proj_weight, self.q_a_proj_bias))
            q = NF.linear(q_resid, self.q_b_proj_weight)
        q_nope, q_pe = q.view(T, self.num_heads, -1).split([self.nope_dim, self.rope_dim], dim=-1)
        kv = NF.linear(hidden_states, self.kv_a_proj_with_mqa_weight, self.kv_a_proj_with_mqa_bias)
        c, k_pe = kv.split([self.kv_lora_rank, self.rope_dim], dim=-1)
        c = self.kv_a_layernorm(c)
        q_pe = NF.rope(q_pe, cos_sin, positions, self.rope_dim, self.rope_style)
        k_pe = NF.rope(k_pe[:, None, :], cos_sin, positions, self.rope_dim, self.rope_style)[:, 0]
        q_idx, w, k_idx = shared_index_inputs(meta, self.layer_name)  # left by the nearest earlier indexer
        latent = torch.cat([c, k_pe, k_idx.to(c.dtype)], dim=-1)
        index = (q_idx, w, self.index_topk)
        # The model owns cache writes; padding tokens carry slot -1 and leave the cache untouched.
        mla_ops.write_latent_static(latent, self.cache, meta["slot_mapping"])
        w_uk, w_uv = mla_ops.split_kv_b(self.kv_b_proj_weight, self.num_heads, self.nope_dim, self.v_dim)
        q = torch.cat([mla_ops.absorb_query(q_nope, w_uk), q_pe], dim=-1)
        r = self.kv_lora_rank
        if meta["max_query_len"] <= meta["decode_token_threshold"]:
            o = mla_ops.paged_decode(q, self.cache, meta["block_table_tensor"], positions + 1, self.scale, r, index)
        elif meta["kv_segment_size"] > 0:
            # Segmented (chunked) prefill: the chunk's latents were just written next to the cached prefix.
            o = mla_ops.segment_prefill(
                q, self.cache, meta["block_table_tensor"], meta["seq_ids"], positions, self.scale, r, index
            )
        else:
            o = mla_ops.packed_prefill(q, latent, meta["seq_ids"], positions, self.scale, r, index)
        o = mla_ops.expand_output(o, w_uv).reshape(T, self.num_heads * self.v_dim)
        return NF.o_proj(o, self.o_proj_weight, self.o_proj_bias)

    def kv_spec(self) -> LatentCacheSpec:
        """This layer's cache (replicated on every rank): one latent of kv_lora_rank + qk_rope_head_dim per token."""
        return LatentCacheSpec(
            name=self.layer_name, latent_dim=self.kv_lora_rank + self.rope_dim + self.index_dim,
            dtype=self.kv_a_proj_with_mqa_weight.dtype,
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        (self.cache,) = kv_caches[self.layer_name]


class GlmMoeDsaMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)); intermediate dim sharded across ranks."""

    def __init__(self, config: GlmMoeDsaConfig, intermediate_size: int):
        super().__init__()
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.intermediate_size_per_rank = dist.divide(intermediate_size, world, "intermediate_size")
        inter = self.intermediate_size_per_rank
        for name in ("gate_proj_weight", "up_proj_weight"):
            setattr(self, name, _param(hidden_size, inter))
            set_weight_loader(
                getattr(self, name),
                sharding_weight_loader(shard_dim=1, shard_size=inter, num_shards=world, is_storage_transposed=True),
            )
        self.down_proj_weight = _param(inter, hidden_size)
        set_weight_loader(
            self.down_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=inter, num_shards=world, is_storage_transposed=True),
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return NF.mlp(
            hidden_states, self.gate_proj_weight, self.up_proj_weight, self.down_proj_weight, "silu",
        )


class GlmMoeDsaSparseMoeBlock(nn.Module):
    """Mixture of experts: sigmoid top-k router (grouped) + shared experts; shape-static MoE op (every local expert,
    dense combine).

    >>> PARALLELISM <<< experts by ``dist.moe_layout``: whole experts [offset, offset + E_local) per rank (EP), each
    one's intermediate dim split over the ranks (expert_parallel_size=1), or both; outputs are summed across ranks.
    Experts keep HF's layout: ``w13 [E_local, 2I, H]`` (gate then up), ``w2 [E_local, H, I]``.
    """

    def __init__(self, config: GlmMoeDsaConfig):
        super().__init__()
        hidden_size, num_experts = config.hidden_size, config.n_routed_experts
        layout, loaders = expert_loaders(num_experts, ("w13", "w2"))
        self.num_local_experts, self.expert_offset = layout.num_local_experts, layout.expert_offset
        # this rank's slice of each expert's intermediate dimension (all of it unless experts are TP-sharded)
        inter = dist.divide(
            config.moe_intermediate_size, layout.tp_size, "moe intermediate_size", by="ranks sharing each expert"
        )
        self.top_k = config.num_experts_per_tok
        self.renormalize = config.norm_topk_prob
        self.n_group, self.topk_group = config.n_group, config.topk_group
        self.routed_scaling_factor = config.routed_scaling_factor
        # Router: replicated, HF layout [E, H], kept in float32 as HF does.
        self.gate_weight = nn.Parameter(
            torch.empty(num_experts, hidden_size, dtype=torch.float32), requires_grad=False
        )
        self.gate_e_score_correction_bias = nn.Parameter(
            torch.empty(num_experts, dtype=torch.float32), requires_grad=False
        )
        self.experts_w13_weight = _param(self.num_local_experts, 2 * inter, hidden_size)
        set_weight_loader(self.experts_w13_weight, loaders["w13"])
        self.experts_w2_weight = _param(self.num_local_experts, hidden_size, inter)
        set_weight_loader(self.experts_w2_weight, loaders["w2"])
        self.shared_experts = GlmMoeDsaMLP(config, config.moe_intermediate_size * config.n_shared_experts)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = NF.router(
            hidden_states,
            self.gate_weight,
            self.top_k,
            scoring="sigmoid",
            renormalize=self.renormalize,
            n_group=self.n_group,
            topk_group=self.topk_group,
            e_score_correction_bias=self.gate_e_score_correction_bias,
            routed_scaling_factor=self.routed_scaling_factor,
        )
        out = NF.moe(
            hidden_states, self.experts_w13_weight, self.experts_w2_weight, topk_weights, topk_ids,
            "silu", self.expert_offset,
        )
        return out + self.shared_experts(hidden_states)


class GlmMoeDsaDecoderLayer(nn.Module):
    def __init__(self, config: GlmMoeDsaConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        if block in ("dense", "sparse"):
            self.self_attn = GlmMoeDsaAttention0(config, layer_idx)
        else:
            self.self_attn = GlmMoeDsaAttention1(config, layer_idx)
        if block in ("dense", "dense_shared"):
            self.mlp = GlmMoeDsaMLP(config, config.intermediate_size)
        else:
            self.mlp = GlmMoeDsaSparseMoeBlock(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        # Pre-norm residual blocks.
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = residual + self.self_attn(hidden_states, positions, cos_sin, attn_metadata)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        return residual + self.mlp(hidden_states)


class GlmMoeDsaModel(nn.Module):
    def __init__(self, config: GlmMoeDsaConfig):
        super().__init__()
        world = dist.tp_size()
        vocab_size, hidden_size = config.vocab_size, config.hidden_size
        # >>> PARALLELISM <<< vocab rows sharded across ranks (the last shard zero-padded).
        self.vocab_per_rank = -(-vocab_size // world)
        self.embed_tokens_weight = _param(self.vocab_per_rank, hidden_size)
        set_weight_loader(self.embed_tokens_weight, padded_vocab_loader(vocab_size, self.vocab_per_rank))
        self.layers = nn.ModuleList([GlmMoeDsaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        # EAGLE3: layers whose *input* hidden states (HF's output_hidden_states[i]) are also returned; none by default
        self.aux_hidden_state_layers: tuple[int, ...] = ()
        self.norm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        # float32 [max_position, rotary_dim] cos|sin table shared by every layer, indexed by position ids.
        self.register_buffer(
            "rope_cos_sin",
            cos_sin_cache(
                config.qk_rope_head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings
            ),
            persistent=False,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: dict,
        rank: torch.Tensor,
        inputs_embeds: torch.Tensor | None,
        is_token_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        hidden_states = NF.embedding(input_ids, self.embed_tokens_weight, rank)
        if inputs_embeds is not None:  # prompt-embeds path: rows flagged as token ids keep their embedding
            hidden_states = torch.where(is_token_ids[:, None], hidden_states, inputs_embeds.to(hidden_states.dtype))
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.aux_hidden_state_layers:  # a Python-level set: traced once per compiled bucket
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states, positions, self.rope_cos_sin, attn_metadata)
        if aux_hidden_states:  # EAGLE3: [tokens, len(layers) * hidden], the draft model's input
            return self.norm(hidden_states), torch.cat(aux_hidden_states, dim=-1)
        return self.norm(hidden_states)


class GlmMoeDsaForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): load_mapped_weights reads these and checkpoint_mappings().
    ignored_keys = IGNORED_KEYS
    renames = RENAMES

    def __init__(self, config: GlmMoeDsaConfig):
        super().__init__()
        self.config = config
        self.model = GlmMoeDsaModel(config)
        self.vocab_size = config.vocab_size
        per_rank = self.model.vocab_per_rank
        # Its own tensor even when embeddings are tied: the mapping loads the embedding a second time.
        self.lm_head_weight = _param(config.hidden_size, per_rank)
        set_weight_loader(
            self.lm_head_weight, padded_vocab_loader(self.vocab_size, per_rank, is_storage_transposed=True)
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: dict,
        sampling_positions: torch.Tensor,
        sampling_params: torch.Tensor | None = None,
        spec_decode_metadata=None,
        logit_mask: torch.Tensor | None = None,
        rank: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        is_token_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Tokens padded to a bucket -> logits ``[num_reqs, vocab]`` at ``sampling_positions`` (CPU sampling), or
        ``(sampled_token_ids, logits)`` when ``sampling_params [num_reqs, 3]`` asks for on-device sampling."""
        if spec_decode_metadata is not None:
            raise NotImplementedError("speculative decoding is not generated yet")
        if rank is None:
            rank = torch.zeros((), dtype=torch.int64, device=input_ids.device)
        hidden_states = self.model(input_ids, positions, attn_metadata, rank, inputs_embeds, is_token_ids)
        aux_hidden_states = None
        if self.model.aux_hidden_state_layers:  # EAGLE3 (the guide's step 1e): every token's aux states
            hidden_states, aux_hidden_states = hidden_states
        hidden_states = torch.index_select(hidden_states, 0, sampling_positions)
        logits = NF.lm_head(hidden_states, self.lm_head_weight, self.vocab_size)
        if logit_mask is not None:
            logits = logits.masked_fill(~logit_mask, float("-inf"))
        if sampling_params is not None:  # on-device sampling: (sampled_token_ids, gathered_logits)
            if aux_hidden_states is not None:  # the guide's forward table: ODS + EAGLE3
                return NF.sample(logits, sampling_params), aux_hidden_states, logits
            return NF.sample(logits, sampling_params), logits
        if aux_hidden_states is not None:  # CPU sampling + EAGLE3
            return logits, aux_hidden_states
        return logits

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        """EAGLE3: also return the hidden states entering these layers (vLLM's SupportsEagle3); () turns it off.
        Set before compiling: each setting traces its own graphs."""
        layers = tuple(int(i) for i in layers)
        bad = [i for i in layers if not 0 <= i < len(self.model.layers)]
        if bad:
            raise ValueError(f"aux hidden state layers {bad}: expected indices in [0, {len(self.model.layers)})")
        self.model.aux_hidden_state_layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        """The layers EAGLE3 drafters are trained on (vLLM's default: early, middle, late)."""
        n = len(self.model.layers)
        return tuple(min(max(i, 0), n - 1) for i in (2, n // 2, n - 3))

    def get_kv_spec(self) -> KVSpec:
        """Every layer's cache, as its attention declares it."""
        return KVSpec(layers=[layer.self_attn.kv_spec() for layer in self.model.layers])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            layer.self_attn.bind_kv_cache(kv_caches)

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        """Parameter -> checkpoint key(s); ``available``: the checkpoint's keys after ``renames``."""
        return checkpoint_mappings(self.config, available)  # fused vs per-expert expert tensors, by what is present

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Load this rank's shards onto the parameters' device (strict: every parameter mapped, every checkpoint
        tensor used or ignored)."""
        load_mapped_weights(self, checkpoint)
