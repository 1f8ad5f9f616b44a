# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/zamba2.yaml --target vllm
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Zamba2 for the vllm target: vLLM's model interface and layer library.

Hybrid decoder: Mamba-2 (SSD) mixers behind an RMSNorm; hybrid layers first run a shared attention + GELU MLP block
(num_mem_blocks weight sets, round-robin) on concat(hidden, embeddings) with per-use LoRA adapters and a per-layer K/V
cache, whose projected output joins the mixer's input.

Reference: transformers/models/zamba2/modeling_zamba2.py.

vLLM builds ``Zamba2ForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
(``MODELGEN_VLLM_MODELS``), runs ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)`` over
flattened tokens (attention reads its metadata from vLLM's forward context), ``compute_logits`` on the sampled rows
and ``load_weights(weights)`` once. Tensor parallelism comes from vLLM's parallel linears, pipeline parallelism from
``make_layers`` (``SupportsPP``: a stage holds its layers, the others are ``PPMissingLayer``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from modelgen.runtime.layers.mamba2.vllm import (
    HybridMamba2Model,
    MambaMixer2,
    mamba2_state_copy_func,
    mamba2_state_dtype,
    mamba2_state_shape,
)
from modelgen.runtime.layers.shared_block.vllm import LoRA
from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from modelgen.runtime.vllm.rope import rope_parameters
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
)
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.models.interfaces import SupportsPP
from vllm.model_executor.models.utils import (
    PPMissingLayer,
    extract_layer_index,
    make_empty_intermediate_tensors_factory,
    make_layers,
    maybe_prefix,
)
from vllm.sequence import IntermediateTensors

from .config import Zamba2Config
from .weights import (
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class Zamba2Mixer(MambaMixer2):
    """Mamba-2 mixer: in_proj -> [z, xBC, dt]; act(causal depthwise conv1d(xBC)) -> x, B, C; the SSD scan; RMSNorm(y
    * silu(z)) per group; out_proj -- vLLM's layer (recurrent_state state: conv inputs and SSM state, one slot
    per request of vLLM's KV cache, registered under ``prefix``). Parameters keep the checkpoint's names."""

    def __init__(self, config: Zamba2Config, vllm_config: VllmConfig, prefix: str):
        super().__init__(
            vllm_config,
            prefix,
            hidden_size=config.hidden_size,
            num_heads=config.n_mamba_heads,
            head_dim=config.mamba_head_dim,
            state_size=config.mamba_d_state,
            n_groups=config.mamba_ngroups,
            conv_kernel=config.mamba_d_conv,
            time_step_limit=[config.time_step_min, float('inf')],
            use_bias=config.add_bias_linear,
            use_conv_bias=True,
            activation="silu",
            eps=1e-05,
        )


class Zamba2SharedBlock(nn.Module):
    """Shared transformer block, weights shared by every num_mem_blocks-th layer that uses it: concat(hidden,
    embeddings) -> input_layernorm -> attention (self_attn) -> pre_ff_layernorm -> gated MLP
    (feed_forward); no residual inside. Per use (the k-th using layer): LoRA adapters ``B(A(x))`` added to q, k, v
    and to the fused gate_up projection (HF's ``*_adapter_list.{k}``), and the calling layer's own vLLM Attention.
    """

    def __init__(self, config: Zamba2Config, vllm_config: VllmConfig, copy: int, num_uses: int, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        hidden_size = config.hidden_size
        width = 2 * hidden_size  # the block's input
        self.input_layernorm = RMSNorm(width, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(hidden_size, eps=config.rms_norm_eps)
        self.self_attn = nn.Module()
        self.feed_forward = nn.Module()
        attn, mlp = self.self_attn, self.feed_forward
        self.head_dim = config.attention_head_dim
        self.scale = (config.attention_head_dim / 2) ** (-0.5)
        heads, kv_heads = config.num_attention_heads, config.kv_heads
        ap, mp = f"{prefix}.self_attn", f"{prefix}.feed_forward"
        # q/k/v kept apart as stored; heads sharded across TP ranks
        attn.q_proj = ColumnParallelLinear(width, heads * self.head_dim, bias=False, quant_config=quant_config,
                                           prefix=f"{ap}.q_proj")
        attn.k_proj = ColumnParallelLinear(width, kv_heads * self.head_dim, bias=False, quant_config=quant_config,
                                           prefix=f"{ap}.k_proj")
        attn.v_proj = ColumnParallelLinear(width, kv_heads * self.head_dim, bias=False, quant_config=quant_config,
                                           prefix=f"{ap}.v_proj")
        attn.o_proj = RowParallelLinear(heads * self.head_dim, hidden_size, bias=False, quant_config=quant_config,
                                        prefix=f"{ap}.o_proj")
        self.num_heads = attn.q_proj.output_size_per_partition // self.head_dim
        self.num_kv_heads = attn.k_proj.output_size_per_partition // self.head_dim
        self.rotary_emb = None
        if config.use_mem_rope:
            self.rotary_emb = get_rope(
                self.head_dim,
                max_position=16384 if config.use_long_context else config.max_position_embeddings,
                is_neox_style=True,
                rope_parameters=rope_parameters(
                    theta=config.rope_theta, scaling=config.rope_scaling, rotary_dim=self.head_dim
                ),
            )
        intermediate_size = config.mlp_width
        # stored as one [gate | up] tensor: vLLM's merged loader splits it by output sizes
        mlp.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=config.add_bias_linear,
                                                      quant_config=quant_config, prefix=f"{mp}.gate_up_proj")
        mlp.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=config.add_bias_linear,
                                          quant_config=quant_config, prefix=f"{mp}.down_proj")
        # Per-use adapters: copy c holds those of the uses k with k % cycle == c % cycle (an Identity elsewhere, as
        # HF's lists); use k reads entry k
        rank, cycle = config.adapter_rank, config.num_mem_blocks
        mine = [k % cycle == copy % cycle for k in range(num_uses)]
        self.attention_adapters = config.use_shared_attention_adapter
        if self.attention_adapters:
            for name in ("linear_q_adapter_list", "linear_k_adapter_list", "linear_v_adapter_list"):
                setattr(attn, name, nn.ModuleList([
                    LoRA(width, rank, heads * self.head_dim, f"{ap}.{name}.{k}") if own else nn.Identity()
                    for k, own in enumerate(mine)
                ]))
        mlp.gate_up_proj_adapter_list = nn.ModuleList([
            LoRA(hidden_size, rank, [intermediate_size] * 2, f"{mp}.gate_up_proj_adapter_list.{k}") if own
            else nn.Identity()
            for k, own in enumerate(mine)
        ])

    def cache_for(self, vllm_config: VllmConfig, prefix: str) -> Attention:
        """vLLM's attention of one using layer: its own K/V in vLLM's cache (the weights are shared, the cache is
        not)."""
        return Attention(
            self.num_heads, self.head_dim, self.scale, num_kv_heads=self.num_kv_heads,
            cache_config=vllm_config.cache_config, quant_config=vllm_config.quant_config, prefix=prefix,
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, embeddings: torch.Tensor, use: int,
        cache: Attention,
    ) -> torch.Tensor:
        attn, mlp = self.self_attn, self.feed_forward
        x = self.input_layernorm(torch.cat([hidden_states, embeddings], dim=-1))
        (q, _), (k, _), (v, _) = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
        if self.attention_adapters:
            q = q + attn.linear_q_adapter_list[use](x)
            k = k + attn.linear_k_adapter_list[use](x)
            v = v + attn.linear_v_adapter_list[use](x)
        if self.rotary_emb is not None:
            q, k = self.rotary_emb(positions, q, k)
        x, _ = attn.o_proj(cache(q, k, v))
        x = self.pre_ff_layernorm(x)
        gate_up, _ = mlp.gate_up_proj(x)
        gate_up = gate_up + mlp.gate_up_proj_adapter_list[use](x)
        gate, up = gate_up.chunk(2, dim=-1)
        x, _ = mlp.down_proj(torch.nn.functional.gelu(gate) * up)
        return x


class Zamba2DecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: Zamba2Config, vllm_config: VllmConfig, layer_idx: int, prefix: str,
                 shared: list[nn.Module], uses: list[int]):
        super().__init__()
        self.mamba = Zamba2Mixer(config, vllm_config, f"{prefix}.mamba")
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # The shared block (shared_transformer): copy use % copies, registered in each layer that uses it (its
        # parameters keep the first user's names); this layer's own vLLM Attention (K/V) and output projection.
        self.shared_use = uses.index(layer_idx) if layer_idx in uses else None
        if self.shared_use is not None:
            self.shared_transformer = shared[self.shared_use % len(shared)]
            self.shared_transformer_cache = self.shared_transformer.cache_for(
                vllm_config, f"{prefix}.shared_transformer_cache"
            )
            self.linear = ReplicatedLinear(
                config.hidden_size, config.hidden_size, bias=False, quant_config=vllm_config.quant_config,
                prefix=f"{prefix}.linear",
            )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None,
        embeddings: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x + mixer(input_layernorm(x + t)); t = linear(shared_transformer(...)) in layers with the shared block.
        if residual is not None:
            hidden_states = hidden_states + residual
        residual = hidden_states
        if self.shared_use is not None:
            shared = self.shared_transformer(
                positions, hidden_states, embeddings, self.shared_use, self.shared_transformer_cache,
            )
            hidden_states = hidden_states + self.linear(shared)[0]
        hidden_states = self.input_layernorm(hidden_states)
        return self.mamba(positions, hidden_states), residual


class Zamba2Model(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(Zamba2Config, vllm_config)
        self.config = config
        pp = get_pp_group()
        # The embedding lives on the first stage (and on the last when the LM head is tied to it).
        if pp.is_first_rank or (config.tie_word_embeddings and pp.is_last_rank):
            self.embed_tokens = VocabParallelEmbedding(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=f"{prefix}.embed_tokens",
            )
        else:
            self.embed_tokens = PPMissingLayer()
        # Layers whose block runs the shared block, in depth order; copy k % copies serves the k-th. The copies
        # are registered in their layers only, so their parameters keep the first user's checkpoint names.
        if pp.world_size > 1:
            raise NotImplementedError(
                "Zamba2Model: its shared block reads the token embeddings in every hybrid layer; pipeline "
                "parallelism is not generated for it"
            )
        uses = [i for i in range(len(config.schedule)) if config.layer_block(i) in ["hybrid"]]
        # untied: each layer its own weights
        copies = config.num_mem_blocks if config.tie_word_embeddings else len(uses)
        shared = [
            Zamba2SharedBlock(config, vllm_config, c, len(uses), f"{prefix}.layers.{uses[c]}.shared_transformer")
            for c in range(copies)
        ]
        self.start_layer, self.end_layer, self.layers = make_layers(
            len(config.schedule),
            lambda prefix: Zamba2DecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix, shared, uses),
            prefix=f"{prefix}.layers",
        )
        if pp.is_last_rank:
            self.final_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        else:
            self.final_layernorm = PPMissingLayer()
        # What a stage hands the next (pipeline parallelism): the two halves of the residual stream.
        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(
            ["hidden_states", "residual"], config.hidden_size
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors:
        if get_pp_group().is_first_rank:
            hidden_states = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
            residual = None
        else:
            hidden_states, residual = intermediate_tensors["hidden_states"], intermediate_tensors["residual"]
        # The shared block reads the token embeddings beside the hidden states (every stage recomputes them).
        embeddings = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        for layer in self.layers[self.start_layer : self.end_layer]:
            hidden_states, residual = layer(positions, hidden_states, residual, embeddings)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        hidden_states, _ = self.final_layernorm(hidden_states, residual)
        return hidden_states


class Zamba2ForCausalLM(HybridMamba2Model, nn.Module, SupportsPP):
    # vLLM reads packed_modules_mapping (fused parameter -> HF modules) for LoRA and quantization.
    packed_modules_mapping = PACKED_MODULES_MAPPING

    # HybridMamba2Model: vLLM's HasInnerState and IsHybrid. vLLM sizes the Mamba-2
    # layers' states (one slot per request, in its KV cache) from these, before building the model.
    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> tuple[torch.dtype, ...]:
        """The conv and SSM states' dtypes."""
        return mamba2_state_dtype(vllm_config)

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """Per-rank conv state ``[I + 2*G*N, K-1]`` and SSM state ``[H, P, N]`` shapes of a slot."""
        config = spec_config(Zamba2Config, vllm_config)
        return mamba2_state_shape(
            vllm_config, num_heads=config.n_mamba_heads, head_dim=config.mamba_head_dim,
            state_size=config.mamba_d_state, n_groups=config.mamba_ngroups, conv_kernel=config.mamba_d_conv,
        )

    @classmethod
    def get_mamba_state_copy_func(cls):
        """How vLLM copies a slot's states (prefix caching of hybrid models)."""
        return mamba2_state_copy_func()

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(Zamba2Config, vllm_config)
        self.config = config
        self.model = Zamba2Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=maybe_prefix(prefix, "lm_head"),
            )
            if config.tie_word_embeddings:
                # One tensor; load_weights fills it through the embedding (TIED_PARAMETERS).
                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
            self.logits_processor = LogitsProcessor(config.vocab_size)
        else:
            self.lm_head = PPMissingLayer()
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors:
        """``input_ids, positions [num_tokens]`` -> final hidden states ``[num_tokens, hidden]`` (or, before the
        last pipeline stage, the residual stream for the next)."""
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """Hidden states of the sampled rows -> logits over the full vocabulary (None on ranks that hold none)."""
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Fill every parameter from (checkpoint name, tensor) pairs through the tables of weights.py; returns the
        parameters filled. Strict: a tensor nothing consumes or ignores, or a parameter nothing fills, is an error."""
        tables = WeightTables(
            stacked_params_mapping=STACKED_PARAMS_MAPPING,
            ignored=IGNORED_KEYS,
            renames=RENAMES,
            tied=TIED_PARAMETERS,
        )
        return load_generated_weights(self, weights, tables)
