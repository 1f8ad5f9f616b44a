# ==================================================================================================================
# GENERATED FROM specs/falcon_h1.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon_h1.yaml --target neuron
# source hash (spec + templates + generator): c6d883bdd38a51b9
# ==================================================================================================================
"""FalconH1 for the neuron target, in vLLM Neuron's style.

Parallel hybrid decoder: every layer sums a Mamba-2 (SSD) mixer (per-request conv and SSM states) and a GQA attention
with RoPE, both on the same normed input with muP input / output multipliers, then a SwiGLU MLP; RMSNorm.

Reference: transformers/models/falcon_h1/modeling_falcon_h1.py.

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
from modelgen.runtime.layers.mamba2.ops import in_scale_vector, mamba2_static
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
from modelgen.runtime.state_cache import StateSpec

from .config import FalconH1Config
from .weights import IGNORED_KEYS, RENAMES, checkpoint_mappings


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class FalconH1Attention(nn.Module):
    """GQA self-attention with separate prefill (packed, causal) and decode (paged) paths."""

    def __init__(self, config: FalconH1Config, layer_idx: int):
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
        self.scale = config.head_dim ** (-0.5) * config.key_multiplier
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


class FalconH1Mixer(nn.Module):
    """Mamba-2 mixer with static shapes: in_proj -> [z, xBC, dt]; act(causal conv1d(xBC)) -> x, B, C; the SSD scan
    (chunked over a prefill bucket, one recurrent step per decode row); RMSNorm(y * silu(z)) per group; out_proj.
    Each bucket's rows are requests, each request's conv inputs and SSM state sit in its state-pool slot
    (``state_slots``)."""

    def __init__(self, config: FalconH1Config, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.mamba"
        # >>> PARALLELISM <<< heads (and the whole groups of B / C they read) are sharded across TP ranks.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        num_heads, head_dim = config.mamba_n_heads, config.mamba_d_head
        n_groups, state_size = config.mamba_n_groups, config.mamba_d_state
        intermediate, gn = num_heads * head_dim, n_groups * state_size
        if intermediate != config.mamba_intermediate:
            raise ValueError(f"{self.layer_name}: num_heads * head_dim {intermediate} != mamba_intermediate")
        dist.divide(n_groups, world, "n_groups (a rank holds whole groups)")
        self.conv_kernel = config.mamba_d_conv
        time_step_limit = tuple(float(t) for t in (config.time_step_limit))  # (min, max) of dt
        self.sizes = dict(
            num_heads=num_heads // world, head_dim=head_dim, n_groups=n_groups // world, state_size=state_size,
            intermediate=intermediate // world, group_size=intermediate // n_groups,
            chunk_size=config.mamba_chunk_size, time_step_limit=time_step_limit,
            activation=config.hidden_act, eps=config.rms_norm_eps,
            norm_before_gate=config.mamba_norm_before_gate,  # RMSNorm(y) * silu(z)
        )
        proj_parts = [[intermediate, intermediate, gn, gn, num_heads]]  # in_proj rows: z, x, B, C, dt
        conv_parts = [[intermediate, gn, gn]]
        self.conv_dim = (intermediate + 2 * gn) // world
        self.in_proj_weight = _param(hidden_size, (2 * intermediate + 2 * gn + num_heads) // world)
        set_weight_loader(self.in_proj_weight, head_parts_weight_loader(proj_parts, world, True))
        self.conv1d_weight = _param(self.conv_dim, 1, self.conv_kernel)
        set_weight_loader(self.conv1d_weight, head_parts_weight_loader(conv_parts, world))
        # [z, x, B, C, dt] factors on in_proj's output (Falcon-H1's mup_vector), this rank's rows
        self.register_buffer(
            "in_scale", in_scale_vector(proj_parts[0], config.ssm_multipliers, world, self.layer_name),
            persistent=False,
        )
        per_head = (("dt_bias", num_heads), ("A_log", num_heads), ("D", num_heads))
        gated_norm = config.mamba_rms_norm  # False: y * silu(z), no norm weight
        for name, rows in per_head + ((("norm_weight", intermediate),) if gated_norm else ()):
            setattr(self, name, _param(rows // world))
            set_weight_loader(getattr(self, name), head_parts_weight_loader([[rows]], world))
        if not gated_norm:
            self.register_parameter("norm_weight", None)
        self.out_proj_weight = _param(intermediate // world, hidden_size)
        set_weight_loader(
            self.out_proj_weight,
            sharding_weight_loader(
                shard_dim=0, shard_size=intermediate // world, num_shards=world, is_storage_transposed=True
            ),
        )
        if config.mamba_conv_bias:
            self.conv1d_bias = _param(self.conv_dim)
            set_weight_loader(self.conv1d_bias, head_parts_weight_loader(conv_parts, world))
        else:
            self.register_parameter("conv1d_bias", None)  # None, not zeros: no bias add in the graph
        if config.mamba_proj_bias:
            self.in_proj_bias = _param((2 * intermediate + 2 * gn + num_heads) // world)
            set_weight_loader(self.in_proj_bias, head_parts_weight_loader(proj_parts, world))
        else:
            self.register_parameter("in_proj_bias", None)
        if config.projectors_bias:
            self.out_proj_bias = _param(hidden_size)  # replicated: added once after the all-reduce
        else:
            self.register_parameter("out_proj_bias", None)
        self.conv_state: torch.Tensor | None = None  # bound by bind_kv_cache: [num_slots, conv_dim, K-1]
        self.ssm_state: torch.Tensor | None = None  # [num_slots, H, P, N] float32

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        meta = attn_metadata[self.layer_name]
        params = dict(
            self.sizes, conv_weight=self.conv1d_weight.squeeze(1), conv_bias=self.conv1d_bias, dt_bias=self.dt_bias,
            A_log=self.A_log, D=self.D, norm_weight=self.norm_weight,
        )
        zxbcdt = NF.linear(hidden_states, self.in_proj_weight, self.in_proj_bias) * self.in_scale
        y = mamba2_static(
            zxbcdt, params, self.conv_state, self.ssm_state,
            meta["seq_ids"], meta["state_slots"], meta["state_fresh"],
            decode=meta["max_query_len"] <= meta["decode_token_threshold"],
        )
        return NF.o_proj(y, self.out_proj_weight, self.out_proj_bias)

    def kv_spec(self) -> StateSpec:
        """This layer's cache, per rank: one recurrent_state slot per request (conv inputs and SSM state)."""
        return StateSpec(
            name=self.layer_name,
            conv_shape=(self.conv_dim, self.conv_kernel - 1),
            conv_dtype=self.in_proj_weight.dtype,
            recurrent_shape=(self.sizes["num_heads"], self.sizes["head_dim"], self.sizes["state_size"]),
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.conv_state, self.ssm_state = kv_caches[self.layer_name]


class FalconH1MLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)); intermediate dim sharded across ranks."""

    def __init__(self, config: FalconH1Config, intermediate_size: int):
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
        if config.mlp_bias:
            for name in ("gate_proj_bias", "up_proj_bias"):
                setattr(self, name, _param(inter))
                set_weight_loader(getattr(self, name), sharding_weight_loader(0, inter, world))
            self.down_proj_bias = _param(hidden_size)  # replicated
        else:
            for name in ("gate_proj_bias", "up_proj_bias", "down_proj_bias"):
                self.register_parameter(name, None)
        self.gate_multiplier = config.mlp_multipliers[0]  # gate_proj's output times this before the activation

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate = NF.linear(hidden_states, self.gate_proj_weight, self.gate_proj_bias) * self.gate_multiplier
        up = NF.linear(hidden_states, self.up_proj_weight, self.up_proj_bias)
        gated = NF.GATED_ACTIVATIONS["silu"](torch.cat([gate, up], dim=-1))
        return NF.o_proj(gated, self.down_proj_weight, self.down_proj_bias)


class FalconH1DecoderLayer(nn.Module):
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

    def mixers(self, hidden_states, positions, cos_sin, attn_metadata) -> torch.Tensor:
        """Both token mixers on the same normed ``hidden_states``, each times its input and output factors
        (mixer_scale), summed as HF sums them: the parallel mixer's output first."""
        side = self.mamba(hidden_states * self.parallel_mixer_factors[0], positions, cos_sin, attn_metadata)
        attention = self.self_attn(hidden_states * self.attention_factors[0], positions, cos_sin, attn_metadata)
        return side * self.parallel_mixer_factors[1] + attention * self.attention_factors[1]

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        # Pre-norm residual blocks with scaled joins: stream * residual factor + output * output factor.
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        output = self.mixers(hidden_states, positions, cos_sin, attn_metadata)
        hidden_states = residual * self.attention_scale[0] + output * self.attention_scale[1]
        residual = hidden_states
        hidden_states = self.pre_ff_layernorm(hidden_states)
        output = self.feed_forward(hidden_states)
        return residual * self.mlp_scale[0] + output * self.mlp_scale[1]


class FalconH1Model(nn.Module):
    def __init__(self, config: FalconH1Config):
        super().__init__()
        world = dist.tp_size()
        vocab_size, hidden_size = config.vocab_size, config.hidden_size
        # >>> PARALLELISM <<< vocab rows sharded across ranks (the last shard zero-padded).
        self.vocab_per_rank = -(-vocab_size // world)
        self.embed_tokens_weight = _param(self.vocab_per_rank, hidden_size)
        set_weight_loader(self.embed_tokens_weight, padded_vocab_loader(vocab_size, self.vocab_per_rank))
        self.layers = nn.ModuleList([FalconH1DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        # EAGLE3: layers whose *input* hidden states (HF's output_hidden_states[i]) are also returned; none by default
        self.aux_hidden_state_layers: tuple[int, ...] = ()
        self.final_layernorm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        self.embedding_multiplier = config.embedding_multiplier
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
        hidden_states = hidden_states * self.embedding_multiplier
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


class FalconH1ForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): load_mapped_weights reads these and checkpoint_mappings().
    ignored_keys = IGNORED_KEYS
    renames = RENAMES

    def __init__(self, config: FalconH1Config):
        super().__init__()
        self.config = config
        self.model = FalconH1Model(config)
        self.vocab_size = config.vocab_size
        per_rank = self.model.vocab_per_rank
        # Its own tensor even when embeddings are tied: the mapping loads the embedding a second time.
        self.lm_head_weight = _param(config.hidden_size, per_rank)
        set_weight_loader(
            self.lm_head_weight, padded_vocab_loader(self.vocab_size, per_rank, is_storage_transposed=True)
        )
        self.logits_divisor = 1.0 / config.lm_head_multiplier  # logits / divisor (Granite logits_scaling)

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
        logits = logits / self.logits_divisor
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
        # Two caches a layer: its attention's and its parallel mixer's, each under its own name.
        return KVSpec(layers=[
            spec for layer in self.model.layers
            for spec in (layer.self_attn.kv_spec(), layer.mamba.kv_spec())
        ])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            layer.self_attn.bind_kv_cache(kv_caches)
            layer.mamba.bind_kv_cache(kv_caches)

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        """Parameter -> checkpoint key(s); ``available``: the checkpoint's keys after ``renames``."""
        return checkpoint_mappings(self.config)

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Load this rank's shards onto the parameters' device (strict: every parameter mapped, every checkpoint
        tensor used or ignored)."""
        load_mapped_weights(self, checkpoint)
