# ==================================================================================================================
# GENERATED FROM specs/minimax.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/minimax.yaml --target vllm
# source hash (spec + templates + generator): 8eb40ba1c52fdebf
# ==================================================================================================================
"""MiniMax for the vllm target: vLLM's model interface and layer library.

Hybrid MoE decoder: MiniMax lightning attention (linear attention with per-head exponential decay and a per-request
state) and GQA layers with optional partial RoPE and sliding window, softmax top-k MoE, residual joins scaled by alpha /
beta factors from the normed input.

Reference: transformers/models/minimax/modeling_minimax.py.

vLLM builds ``MiniMaxForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
(``MODELGEN_VLLM_MODELS``), runs ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)`` over
flattened tokens (attention reads its metadata from vLLM's forward context), ``compute_logits`` on the sampled rows
and ``load_weights(weights)`` once. Tensor parallelism comes from vLLM's parallel linears, pipeline parallelism from
``make_layers`` (``SupportsPP``: a stage holds its layers, the others are ``PPMissingLayer``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from modelgen.runtime.layers.lightning_attention.vllm import (
    HybridLightningModel,
    LightningAttention,
    lightning_state_copy_func,
    lightning_state_dtype,
    lightning_state_shape,
)
from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from modelgen.runtime.vllm.rope import rope_parameters
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.fused_moe import FusedMoEFactory
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, ReplicatedLinear, RowParallelLinear
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

from .config import MiniMaxConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class MiniMaxAttention(nn.Module):
    """GQA self-attention: fused QKV, RoPE (rotate_half, partial), vLLM's paged attention, sliding window, row-parallel
    output."""

    def __init__(self, config: MiniMaxConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.head_dim = config.head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            config.num_attention_heads,
            config.num_key_value_heads,
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.qkv_proj",
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * self.head_dim,
            config.hidden_size,
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.o_proj",
        )
        self.rotary_emb = get_rope(
            self.head_dim,
            max_position=config.max_position_embeddings,
            is_neox_style=True,  # rotate_half: halves rotated together (HF rotate_half)
            rope_parameters=rope_parameters(
                theta=config.rope_theta,
                scaling=config.rope_scaling,
                rotary_dim=int(self.head_dim * config.rope_fraction),
            ),
        )
        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.head_dim ** -0.5,
            num_kv_heads=self.num_kv_heads,
            cache_config=vllm_config.cache_config,
            quant_config=quant_config,
            per_layer_sliding_window=config.sliding_window,  # q sees k iff q - W < k <= q
            prefix=f"{prefix}.attn",
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        output, _ = self.o_proj(self.attn(q, k, v))
        return output


class MiniMaxLightningAttention(LightningAttention):
    """Lightning attention: silu(qkv) -> per-head q, k, v; linear attention with a per-head decay;
    out_proj(sigmoid(output_gate(x)) * norm(o)), vLLM's layer (recurrent_state state ``[heads, D, D]``, one
    slot per request of vLLM's KV cache, registered under ``prefix``). Parameters keep the checkpoint's names
    (``output_gate``, ``norm``, ``out_proj``; ``qkv_proj`` is ``qkv``)."""

    def __init__(self, config: MiniMaxConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__(
            vllm_config,
            prefix,
            hidden_size=config.hidden_size,
            num_heads=config.num_attention_heads,
            head_dim=config.head_dim,
            block_size=config.block_size,
            layer_idx=extract_layer_index(prefix),
            num_layers=config.num_hidden_layers,
            norm_eps=1e-06,
        )


class MiniMaxSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router, routed experts through vLLM's fused MoE.

    vLLM stacks the experts as ``w13 [E, 2I, H]`` (gate rows, then up) and ``w2 [E, H, I]``; under tensor
    parallelism each rank holds a slice of every expert's intermediate dim (or, with expert parallelism, a range of
    whole experts), and the output is reduced across ranks.
    """

    def __init__(self, config: MiniMaxConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        # Router logits are computed unsharded (HF's gate linear); vLLM routes inside the fused op.
        self.gate = ReplicatedLinear(
            config.hidden_size, config.num_local_experts, bias=False, quant_config=None, prefix=f"{prefix}.gate"
        )
        self.experts = FusedMoEFactory(
            num_experts=config.num_local_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            renormalize=True,
            scoring_func="softmax",
            quant_config=quant_config,
            prefix=f"{prefix}.experts",
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        router_logits, _ = self.gate(hidden_states)
        output = self.experts(hidden_states=hidden_states, router_logits=router_logits)
        return output


class MiniMaxDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: MiniMaxConfig, vllm_config: VllmConfig, layer_idx: int, prefix: str):
        super().__init__()
        block = config.layer_block(layer_idx)
        if block == "full":
            self.self_attn = MiniMaxAttention(config, vllm_config, f"{prefix}.self_attn")
        else:
            self.self_attn = MiniMaxLightningAttention(config, vllm_config, f"{prefix}.self_attn")
        self.mlp = MiniMaxSparseMoeBlock(config, vllm_config, f"{prefix}.mlp")
        # Residual joins (residual_scale): (factor on the stream, factor on the sub-layer's output), per block.
        if block == "full":
            self.attention_scale = (config.full_attn_alpha_factor, config.full_attn_beta_factor)
        else:
            self.attention_scale = (config.linear_attn_alpha_factor, config.linear_attn_beta_factor)
        self.mlp_scale = (config.mlp_alpha_factor, config.mlp_beta_factor)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        # Scaled joins: stream * residual factor + output * output factor; the
        # stream continues from each norm's output.
        residual = hidden_states * self.attention_scale[0]
        hidden_states = self.self_attn(positions, hidden_states) * self.attention_scale[1]
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        residual = hidden_states * self.mlp_scale[0]
        return self.mlp(hidden_states) * self.mlp_scale[1], residual


class MiniMaxModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(MiniMaxConfig, vllm_config)
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
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: MiniMaxDecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix),
            prefix=f"{prefix}.layers",
        )
        if pp.is_last_rank:
            self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        else:
            self.norm = PPMissingLayer()
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
        for layer in self.layers[self.start_layer : self.end_layer]:
            hidden_states, residual = layer(positions, hidden_states, residual)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class MiniMaxForCausalLM(HybridLightningModel, nn.Module, SupportsPP):
    # vLLM reads packed_modules_mapping (fused parameter -> HF modules) for LoRA and quantization.
    packed_modules_mapping = PACKED_MODULES_MAPPING

    # Hybrid model (HybridLightningModel: vLLM's HasInnerState, IsHybrid): vLLM sizes the lightning layers' state (one
    # slot per request, in its KV cache beside the attention layers' blocks) from these, before building the model.
    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> tuple[torch.dtype, ...]:
        """The state's dtype."""
        return lightning_state_dtype(vllm_config)

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig) -> tuple[tuple[int, int, int]]:
        """Per-rank state shape ``[heads, head_dim, head_dim]`` of a slot."""
        config = spec_config(MiniMaxConfig, vllm_config)
        return lightning_state_shape(vllm_config, num_heads=config.num_attention_heads, head_dim=config.head_dim)

    @classmethod
    def get_mamba_state_copy_func(cls):
        """How vLLM copies a slot's state (prefix caching of hybrid models)."""
        return lightning_state_copy_func()

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(MiniMaxConfig, vllm_config)
        self.config = config
        self.model = MiniMaxModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
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
            per_expert=EXPERT_PARAMS_MAPPING,
            fused=FUSED_EXPERT_MAPPING,
        )
        return load_generated_weights(self, weights, tables)
