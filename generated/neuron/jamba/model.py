# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/jamba.yaml --target neuron
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""Jamba for the neuron target, in vLLM Neuron's style.

Hybrid decoder: Mamba-1 selective-state-space mixers (RMSNorms on dt, B, C; a per-request conv history and SSM state)
and GQA attention layers without RoPE, by period and offset; softmax top-k MoE layers by period and offset, SwiGLU MLPs
elsewhere; RMSNorm.

Reference: transformers/models/jamba/modeling_jamba.py.

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
from modelgen.runtime.layers.gated_deltanet.neuron import head_parts_weight_loader
from modelgen.runtime.layers.mamba.ops import conv_static, discretize_dt, gated_output, scan_static
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.mapped import load_mapped_weights
from modelgen.runtime.neuron.weight_loader import (
    fused_qkv_weight_loader,
    padded_vocab_loader,
    set_weight_loader,
    sharding_weight_loader,
)
from modelgen.runtime.state_cache import StateSpec
from modelgen.runtime.targets.neuron.experts import expert_loaders

from .config import JambaConfig
from .weights import IGNORED_KEYS, RENAMES, checkpoint_mappings


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class JambaAttention(nn.Module):
    """GQA self-attention with separate prefill (packed, causal) and decode (paged) paths."""

    def __init__(self, config: JambaConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.self_attn"
        # >>> PARALLELISM <<< heads are sharded across TP ranks; KV heads are replicated when fewer than ranks.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_attention_heads_per_rank = dist.divide(config.num_attention_heads, world, "num_attention_heads")
        self.num_key_value_heads_per_rank, num_kv_replicas = dist.kv_heads_per_rank(config.num_key_value_heads, world)
        self.q_size = self.num_attention_heads_per_rank * self.head_dim
        self.kv_size = self.num_key_value_heads_per_rank * self.head_dim
        self.scale = self.head_dim ** -0.5

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
        self.register_parameter("qkv_proj_bias", None)  # None, not zeros: no bias add in the graph
        self.register_parameter("o_proj_bias", None)  # None, not zeros: no bias add in the graph
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
        # NoPE layer: q and k attend unrotated (the model's cos|sin table is not read)
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


class JambaMambaMixer(nn.Module):
    """Mamba-1 mixer with static shapes: in_proj -> [x, z]; silu(causal conv1d(x)); x_proj -> [dt, B, C], each
    RMSNormed; softplus(dt_proj(dt)); selective scan; out_proj(y * silu(z)). Each bucket's rows are requests, each
    request's conv history and SSM state sit in its state-pool slot (``state_slots``)."""

    def __init__(self, config: JambaConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.mamba"
        # >>> PARALLELISM <<< the D channels are sharded across TP ranks (in_proj's x and z halves, conv1d, dt_proj's
        # output, A_log, D, out_proj's input); x_proj is row-parallel, so dt, B, C are whole on every rank.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        intermediate_size = config.mamba_expand * config.hidden_size
        self.channels = dist.divide(intermediate_size, world, "mamba intermediate size")
        self.state_size, self.conv_kernel = config.mamba_d_state, config.mamba_d_conv
        self.time_step_rank = config.mamba_dt_rank
        channels_loader = head_parts_weight_loader([[intermediate_size]], world)
        # in_proj rows are [x | z]: each rank takes its channels of both halves, so chunk(2) applies locally.
        self.in_proj_weight = _param(hidden_size, 2 * self.channels)
        set_weight_loader(self.in_proj_weight, head_parts_weight_loader([[intermediate_size] * 2], world, True))
        self.conv1d_weight = _param(self.channels, 1, self.conv_kernel)
        set_weight_loader(self.conv1d_weight, channels_loader)
        self.x_proj_weight = _param(self.channels, self.time_step_rank + 2 * self.state_size)
        set_weight_loader(
            self.x_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=self.channels, num_shards=world, is_storage_transposed=True),
        )
        self.dt_proj_weight = _param(self.time_step_rank, self.channels)
        set_weight_loader(self.dt_proj_weight, head_parts_weight_loader([[intermediate_size]], world, True))
        self.dt_proj_bias = _param(self.channels)
        set_weight_loader(self.dt_proj_bias, channels_loader)
        self.A_log = _param(self.channels, self.state_size)
        set_weight_loader(self.A_log, channels_loader)
        self.D = _param(self.channels)
        set_weight_loader(self.D, channels_loader)
        self.out_proj_weight = _param(self.channels, hidden_size)
        set_weight_loader(
            self.out_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=self.channels, num_shards=world, is_storage_transposed=True),
        )
        if config.mamba_conv_bias:
            self.conv1d_bias = _param(self.channels)
            set_weight_loader(self.conv1d_bias, channels_loader)
        else:
            self.register_parameter("conv1d_bias", None)  # None, not zeros: no bias add in the graph
        if config.mamba_proj_bias:
            self.in_proj_bias = _param(2 * self.channels)
            set_weight_loader(self.in_proj_bias, head_parts_weight_loader([[intermediate_size] * 2], world))
            self.out_proj_bias = _param(hidden_size)  # replicated: added once after the all-reduce
        else:
            for name in ("in_proj_bias", "out_proj_bias"):
                self.register_parameter(name, None)
        self.dt_layernorm = RMSNorm(self.time_step_rank, eps=config.rms_norm_eps)
        self.b_layernorm = RMSNorm(self.state_size, eps=config.rms_norm_eps)
        self.c_layernorm = RMSNorm(self.state_size, eps=config.rms_norm_eps)
        self.conv_state: torch.Tensor | None = None  # bound by bind_kv_cache: [num_slots, channels, K-1]
        self.ssm_state: torch.Tensor | None = None  # [num_slots, channels, d_state], float32

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        meta = attn_metadata[self.layer_name]
        rows = (meta["seq_ids"], meta["state_slots"], meta["state_fresh"])
        decode = meta["max_query_len"] <= meta["decode_token_threshold"]
        x, z = NF.linear(hidden_states, self.in_proj_weight, self.in_proj_bias).chunk(2, dim=-1)
        xc = conv_static(x, self.conv1d_weight.squeeze(1), self.conv1d_bias, self.conv_state, *rows, decode=decode)
        dt, B, C = NF.o_proj(xc, self.x_proj_weight).split(
            [self.time_step_rank, self.state_size, self.state_size], dim=-1
        )
        dt, B, C = self.dt_layernorm(dt), self.b_layernorm(B), self.c_layernorm(C)
        dt = discretize_dt(NF.linear(dt, self.dt_proj_weight), self.dt_proj_bias)
        A = -torch.exp(self.A_log.float())
        y = scan_static(xc, dt, A, B, C, self.ssm_state, *rows, decode=decode)
        out = gated_output(y, xc, self.D, z, hidden_states.dtype)  # the D skip, then the gate
        return NF.o_proj(out, self.out_proj_weight, self.out_proj_bias)

    def kv_spec(self) -> StateSpec:
        """This layer's cache, per rank: one recurrent_state slot per request (conv history + float32 SSM
        state)."""
        return StateSpec(
            name=self.layer_name,
            conv_shape=(self.channels, self.conv_kernel - 1),
            conv_dtype=self.in_proj_weight.dtype,
            recurrent_shape=(self.channels, self.state_size),
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.conv_state, self.ssm_state = kv_caches[self.layer_name]


class JambaMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)); intermediate dim sharded across ranks."""

    def __init__(self, config: JambaConfig, intermediate_size: int):
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


class JambaSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router; shape-static MoE op (every local expert, dense combine).

    >>> PARALLELISM <<< experts by ``dist.moe_layout``: whole experts [offset, offset + E_local) per rank (EP), each
    one's intermediate dim split over the ranks (expert_parallel_size=1), or both; outputs are summed across ranks.
    Experts keep HF's layout: ``w13 [E_local, 2I, H]`` (gate then up), ``w2 [E_local, H, I]``.
    """

    def __init__(self, config: JambaConfig):
        super().__init__()
        hidden_size, num_experts = config.hidden_size, config.num_experts
        layout, loaders = expert_loaders(num_experts, ("w13", "w2"))
        self.num_local_experts, self.expert_offset = layout.num_local_experts, layout.expert_offset
        # this rank's slice of each expert's intermediate dimension (all of it unless experts are TP-sharded)
        inter = dist.divide(
            config.intermediate_size, layout.tp_size, "moe intermediate_size", by="ranks sharing each expert"
        )
        self.top_k = config.num_experts_per_tok
        self.renormalize = False
        # Router: replicated, HF layout [E, H].
        self.router_weight = _param(num_experts, hidden_size)
        self.experts_w13_weight = _param(self.num_local_experts, 2 * inter, hidden_size)
        set_weight_loader(self.experts_w13_weight, loaders["w13"])
        self.experts_w2_weight = _param(self.num_local_experts, hidden_size, inter)
        set_weight_loader(self.experts_w2_weight, loaders["w2"])

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = NF.router(
            hidden_states,
            self.router_weight,
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


class JambaDecoderLayer(nn.Module):
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
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        # Pre-norm residual blocks.
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = residual + self.get_attention()(hidden_states, positions, cos_sin, attn_metadata)
        residual = hidden_states
        hidden_states = self.pre_ff_layernorm(hidden_states)
        return residual + self.feed_forward(hidden_states)


class JambaModel(nn.Module):
    def __init__(self, config: JambaConfig):
        super().__init__()
        world = dist.tp_size()
        vocab_size, hidden_size = config.vocab_size, config.hidden_size
        # >>> PARALLELISM <<< vocab rows sharded across ranks (the last shard zero-padded).
        self.vocab_per_rank = -(-vocab_size // world)
        self.embed_tokens_weight = _param(self.vocab_per_rank, hidden_size)
        set_weight_loader(self.embed_tokens_weight, padded_vocab_loader(vocab_size, self.vocab_per_rank))
        self.layers = nn.ModuleList([JambaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        # EAGLE3: layers whose *input* hidden states (HF's output_hidden_states[i]) are also returned; none by default
        self.aux_hidden_state_layers: tuple[int, ...] = ()
        self.final_layernorm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        self.rope_cos_sin = None  # no rotary attention

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
            return self.final_layernorm(hidden_states), torch.cat(aux_hidden_states, dim=-1)
        return self.final_layernorm(hidden_states)


class JambaForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): load_mapped_weights reads these and checkpoint_mappings().
    ignored_keys = IGNORED_KEYS
    renames = RENAMES

    def __init__(self, config: JambaConfig):
        super().__init__()
        self.config = config
        self.model = JambaModel(config)
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
        return KVSpec(layers=[layer.get_attention().kv_spec() for layer in self.model.layers])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            layer.get_attention().bind_kv_cache(kv_caches)

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        """Parameter -> checkpoint key(s); ``available``: the checkpoint's keys after ``renames``."""
        return checkpoint_mappings(self.config, available)  # fused vs per-expert expert tensors, by what is present

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Load this rank's shards onto the parameters' device (strict: every parameter mapped, every checkpoint
        tensor used or ignored)."""
        load_mapped_weights(self, checkpoint)
