# ==================================================================================================================
# GENERATED FROM specs/qwen3_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_moe.yaml --target neuron
# source hash (spec + templates + generator): 48f38b72783e1105
# ==================================================================================================================
"""Qwen3Moe for the neuron target, in vLLM Neuron's style.

Mixture-of-experts decoder with GQA, QK RMSNorm, softmax top-k routing, and dense layers by rule.

Reference: transformers/models/qwen3_moe/modeling_qwen3_moe.py.

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
from modelgen.runtime.kv_cache import KVSpec, LayerSpec
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.mapped import load_mapped_weights
from modelgen.runtime.neuron.weight_loader import (
    fused_qkv_weight_loader,
    padded_vocab_loader,
    set_weight_loader,
    sharding_weight_loader,
)
from modelgen.runtime.ops.rope import cos_sin_cache
from modelgen.runtime.targets.neuron.experts import expert_loaders

from .config import Qwen3MoeConfig
from .weights import IGNORED_KEYS, RENAMES, checkpoint_mappings


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class Qwen3MoeAttention(nn.Module):
    """GQA self-attention with separate prefill (packed, causal) and decode (paged) paths."""

    def __init__(self, config: Qwen3MoeConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.self_attn"
        # >>> PARALLELISM <<< heads are sharded across TP ranks; KV heads are replicated when fewer than ranks.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.head_dim = config.head_dim
        self.num_attention_heads_per_rank = dist.divide(config.num_attention_heads, world, "num_attention_heads")
        self.num_key_value_heads_per_rank, num_kv_replicas = dist.kv_heads_per_rank(config.num_key_value_heads, world)
        self.q_size = self.num_attention_heads_per_rank * self.head_dim
        self.kv_size = self.num_key_value_heads_per_rank * self.head_dim
        self.scale = self.head_dim ** -0.5
        self.rotary_dim = self.head_dim

        self.qkv_proj_weight = _param(hidden_size, self.q_size + 2 * self.kv_size)
        set_weight_loader(
            self.qkv_proj_weight,
            fused_qkv_weight_loader(
                self.q_size, self.kv_size, shard_dim=1, num_shards=world, is_storage_transposed=True,
                num_kv_replicas=num_kv_replicas,
            ),
        )
        self.o_proj_weight = _param(self.q_size, hidden_size)
        set_weight_loader(
            self.o_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=self.q_size, num_shards=world, is_storage_transposed=True),
        )
        if config.attention_bias:
            self.qkv_proj_bias = _param(self.q_size + 2 * self.kv_size)
            set_weight_loader(
                self.qkv_proj_bias,
                fused_qkv_weight_loader(
                    self.q_size, self.kv_size, shard_dim=0, num_shards=world, num_kv_replicas=num_kv_replicas
                ),
            )
            self.o_proj_bias = _param(hidden_size)  # replicated: added once after the all-reduce
        else:
            self.register_parameter("qkv_proj_bias", None)  # None, not zeros: no bias add in the graph
            self.register_parameter("o_proj_bias", None)  # None, not zeros: no bias add in the graph
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_cache: torch.Tensor | None = None  # bound by bind_kv_cache: [num_blocks, kv_heads, block_size, head_dim]
        self.v_cache: torch.Tensor | None = None

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        meta = attn_metadata[self.layer_name]
        qkv = NF.qkv_proj(hidden_states, self.qkv_proj_weight, self.qkv_proj_bias)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_attention_heads_per_rank, self.head_dim)
        k = k.view(-1, self.num_key_value_heads_per_rank, self.head_dim)
        v = v.view(-1, self.num_key_value_heads_per_rank, self.head_dim)
        q, k = self.q_norm(q), self.k_norm(k)
        q = NF.rope(q, cos_sin, positions, self.rotary_dim, "rotate_half")
        k = NF.rope(k, cos_sin, positions, self.rotary_dim, "rotate_half")
        # The model owns cache writes; padding tokens carry slot -1 and leave the cache untouched.
        NF.write_kv_cache(k, v, self.k_cache, self.v_cache, meta["slot_mapping"])
        if meta["max_query_len"] <= meta["decode_token_threshold"]:
            out = self.forward_decode(q, positions, meta)
        else:
            out = self.forward_prefill(q, k, v, positions, meta)
        return NF.o_proj(out.reshape(out.shape[0], self.q_size), self.o_proj_weight, self.o_proj_bias)

    def forward_prefill(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, meta: dict
    ) -> torch.Tensor:
        if meta["kv_segment_size"] > 0:
            # Segmented (chunked) prefill: the chunk's K/V were just written next to the request's cached prefix.
            return NF.segmented_attention(
                q, self.k_cache, self.v_cache, meta["block_table_tensor"], meta["seq_ids"], positions, self.scale
            )
        return NF.flash_attention(q, k, v, meta["seq_ids"], positions, self.scale)

    def forward_decode(self, q: torch.Tensor, positions: torch.Tensor, meta: dict) -> torch.Tensor:
        return NF.attention_decode(
            q, self.k_cache, self.v_cache, meta["block_table_tensor"], positions, self.scale
        )

    def kv_spec(self) -> LayerSpec:
        """This layer's cache, per rank: paged K and V blocks ``[num_blocks, num_kv_heads, block_size, head_dim]``."""
        return LayerSpec(
            name=self.layer_name, num_kv_heads=self.num_key_value_heads_per_rank, head_size=self.head_dim,
            dtype=self.qkv_proj_weight.dtype, kind="paged_kv",
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.k_cache, self.v_cache = kv_caches[self.layer_name]


class Qwen3MoeMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)); intermediate dim sharded across ranks."""

    def __init__(self, config: Qwen3MoeConfig, intermediate_size: int):
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


class Qwen3MoeSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router; shape-static MoE op (every local expert, dense combine).

    >>> PARALLELISM <<< experts by ``dist.moe_layout``: whole experts [offset, offset + E_local) per rank (EP), each
    one's intermediate dim split over the ranks (expert_parallel_size=1), or both; outputs are summed across ranks.
    Experts keep HF's layout: ``w13 [E_local, 2I, H]`` (gate then up), ``w2 [E_local, H, I]``.
    """

    def __init__(self, config: Qwen3MoeConfig):
        super().__init__()
        hidden_size, num_experts = config.hidden_size, config.num_experts
        layout, loaders = expert_loaders(num_experts, ("w13", "w2"))
        self.num_local_experts, self.expert_offset = layout.num_local_experts, layout.expert_offset
        # this rank's slice of each expert's intermediate dimension (all of it unless experts are TP-sharded)
        inter = dist.divide(
            config.moe_intermediate_size, layout.tp_size, "moe intermediate_size", by="ranks sharing each expert"
        )
        self.top_k = config.num_experts_per_tok
        self.renormalize = config.norm_topk_prob
        # Router: replicated, HF layout [E, H].
        self.gate_weight = _param(num_experts, hidden_size)
        self.experts_w13_weight = _param(self.num_local_experts, 2 * inter, hidden_size)
        set_weight_loader(self.experts_w13_weight, loaders["w13"])
        self.experts_w2_weight = _param(self.num_local_experts, hidden_size, inter)
        set_weight_loader(self.experts_w2_weight, loaders["w2"])

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = NF.router(
            hidden_states,
            self.gate_weight,
            self.top_k,
            scoring="softmax",
            renormalize=self.renormalize,
            weights_in_model_dtype=True,
        )
        out = NF.moe(
            hidden_states, self.experts_w13_weight, self.experts_w2_weight, topk_weights, topk_ids,
            "silu", self.expert_offset,
        )
        return out


class Qwen3MoeDecoderLayer(nn.Module):
    def __init__(self, config: Qwen3MoeConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.self_attn = Qwen3MoeAttention(config, layer_idx)
        if block == "dense":
            self.mlp = Qwen3MoeMLP(config, config.intermediate_size)
        else:
            self.mlp = Qwen3MoeSparseMoeBlock(config)
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


class Qwen3MoeModel(nn.Module):
    def __init__(self, config: Qwen3MoeConfig):
        super().__init__()
        world = dist.tp_size()
        vocab_size, hidden_size = config.vocab_size, config.hidden_size
        # >>> PARALLELISM <<< vocab rows sharded across ranks (the last shard zero-padded).
        self.vocab_per_rank = -(-vocab_size // world)
        self.embed_tokens_weight = _param(self.vocab_per_rank, hidden_size)
        set_weight_loader(self.embed_tokens_weight, padded_vocab_loader(vocab_size, self.vocab_per_rank))
        self.layers = nn.ModuleList([Qwen3MoeDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        # EAGLE3: layers whose *input* hidden states (HF's output_hidden_states[i]) are also returned; none by default
        self.aux_hidden_state_layers: tuple[int, ...] = ()
        self.norm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        # float32 [max_position, rotary_dim] cos|sin table shared by every layer, indexed by position ids.
        self.register_buffer(
            "rope_cos_sin",
            cos_sin_cache(config.head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings),
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


class Qwen3MoeForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): load_mapped_weights reads these and checkpoint_mappings().
    ignored_keys = IGNORED_KEYS
    renames = RENAMES

    def __init__(self, config: Qwen3MoeConfig):
        super().__init__()
        self.config = config
        self.model = Qwen3MoeModel(config)
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
