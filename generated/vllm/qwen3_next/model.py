# ==================================================================================================================
# GENERATED FROM specs/qwen3_next.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen3_next.yaml --target vllm
# source hash (spec + templates + generator): bb29085f76c04d70
# ==================================================================================================================
"""Qwen3Next for the vllm target: vLLM's model interface and layer library.

Hybrid decoder: Gated DeltaNet linear attention with a per-request recurrent state, and every full_attention_interval-th
layer gated GQA attention with partial RoPE; MoE with a sigmoid-gated shared expert.

Reference: transformers/models/qwen3_next/modeling_qwen3_next.py.

vLLM builds ``Qwen3NextForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
(``MODELGEN_VLLM_MODELS``), runs ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)`` over
flattened tokens (attention reads its metadata from vLLM's forward context), ``compute_logits`` on the sampled rows
and ``load_weights(weights)`` once. Tensor parallelism comes from vLLM's parallel linears, pipeline parallelism from
``make_layers`` (``SupportsPP``: a stage holds its layers, the others are ``PPMissingLayer``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.gated_deltanet import (
    GatedDeltaNet,
    HybridGatedDeltaNetModel,
    gdn_state_copy_func,
    gdn_state_dtype,
    gdn_state_shape,
)
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from modelgen.runtime.vllm.rope import rope_parameters
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.fused_moe import FusedMoEFactory
from vllm.model_executor.layers.layernorm import GemmaRMSNorm
from vllm.model_executor.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
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

from .config import Qwen3NextConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class Qwen3NextAttention(nn.Module):
    """GQA self-attention: fused QKV, per-head QK RMSNorm, RoPE (rotate_half, partial), vLLM's paged attention,
    row-parallel output."""

    def __init__(self, config: Qwen3NextConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.head_dim = config.head_dim
        # q_proj emits [query | gate] per head: twice the query heads' rows, sharded with the heads.
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            config.num_attention_heads * 2,
            config.num_key_value_heads,
            bias=config.attention_bias,
            quant_config=quant_config,
            prefix=f"{prefix}.qkv_proj",
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads // 2
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * self.head_dim,
            config.hidden_size,
            bias=config.attention_bias,
            quant_config=quant_config,
            prefix=f"{prefix}.o_proj",
        )
        self.q_norm = GemmaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.rotary_emb = get_rope(
            self.head_dim,
            max_position=config.max_position_embeddings,
            is_neox_style=True,  # rotate_half: halves rotated together (HF rotate_half)
            rope_parameters=rope_parameters(
                theta=config.rope_theta,
                scaling=config.rope_scaling,
                rotary_dim=int(self.head_dim * config.partial_rotary_factor),
            ),
        )
        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.head_dim ** -0.5,
            num_kv_heads=self.num_kv_heads,
            cache_config=vllm_config.cache_config,
            quant_config=quant_config,
            prefix=f"{prefix}.attn",
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q_gate, k, v = qkv.split([2 * self.q_size, self.kv_size, self.kv_size], dim=-1)
        # Per head: [query (head_dim) | output gate (head_dim)], as HF's q_proj(x).view(..., 2 * head_dim).chunk(2)
        q, gate = q_gate.view(-1, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q, gate = q.reshape(-1, self.q_size), gate.reshape(-1, self.q_size)
        q = self.q_norm(q.view(-1, self.num_heads, self.head_dim)).reshape(q.shape)
        k = self.k_norm(k.view(-1, self.num_kv_heads, self.head_dim)).reshape(k.shape)
        q, k = self.rotary_emb(positions, q, k)
        output, _ = self.o_proj(self.attn(q, k, v) * torch.sigmoid(gate))
        return output


class Qwen3NextGatedDeltaNet(GatedDeltaNet):
    """Gated DeltaNet linear attention (qwen3_next projection layout): projections -> causal conv1d + SiLU over
    q/k/v -> gated delta rule over the request's recurrent state -> gated RMSNorm -> out_proj.

    vLLM's Qwen3-Next / Qwen3.5 GDN layer (recurrent_state state: conv history + delta-rule state, one slot per request
    of vLLM's KV cache, registered under ``prefix``). Parameters keep the checkpoint's names (``in_proj_qkvz``,
    ``in_proj_ba``, ``conv1d``, ``A_log``, ``dt_bias``, ``norm``, ``out_proj``).
    """

    def __init__(self, config: Qwen3NextConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__(
            vllm_config,
            prefix,
            hidden_size=config.hidden_size,
            num_k_heads=config.linear_num_key_heads,
            num_v_heads=config.linear_num_value_heads,
            head_k_dim=config.linear_key_head_dim,
            head_v_dim=config.linear_value_head_dim,
            conv_kernel=config.linear_conv_kernel_dim,
            rms_norm_eps=config.rms_norm_eps,
            layout="qwen3_next",
        )


class Qwen3NextMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(
        self,
        config: Qwen3NextConfig,
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


class Qwen3NextSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router + shared experts, routed experts through vLLM's fused MoE.

    vLLM stacks the experts as ``w13 [E, 2I, H]`` (gate rows, then up) and ``w2 [E, H, I]``; under tensor
    parallelism each rank holds a slice of every expert's intermediate dim (or, with expert parallelism, a range of
    whole experts), and the output is reduced across ranks.
    """

    def __init__(self, config: Qwen3NextConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        # Router logits are computed unsharded (HF's gate linear); vLLM routes inside the fused op.
        self.gate = ReplicatedLinear(
            config.hidden_size, config.num_experts, bias=False, quant_config=None, prefix=f"{prefix}.gate"
        )
        self.experts = FusedMoEFactory(
            num_experts=config.num_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
            renormalize=config.norm_topk_prob,
            scoring_func="softmax",
            quant_config=quant_config,
            prefix=f"{prefix}.experts",
        )
        self.shared_expert = Qwen3NextMLP(
            config, vllm_config, config.shared_expert_intermediate_size, f"{prefix}.shared_expert"
        )
        self.shared_expert_gate = ReplicatedLinear(
            config.hidden_size, 1, bias=False, quant_config=None, prefix=f"{prefix}.shared_expert_gate"
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        router_logits, _ = self.gate(hidden_states)
        output = self.experts(hidden_states=hidden_states, router_logits=router_logits)
        shared = self.shared_expert(hidden_states)
        gate, _ = self.shared_expert_gate(hidden_states)
        shared = torch.sigmoid(gate) * shared  # per-token gate of the shared expert
        output = output + shared
        return output


class Qwen3NextDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: Qwen3NextConfig, vllm_config: VllmConfig, layer_idx: int, prefix: str):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block in ("full_sparse", "full_dense"):
            self.self_attn = Qwen3NextAttention(config, vllm_config, f"{prefix}.self_attn")
        else:
            self.linear_attn = Qwen3NextGatedDeltaNet(config, vllm_config, f"{prefix}.linear_attn")
        if block in ("full_sparse", "linear_sparse"):
            self.mlp = Qwen3NextSparseMoeBlock(config, vllm_config, f"{prefix}.mlp")
        else:
            self.mlp = Qwen3NextMLP(config, vllm_config, config.intermediate_size, f"{prefix}.mlp")
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def get_attention(self) -> nn.Module:
        """This layer's attention module (its name depends on the layer's block)."""
        if self.block in ("full_sparse", "full_dense"):
            return self.self_attn
        else:
            return self.linear_attn

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.get_attention()(positions, hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class Qwen3NextModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(Qwen3NextConfig, vllm_config)
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
            lambda prefix: Qwen3NextDecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix),
            prefix=f"{prefix}.layers",
        )
        if pp.is_last_rank:
            self.norm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
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


class Qwen3NextForCausalLM(HybridGatedDeltaNetModel, nn.Module, SupportsPP):
    # vLLM reads packed_modules_mapping (fused parameter -> HF modules) for LoRA and quantization.
    packed_modules_mapping = PACKED_MODULES_MAPPING

    # Hybrid model (HybridGatedDeltaNetModel: vLLM's HasInnerState, IsHybrid): vLLM sizes the Gated DeltaNet layers'
    # state (one slot per request, in its KV cache next to the attention layers' blocks) from these, before the model
    # is built.
    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> tuple[torch.dtype, torch.dtype]:
        """(conv state, delta-rule state) dtypes."""
        return gdn_state_dtype(vllm_config)

    @classmethod
    def get_mamba_state_shape_from_config(
        cls, vllm_config: VllmConfig
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per-rank (conv state ``[conv_dim, K-1]``, delta-rule state ``[v_heads, k_dim, v_dim]``) shapes of a slot."""
        config = spec_config(Qwen3NextConfig, vllm_config)
        return gdn_state_shape(
            vllm_config,
            num_k_heads=config.linear_num_key_heads,
            num_v_heads=config.linear_num_value_heads,
            head_k_dim=config.linear_key_head_dim,
            head_v_dim=config.linear_value_head_dim,
            conv_kernel=config.linear_conv_kernel_dim,
        )

    @classmethod
    def get_mamba_state_copy_func(cls):
        """How vLLM copies a slot's (conv, delta-rule) state (prefix caching of hybrid models)."""
        return gdn_state_copy_func()

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(Qwen3NextConfig, vllm_config)
        self.config = config
        self.model = Qwen3NextModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
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
