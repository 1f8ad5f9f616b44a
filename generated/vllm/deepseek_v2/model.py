# ==================================================================================================================
# GENERATED FROM specs/deepseek_v2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/deepseek_v2.yaml --target vllm
# source hash (spec + templates + generator): 5fd290e32d6c3b46
# ==================================================================================================================
"""DeepseekV2 for the vllm target: vLLM's model interface and layer library.

Mixture-of-experts decoder with multi-head latent attention (latent KV cache), softmax top-k routing with shared
experts.

Reference: transformers/models/deepseek_v2/modeling_deepseek_v2.py.

vLLM builds ``DeepseekV2ForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
(``MODELGEN_VLLM_MODELS``), runs ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)`` over
flattened tokens (attention reads its metadata from vLLM's forward context), ``compute_logits`` on the sampled rows
and ``load_weights(weights)`` once. Tensor parallelism comes from vLLM's parallel linears, pipeline parallelism from
``make_layers`` (``SupportsPP``: a stage holds its layers, the others are ``PPMissingLayer``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from modelgen.runtime.layers.mla.ops import softmax_scale
from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from modelgen.runtime.vllm.rope import rope_parameters
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention import MLAAttention
from vllm.model_executor.layers.fused_moe import FusedMoEFactory
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

from .config import DeepseekV2Config
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class DeepseekV2Attention(nn.Module):
    """Multi-head latent attention: low-rank query, compressed KV latent + shared RoPE key, vLLM's MLAAttention over
    one paged_latent entry per token (kv_lora_rank + qk_rope_head_dim values; its backend absorbs kv_b_proj into
    the query and the output).

    Parameters keep the checkpoint's names (``q_a_proj``/``q_a_layernorm``/``q_b_proj`` or ``q_proj``,
    ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``); vLLM's own DeepSeek fuses q_a_proj with
    kv_a_proj_with_mqa, this keeps them apart (one GEMM more per layer).
    """

    def __init__(self, config: DeepseekV2Config, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        hidden_size = config.hidden_size
        num_heads = config.num_attention_heads
        self.q_lora_rank = config.q_lora_rank  # None: a plain q_proj (DeepSeek-V2-Lite)
        self.kv_lora_rank = config.kv_lora_rank
        self.qk_nope_head_dim = config.qk_nope_head_dim
        self.qk_rope_head_dim = config.qk_rope_head_dim
        self.v_head_dim = config.v_head_dim
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        # Heads are sharded across tensor-parallel ranks; the latent path and its cache are replicated.
        tp_size = get_tensor_model_parallel_world_size()
        if num_heads % tp_size:
            raise ValueError(f"DeepseekV2Attention: {num_heads} heads do not divide over tensor parallelism {tp_size}")
        self.num_heads = num_heads // tp_size
        bias = config.attention_bias  # q_a_proj, kv_a_proj_with_mqa and o_proj (HF attention_bias)
        if self.q_lora_rank is None:
            self.q_proj = ColumnParallelLinear(
                hidden_size,
                num_heads * self.qk_head_dim,
                bias=False,
                quant_config=quant_config,
                prefix=f"{prefix}.q_proj",
            )
        else:
            self.q_a_proj = ReplicatedLinear(
                hidden_size, self.q_lora_rank, bias=bias, quant_config=quant_config, prefix=f"{prefix}.q_a_proj"
            )
            self.q_a_layernorm = RMSNorm(self.q_lora_rank, eps=1e-06)
            self.q_b_proj = ColumnParallelLinear(
                self.q_lora_rank,
                num_heads * self.qk_head_dim,
                bias=False,
                quant_config=quant_config,
                prefix=f"{prefix}.q_b_proj",
            )
        self.kv_a_proj_with_mqa = ReplicatedLinear(
            hidden_size,
            self.kv_lora_rank + self.qk_rope_head_dim,
            bias=bias,
            quant_config=quant_config,
            prefix=f"{prefix}.kv_a_proj_with_mqa",
        )
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, eps=1e-06)
        # [heads * (nope + v), kv_lora_rank]: per head, the key rows (W_UK) then the value rows (W_UV).
        self.kv_b_proj = ColumnParallelLinear(
            self.kv_lora_rank,
            num_heads * (self.qk_nope_head_dim + self.v_head_dim),
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.kv_b_proj",
        )
        self.o_proj = RowParallelLinear(
            num_heads * self.v_head_dim, hidden_size, bias=bias, quant_config=quant_config, prefix=f"{prefix}.o_proj"
        )
        rope_scaling = config.rope_scaling
        self.rotary_emb = get_rope(
            self.qk_rope_head_dim,
            max_position=config.max_position_embeddings,
            # HF's interleaved apply de-interleaves its output; q and k alike, so q.k (and attention) equal GPT-J style
            is_neox_style=False,
            rope_parameters=rope_parameters(
                theta=config.rope_theta, scaling=rope_scaling, rotary_dim=self.qk_rope_head_dim
            ),
        )
        # qk_head_dim ** -0.5, times YaRN's mscale(factor, mscale_all_dim) ** 2 (DeepseekV3Attention)
        self.scaling = softmax_scale(self.qk_head_dim, rope_scaling)
        # Registered after the projections: kv_b_proj's parameters keep their checkpoint name (MLAAttention holds
        # it too, for the absorption it computes after loading).
        self.mla_attn = MLAAttention(
            num_heads=self.num_heads,
            scale=self.scaling,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            kv_b_proj=self.kv_b_proj,
            cache_config=vllm_config.cache_config,
            quant_config=quant_config,
            prefix=f"{prefix}.attn",
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.q_lora_rank is None:
            q, _ = self.q_proj(hidden_states)
        else:
            q_c, _ = self.q_a_proj(hidden_states)
            q_c = self.q_a_layernorm(q_c)
            q, _ = self.q_b_proj(q_c)
        kv_lora, _ = self.kv_a_proj_with_mqa(hidden_states)
        kv_c, k_pe = kv_lora.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        kv_c_normed = self.kv_a_layernorm(kv_c.contiguous())
        q = q.view(-1, self.num_heads, self.qk_head_dim)
        # RoPE on the rope part only, as flat contiguous [tokens, heads * rope] / [tokens, rope] (one RoPE key shared
        # by every head): vLLM's CPU kernel rotates in place and mis-rotates [tokens, heads, rope] inputs.
        q_pe = q[..., self.qk_nope_head_dim :].reshape(-1, self.num_heads * self.qk_rope_head_dim)
        q_pe, k_pe = self.rotary_emb(positions, q_pe, k_pe.contiguous())
        q[..., self.qk_nope_head_dim :] = q_pe.view(-1, self.num_heads, self.qk_rope_head_dim)
        k_pe = k_pe.view(-1, 1, self.qk_rope_head_dim)
        attn_out = self.mla_attn(
            q, kv_c_normed, k_pe, output_shape=(hidden_states.shape[0], self.num_heads * self.v_head_dim)
        )
        output, _ = self.o_proj(attn_out)
        return output


class DeepseekV2MLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(
        self,
        config: DeepseekV2Config,
        vllm_config: VllmConfig,
        intermediate_size: int,
        prefix: str,
        reduce_results: bool = True,
    ):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.gate_up_proj = MergedColumnParallelLinear(
            config.hidden_size,
            [intermediate_size] * 2,
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.gate_up_proj",
        )
        self.down_proj = RowParallelLinear(
            intermediate_size,
            config.hidden_size,
            bias=False,
            quant_config=quant_config,
            reduce_results=reduce_results,
            prefix=f"{prefix}.down_proj",
        )
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up, _ = self.gate_up_proj(x)
        x, _ = self.down_proj(self.act_fn(gate_up))
        return x


class DeepseekV2SparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router (grouped) + shared experts, routed experts through vLLM's fused MoE.

    vLLM stacks the experts as ``w13 [E, 2I, H]`` (gate rows, then up) and ``w2 [E, H, I]``; under tensor
    parallelism each rank holds a slice of every expert's intermediate dim (or, with expert parallelism, a range of
    whole experts), and the output is reduced across ranks.
    """

    def __init__(self, config: DeepseekV2Config, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        # Router logits are computed unsharded (HF's gate linear); vLLM routes inside the fused op.
        self.gate = ReplicatedLinear(
            config.hidden_size, config.n_routed_experts, bias=False, quant_config=None, prefix=f"{prefix}.gate"
        )
        self.experts = FusedMoEFactory(
            num_experts=config.n_routed_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
            renormalize=False,
            scoring_func="softmax",
            # Grouped top-k: groups ranked by their best score (vLLM's rule without a correction bias).
            use_grouped_topk=config.expert_groups is not None,  # null n_group: plain top-k (DeepSeek-V2 greedy)
            num_expert_group=config.expert_groups,
            topk_group=config.topk_group,
            routed_scaling_factor=config.routed_scaling_factor,
            apply_routed_scale_to_output=True,  # the routed experts' sum times the factor, as HF scales the weights
            router_logits_dtype=torch.float32,  # HF keeps the router in float32
            quant_config=quant_config,
            prefix=f"{prefix}.experts",
        )
        self.shared_experts = DeepseekV2MLP(
            config, vllm_config, config.moe_intermediate_size * config.n_shared_experts, f"{prefix}.shared_experts"
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        router_logits, _ = self.gate(hidden_states)
        output = self.experts(hidden_states=hidden_states, router_logits=router_logits)
        shared = self.shared_experts(hidden_states)
        output = output + shared
        return output


class DeepseekV2DecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: DeepseekV2Config, vllm_config: VllmConfig, layer_idx: int, prefix: str):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.self_attn = DeepseekV2Attention(config, vllm_config, f"{prefix}.self_attn")
        if block == "dense":
            self.mlp = DeepseekV2MLP(config, vllm_config, config.intermediate_size, f"{prefix}.mlp")
        else:
            self.mlp = DeepseekV2SparseMoeBlock(config, vllm_config, f"{prefix}.mlp")
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
        hidden_states = self.self_attn(positions, hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class DeepseekV2Model(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(DeepseekV2Config, vllm_config)
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
            lambda prefix: DeepseekV2DecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix),
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


class DeepseekV2ForCausalLM(nn.Module, SupportsPP):
    # vLLM reads packed_modules_mapping (fused parameter -> HF modules) for LoRA and quantization.
    packed_modules_mapping = PACKED_MODULES_MAPPING

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(DeepseekV2Config, vllm_config)
        self.config = config
        self.model = DeepseekV2Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
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
