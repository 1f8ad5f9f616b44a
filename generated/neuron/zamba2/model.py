# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/zamba2.yaml --target neuron
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Zamba2 for the neuron target, in vLLM Neuron's style.

Hybrid decoder: Mamba-2 (SSD) mixers behind an RMSNorm; hybrid layers first run a shared attention + GELU MLP block
(num_mem_blocks weight sets, round-robin) on concat(hidden, embeddings) with per-use LoRA adapters and a per-layer K/V
cache, whose projected output joins the mixer's input.

Reference: transformers/models/zamba2/modeling_zamba2.py.

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
from modelgen.runtime.layers.gated_deltanet.neuron import head_parts_weight_loader
from modelgen.runtime.layers.mamba2.ops import mamba2_static
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.layers.shared_block import PagedKV
from modelgen.runtime.layers.shared_block.neuron import merged_rows_loader
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.mapped import load_mapped_weights
from modelgen.runtime.neuron.weight_loader import (
    padded_vocab_loader,
    set_weight_loader,
    sharding_weight_loader,
    transposed_loader,
)
from modelgen.runtime.ops.rope import cos_sin_cache
from modelgen.runtime.state_cache import StateSpec

from .config import Zamba2Config
from .weights import IGNORED_KEYS, RENAMES, checkpoint_mappings


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class Zamba2Mixer(nn.Module):
    """Mamba-2 mixer with static shapes: in_proj -> [z, xBC, dt]; act(causal conv1d(xBC)) -> x, B, C; the SSD scan
    (chunked over a prefill bucket, one recurrent step per decode row); RMSNorm(y * silu(z)) per group; out_proj.
    Each bucket's rows are requests, each request's conv inputs and SSM state sit in its state-pool slot
    (``state_slots``)."""

    def __init__(self, config: Zamba2Config, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.mamba"
        # >>> PARALLELISM <<< heads (and the whole groups of B / C they read) are sharded across TP ranks.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        num_heads, head_dim = config.n_mamba_heads, config.mamba_head_dim
        n_groups, state_size = config.mamba_ngroups, config.mamba_d_state
        intermediate, gn = num_heads * head_dim, n_groups * state_size
        if intermediate != config.mamba_expand * config.hidden_size:
            raise ValueError(f"{self.layer_name}: num_heads * head_dim {intermediate} != mamba_expand * hidden_size")
        dist.divide(n_groups, world, "n_groups (a rank holds whole groups)")
        self.conv_kernel = config.mamba_d_conv
        time_step_limit = tuple(float(t) for t in ([config.time_step_min, float('inf')]))  # (min, max) of dt
        self.sizes = dict(
            num_heads=num_heads // world, head_dim=head_dim, n_groups=n_groups // world, state_size=state_size,
            intermediate=intermediate // world, group_size=intermediate // n_groups,
            chunk_size=config.chunk_size, time_step_limit=time_step_limit,
            activation="silu", eps=1e-05,
        )
        proj_parts = [[intermediate, intermediate, gn, gn, num_heads]]  # in_proj rows: z, x, B, C, dt
        conv_parts = [[intermediate, gn, gn]]
        self.conv_dim = (intermediate + 2 * gn) // world
        self.in_proj_weight = _param(hidden_size, (2 * intermediate + 2 * gn + num_heads) // world)
        set_weight_loader(self.in_proj_weight, head_parts_weight_loader(proj_parts, world, True))
        self.conv1d_weight = _param(self.conv_dim, 1, self.conv_kernel)
        set_weight_loader(self.conv1d_weight, head_parts_weight_loader(conv_parts, world))
        per_head = (("dt_bias", num_heads), ("A_log", num_heads), ("D", num_heads))
        for name, rows in per_head + (("norm_weight", intermediate),):
            setattr(self, name, _param(rows // world))
            set_weight_loader(getattr(self, name), head_parts_weight_loader([[rows]], world))
        self.out_proj_weight = _param(intermediate // world, hidden_size)
        set_weight_loader(
            self.out_proj_weight,
            sharding_weight_loader(
                shard_dim=0, shard_size=intermediate // world, num_shards=world, is_storage_transposed=True
            ),
        )
        self.conv1d_bias = _param(self.conv_dim)
        set_weight_loader(self.conv1d_bias, head_parts_weight_loader(conv_parts, world))
        if config.add_bias_linear:
            self.in_proj_bias = _param((2 * intermediate + 2 * gn + num_heads) // world)
            set_weight_loader(self.in_proj_bias, head_parts_weight_loader(proj_parts, world))
            self.out_proj_bias = _param(hidden_size)  # replicated: added once after the all-reduce
        else:
            self.register_parameter("in_proj_bias", None)
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
        y = mamba2_static(
            NF.linear(hidden_states, self.in_proj_weight, self.in_proj_bias), params, self.conv_state, self.ssm_state,
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


def _lora(in_features: int, rank: int, out_loader, out_features: int) -> nn.Module:
    """One use's adapter ``B(A(x))``: ``a_weight [in, rank]`` replicated, ``b_weight [rank, out / world]`` sharded."""
    lora = nn.Module()
    lora.a_weight = _param(in_features, rank)
    set_weight_loader(lora.a_weight, transposed_loader())
    lora.b_weight = _param(rank, out_features)
    set_weight_loader(lora.b_weight, out_loader)
    return lora


class Zamba2SharedBlock(nn.Module):
    """Shared transformer block, weights shared by every num_mem_blocks-th layer that uses it: concat(hidden,
    embeddings) -> input_layernorm -> attention (self_attn) -> pre_ff_layernorm -> gated MLP
    (feed_forward); no residual inside. Per use (the k-th using layer): LoRA adapters ``B(A(x))`` added to q, k, v
    and to the fused gate_up projection (HF's ``*_adapter_list.{k}``), and the calling layer's own K/V cache.
    """

    def __init__(self, config: Zamba2Config, copy: int, num_uses: int):
        super().__init__()
        # >>> PARALLELISM <<< heads and the MLP's intermediate dim sharded across TP ranks
        world = dist.tp_size()
        hidden_size = config.hidden_size
        width = 2 * hidden_size  # the block's input
        self.input_layernorm = RMSNorm(width, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        self.self_attn = nn.Module()
        self.feed_forward = nn.Module()
        attn, mlp = self.self_attn, self.feed_forward
        self.head_dim = config.attention_head_dim
        self.num_heads = dist.divide(config.num_attention_heads, world, "num_attention_heads")
        self.num_kv_heads = dist.divide(config.kv_heads, world, "num_key_value_heads")
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.scale = (config.attention_head_dim / 2) ** (-0.5)
        self.use_rope = config.use_mem_rope

        def column(size: int):
            return sharding_weight_loader(shard_dim=1, shard_size=size, num_shards=world, is_storage_transposed=True)

        sizes = {"q_proj_weight": self.q_size, "k_proj_weight": self.kv_size, "v_proj_weight": self.kv_size}
        for name, size in sizes.items():
            setattr(attn, name, _param(width, size))
            set_weight_loader(getattr(attn, name), column(size))
        attn.o_proj_weight = _param(self.q_size, hidden_size)
        set_weight_loader(
            attn.o_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=self.q_size, num_shards=world, is_storage_transposed=True),
        )
        intermediate_size = config.mlp_width
        self.inter = dist.divide(intermediate_size, world, "intermediate_size")
        mlp.gate_up_proj_weight = _param(hidden_size, 2 * self.inter)
        set_weight_loader(mlp.gate_up_proj_weight, merged_rows_loader([intermediate_size] * 2, world))
        mlp.down_proj_weight = _param(self.inter, hidden_size)
        set_weight_loader(
            mlp.down_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=self.inter, num_shards=world, is_storage_transposed=True),
        )
        if config.add_bias_linear:
            mlp.gate_up_proj_bias = _param(2 * self.inter)
            set_weight_loader(mlp.gate_up_proj_bias, merged_rows_loader([intermediate_size] * 2, world))
            mlp.down_proj_bias = _param(hidden_size)  # replicated
        else:
            mlp.gate_up_proj_bias = mlp.down_proj_bias = None
        # Per-use adapters: copy c holds those of the uses k with k % cycle == c % cycle (an Identity elsewhere, as
        # HF's lists); use k reads entry k
        rank, cycle = config.adapter_rank, config.num_mem_blocks
        mine = [k % cycle == copy % cycle for k in range(num_uses)]
        self.attention_adapters = config.use_shared_attention_adapter
        if self.attention_adapters:
            for name in ("linear_q_adapter_list", "linear_k_adapter_list", "linear_v_adapter_list"):
                setattr(attn, name, nn.ModuleList(
                    [_lora(width, rank, column(self.q_size), self.q_size) if own else nn.Identity() for own in mine]
                ))
        gate_up = merged_rows_loader([intermediate_size] * 2, world)
        mlp.gate_up_proj_adapter_list = nn.ModuleList(
            [_lora(hidden_size, rank, gate_up, 2 * self.inter) if own else nn.Identity() for own in mine]
        )

    @staticmethod
    def _adapter(lora: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """One use's LoRA: ``B(A(x))``."""
        return NF.linear(NF.linear(x, lora.a_weight), lora.b_weight)

    def cache_for(self, layer_name: str) -> PagedKV:
        """The paged K/V of one using layer (the weights are shared, the cache is not)."""
        return PagedKV(layer_name, self.num_kv_heads, self.head_dim)

    def forward(
        self, hidden_states: torch.Tensor, embeddings: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
        use: int, cache: PagedKV, attn_metadata: dict,
    ) -> torch.Tensor:
        attn, mlp = self.self_attn, self.feed_forward
        meta = attn_metadata[cache.layer_name]
        x = self.input_layernorm(torch.cat([hidden_states, embeddings], dim=-1))
        q, k, v = NF.linear(x, attn.q_proj_weight), NF.linear(x, attn.k_proj_weight), NF.linear(x, attn.v_proj_weight)
        if self.attention_adapters:
            q = q + self._adapter(attn.linear_q_adapter_list[use], x)
            k = k + self._adapter(attn.linear_k_adapter_list[use], x)
            v = v + self._adapter(attn.linear_v_adapter_list[use], x)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.use_rope:
            q = NF.rope(q, cos_sin, positions, self.head_dim, "rotate_half")
            k = NF.rope(k, cos_sin, positions, self.head_dim, "rotate_half")
        # The model owns cache writes; padding tokens carry slot -1 and leave the cache untouched.
        NF.write_kv_cache(k, v, cache.k_cache, cache.v_cache, meta["slot_mapping"])
        if meta["max_query_len"] <= meta["decode_token_threshold"]:
            out = NF.attention_decode(
                q, cache.k_cache, cache.v_cache, meta["block_table_tensor"], positions, self.scale
            )
        elif meta["kv_segment_size"] > 0:
            out = NF.segmented_attention(
                q, cache.k_cache, cache.v_cache, meta["block_table_tensor"], meta["seq_ids"], positions, self.scale
            )
        else:
            out = NF.flash_attention(q, k, v, meta["seq_ids"], positions, self.scale)
        x = self.pre_ff_layernorm(NF.o_proj(out.reshape(out.shape[0], self.q_size), attn.o_proj_weight))
        gate_up = NF.linear(x, mlp.gate_up_proj_weight, mlp.gate_up_proj_bias)
        gate_up = gate_up + self._adapter(mlp.gate_up_proj_adapter_list[use], x)
        gate, up = gate_up.chunk(2, dim=-1)
        return NF.o_proj(torch.nn.functional.gelu(gate) * up, mlp.down_proj_weight, mlp.down_proj_bias)


class Zamba2DecoderLayer(nn.Module):
    def __init__(self, config: Zamba2Config, layer_idx: int, shared: list[nn.Module], uses: list[int]):
        super().__init__()
        self.mamba = Zamba2Mixer(config, layer_idx)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # The shared block (shared_transformer): copy use % copies, registered in each layer that uses it (its
        # parameters keep the first user's names); this layer's own K/V cache and output projection ([in, out]).
        self.shared_use = uses.index(layer_idx) if layer_idx in uses else None
        if self.shared_use is not None:
            self.shared_transformer = shared[self.shared_use % len(shared)]
            self.shared_transformer_cache = self.shared_transformer.cache_for(f"layers.{layer_idx}.shared_transformer")
            self.linear_weight = _param(config.hidden_size, config.hidden_size)
            set_weight_loader(self.linear_weight, transposed_loader())

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict,
        embeddings: torch.Tensor,
    ) -> torch.Tensor:
        # x + mixer(input_layernorm(x + t)); t = linear(shared_transformer(...)) in layers with the shared block.
        residual = hidden_states
        if self.shared_use is not None:
            shared = self.shared_transformer(
                hidden_states, embeddings, positions, cos_sin, self.shared_use, self.shared_transformer_cache,
                attn_metadata,
            )
            hidden_states = hidden_states + NF.linear(shared, self.linear_weight)
        hidden_states = self.input_layernorm(hidden_states)
        return residual + self.mamba(hidden_states, positions, cos_sin, attn_metadata)


class Zamba2Model(nn.Module):
    def __init__(self, config: Zamba2Config):
        super().__init__()
        world = dist.tp_size()
        vocab_size, hidden_size = config.vocab_size, config.hidden_size
        # >>> PARALLELISM <<< vocab rows sharded across ranks (the last shard zero-padded).
        self.vocab_per_rank = -(-vocab_size // world)
        self.embed_tokens_weight = _param(self.vocab_per_rank, hidden_size)
        set_weight_loader(self.embed_tokens_weight, padded_vocab_loader(vocab_size, self.vocab_per_rank))
        # Layers whose block runs the shared block, in depth order; copy k % copies serves the k-th. The copies
        # are registered in their layers only, so their parameters keep the first user's checkpoint names.
        uses = [i for i in range(len(config.schedule)) if config.layer_block(i) in ["hybrid"]]
        # untied: each layer its own weights
        copies = config.num_mem_blocks if config.tie_word_embeddings else len(uses)
        shared = [Zamba2SharedBlock(config, c, len(uses)) for c in range(copies)]
        self.layers = nn.ModuleList(
            [Zamba2DecoderLayer(config, i, shared, uses) for i in range(len(config.schedule))]
        )
        # EAGLE3: layers whose *input* hidden states (HF's output_hidden_states[i]) are also returned; none by default
        self.aux_hidden_state_layers: tuple[int, ...] = ()
        self.final_layernorm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        # float32 [max_position, rotary_dim] cos|sin table shared by every layer, indexed by position ids.
        self.register_buffer(
            "rope_cos_sin",
            cos_sin_cache(
                config.attention_head_dim,
                config.rope_theta,
                config.rope_scaling,
                16384 if config.use_long_context else config.max_position_embeddings,
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
        embeddings = hidden_states  # the shared block reads them beside the hidden states
        for i, layer in enumerate(self.layers):
            if i in self.aux_hidden_state_layers:  # a Python-level set: traced once per compiled bucket
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states, positions, self.rope_cos_sin, attn_metadata, embeddings)
        if aux_hidden_states:  # EAGLE3: [tokens, len(layers) * hidden], the draft model's input
            return self.final_layernorm(hidden_states), torch.cat(aux_hidden_states, dim=-1)
        return self.final_layernorm(hidden_states)


class Zamba2ForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): load_mapped_weights reads these and checkpoint_mappings().
    ignored_keys = IGNORED_KEYS
    renames = RENAMES

    def __init__(self, config: Zamba2Config):
        super().__init__()
        self.config = config
        self.model = Zamba2Model(config)
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
        # Each layer's mixer state, then the K/V of each use of the shared block (one cache per using layer).
        layers = self.model.layers
        return KVSpec(layers=[layer.mamba.kv_spec() for layer in layers] + [
            layer.shared_transformer_cache.kv_spec(layer.linear_weight.dtype)
            for layer in layers if layer.shared_use is not None
        ])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.model.layers:
            if layer.shared_use is not None:
                layer.shared_transformer_cache.bind_kv_cache(kv_caches)
            layer.mamba.bind_kv_cache(kv_caches)

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        """Parameter -> checkpoint key(s); ``available``: the checkpoint's keys after ``renames``."""
        return checkpoint_mappings(self.config)

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Load this rank's shards onto the parameters' device (strict: every parameter mapped, every checkpoint
        tensor used or ignored)."""
        load_mapped_weights(self, checkpoint)
