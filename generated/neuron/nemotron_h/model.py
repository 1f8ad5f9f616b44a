# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/nemotron_h.yaml --target neuron
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronH for the neuron target, in vLLM Neuron's style.

Hybrid decoder of one-sub-layer blocks: Mamba-2 (SSD) mixers with per-request conv and SSM states, NoPE GQA attention,
ungated ReLU^2 MLPs and mixtures of ungated ReLU^2 experts (grouped sigmoid router, shared expert), each behind an
RMSNorm, by layers_block_type.

Reference: transformers/models/nemotron_h/modeling_nemotron_h.py.

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
from modelgen.runtime.layers.mamba2.ops import mamba2_static
from modelgen.runtime.layers.mlp import Activation
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

from .config import NemotronHConfig
from .weights import IGNORED_KEYS, RENAMES, checkpoint_mappings


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class NemotronHMixer(nn.Module):
    """Mamba-2 mixer with static shapes: in_proj -> [z, xBC, dt]; act(causal conv1d(xBC)) -> x, B, C; the SSD scan
    (chunked over a prefill bucket, one recurrent step per decode row); RMSNorm(y * silu(z)) per group; out_proj.
    Each bucket's rows are requests, each request's conv inputs and SSM state sit in its state-pool slot
    (``state_slots``)."""

    def __init__(self, config: NemotronHConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.mixer"
        # >>> PARALLELISM <<< heads (and the whole groups of B / C they read) are sharded across TP ranks.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        num_heads, head_dim = config.mamba_num_heads, config.mamba_head_dim
        n_groups, state_size = config.n_groups, config.ssm_state_size
        intermediate, gn = num_heads * head_dim, n_groups * state_size
        dist.divide(n_groups, world, "n_groups (a rank holds whole groups)")
        self.conv_kernel = config.conv_kernel
        time_step_limit = tuple(float(t) for t in (config.time_step_limit))  # (min, max) of dt
        self.sizes = dict(
            num_heads=num_heads // world, head_dim=head_dim, n_groups=n_groups // world, state_size=state_size,
            intermediate=intermediate // world, group_size=intermediate // n_groups,
            chunk_size=config.chunk_size, time_step_limit=time_step_limit,
            activation=config.mamba_hidden_act, eps=config.layer_norm_epsilon,
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
        if config.use_conv_bias:
            self.conv1d_bias = _param(self.conv_dim)
            set_weight_loader(self.conv1d_bias, head_parts_weight_loader(conv_parts, world))
        else:
            self.register_parameter("conv1d_bias", None)  # None, not zeros: no bias add in the graph
        if config.use_bias:
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


class NemotronHAttention(nn.Module):
    """GQA self-attention with separate prefill (packed, causal) and decode (paged) paths."""

    def __init__(self, config: NemotronHConfig, layer_idx: int):
        super().__init__()
        self.layer_name = f"layers.{layer_idx}.mixer"
        # >>> PARALLELISM <<< heads are sharded across TP ranks; KV heads are replicated when fewer than ranks.
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.head_dim = config.head_dim
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


class NemotronHMLP(nn.Module):
    """Ungated MLP: down_proj(relu2(up_proj(x))); intermediate dim sharded across ranks."""

    def __init__(self, config: NemotronHConfig, intermediate_size: int):
        super().__init__()
        world = dist.tp_size()
        hidden_size = config.hidden_size
        self.intermediate_size_per_rank = dist.divide(intermediate_size, world, "intermediate_size")
        inter = self.intermediate_size_per_rank
        self.up_proj_weight = _param(hidden_size, inter)
        set_weight_loader(
            self.up_proj_weight,
            sharding_weight_loader(shard_dim=1, shard_size=inter, num_shards=world, is_storage_transposed=True),
        )
        self.down_proj_weight = _param(inter, hidden_size)
        set_weight_loader(
            self.down_proj_weight,
            sharding_weight_loader(shard_dim=0, shard_size=inter, num_shards=world, is_storage_transposed=True),
        )
        if config.mlp_bias:
            self.up_proj_bias = _param(inter)
            set_weight_loader(self.up_proj_bias, sharding_weight_loader(0, inter, world))
            self.down_proj_bias = _param(hidden_size)  # replicated, added once after the reduction
        else:
            self.register_parameter("up_proj_bias", None)
            self.register_parameter("down_proj_bias", None)
        self.act_fn = Activation("relu2")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        h = self.act_fn(NF.linear(hidden_states, self.up_proj_weight, self.up_proj_bias))
        return NF.o_proj(h, self.down_proj_weight, self.down_proj_bias)


class NemotronHSparseMoeBlock(nn.Module):
    """Mixture of experts: sigmoid top-k router (grouped) + shared experts; shape-static MoE op (every local expert,
    dense combine).

    >>> PARALLELISM <<< experts by ``dist.moe_layout``: whole experts [offset, offset + E_local) per rank (EP), each
    one's intermediate dim split over the ranks (expert_parallel_size=1), or both; outputs are summed across ranks.
    Experts keep HF's layout, not gated: ``w13 [E_local, I, H]`` (up), ``w2 [E_local, H, I]``.
    """

    def __init__(self, config: NemotronHConfig):
        super().__init__()
        hidden_size, num_experts = config.hidden_size, config.n_routed_experts
        # non-gated experts: the stacked "w13" holds the up projection alone (loaded as shard w1)
        layout, loaders = expert_loaders(num_experts, ("w1", "w2"))
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
        self.experts_w13_weight = _param(self.num_local_experts, inter, hidden_size)  # up only
        set_weight_loader(self.experts_w13_weight, loaders["w1"])
        self.experts_w2_weight = _param(self.num_local_experts, hidden_size, inter)
        set_weight_loader(self.experts_w2_weight, loaders["w2"])
        self.shared_experts = NemotronHMLP(config, config.moe_shared_expert_intermediate_size)

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
            "relu2", self.expert_offset,
            gated=False,  # down(act(up(x)))
        )
        return out + self.shared_experts(hidden_states)


class NemotronHDecoderLayer(nn.Module):
    def __init__(self, config: NemotronHConfig, layer_idx: int):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block == "mamba":
            self.mixer = NemotronHMixer(config, layer_idx)
        elif block == "attention":
            self.mixer = NemotronHAttention(config, layer_idx)
        elif block == "mlp":
            self.mixer = NemotronHMLP(config, config.intermediate_size)
        else:
            self.mixer = NemotronHSparseMoeBlock(config)
        self.norm = RMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(
        self, hidden_states: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, attn_metadata: dict
    ) -> torch.Tensor:
        # One sub-layer (a mixer or an MLP): x + f(norm(x)).
        residual = hidden_states
        hidden_states = self.norm(hidden_states)
        if self.block in ["mlp", "moe"]:
            return residual + self.mixer(hidden_states)
        return residual + self.mixer(hidden_states, positions, cos_sin, attn_metadata)


class NemotronHModel(nn.Module):
    def __init__(self, config: NemotronHConfig):
        super().__init__()
        world = dist.tp_size()
        vocab_size, hidden_size = config.vocab_size, config.hidden_size
        # >>> PARALLELISM <<< vocab rows sharded across ranks (the last shard zero-padded).
        self.vocab_per_rank = -(-vocab_size // world)
        self.embeddings_weight = _param(self.vocab_per_rank, hidden_size)
        set_weight_loader(self.embeddings_weight, padded_vocab_loader(vocab_size, self.vocab_per_rank))
        self.layers = nn.ModuleList([NemotronHDecoderLayer(config, i) for i in range(config.schedule_length)])
        # EAGLE3: layers whose *input* hidden states (HF's output_hidden_states[i]) are also returned; none by default
        self.aux_hidden_state_layers: tuple[int, ...] = ()
        self.norm_f = RMSNorm(hidden_size, eps=config.layer_norm_epsilon)
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
        hidden_states = NF.embedding(input_ids, self.embeddings_weight, rank)
        if inputs_embeds is not None:  # prompt-embeds path: rows flagged as token ids keep their embedding
            hidden_states = torch.where(is_token_ids[:, None], hidden_states, inputs_embeds.to(hidden_states.dtype))
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.aux_hidden_state_layers:  # a Python-level set: traced once per compiled bucket
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states, positions, self.rope_cos_sin, attn_metadata)
        if aux_hidden_states:  # EAGLE3: [tokens, len(layers) * hidden], the draft model's input
            return self.norm_f(hidden_states), torch.cat(aux_hidden_states, dim=-1)
        return self.norm_f(hidden_states)


class NemotronHForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): load_mapped_weights reads these and checkpoint_mappings().
    ignored_keys = IGNORED_KEYS
    renames = RENAMES

    def __init__(self, config: NemotronHConfig):
        super().__init__()
        self.config = config
        self.backbone = NemotronHModel(config)
        self.vocab_size = config.vocab_size
        per_rank = self.backbone.vocab_per_rank
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
        hidden_states = self.backbone(input_ids, positions, attn_metadata, rank, inputs_embeds, is_token_ids)
        aux_hidden_states = None
        if self.backbone.aux_hidden_state_layers:  # EAGLE3 (the guide's step 1e): every token's aux states
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
        bad = [i for i in layers if not 0 <= i < len(self.backbone.layers)]
        if bad:
            raise ValueError(f"aux hidden state layers {bad}: expected indices in [0, {len(self.backbone.layers)})")
        self.backbone.aux_hidden_state_layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        """The layers EAGLE3 drafters are trained on (vLLM's default: early, middle, late)."""
        n = len(self.backbone.layers)
        return tuple(min(max(i, 0), n - 1) for i in (2, n // 2, n - 3))

    def get_kv_spec(self) -> KVSpec:
        """Every layer's cache, as its attention declares it."""
        # Blocks whose only sub-layer is an MLP (["mlp", "moe"]) hold no cache.
        return KVSpec(layers=[
            layer.mixer.kv_spec() for layer in self.backbone.layers if layer.block not in ["mlp", "moe"]
        ])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        for layer in self.backbone.layers:
            if layer.block not in ["mlp", "moe"]:
                layer.mixer.bind_kv_cache(kv_caches)

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        """Parameter -> checkpoint key(s); ``available``: the checkpoint's keys after ``renames``."""
        return checkpoint_mappings(self.config, available)  # fused vs per-expert expert tensors, by what is present

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Load this rank's shards onto the parameters' device (strict: every parameter mapped, every checkpoint
        tensor used or ignored)."""
        load_mapped_weights(self, checkpoint)
