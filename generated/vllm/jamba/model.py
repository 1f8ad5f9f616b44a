# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/jamba.yaml --target vllm
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""Jamba for the vllm target: vLLM's model interface and layer library.

Hybrid decoder: Mamba-1 selective-state-space mixers (RMSNorms on dt, B, C; a per-request conv history and SSM state)
and GQA attention layers without RoPE, by period and offset; softmax top-k MoE layers by period and offset, SwiGLU MLPs
elsewhere; RMSNorm.

Reference: transformers/models/jamba/modeling_jamba.py.

vLLM builds ``JambaForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
(``MODELGEN_VLLM_MODELS``), runs ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)`` over
flattened tokens (attention reads its metadata from vLLM's forward context), ``compute_logits`` on the sampled rows
and ``load_weights(weights)`` once. Tensor parallelism comes from vLLM's parallel linears, pipeline parallelism from
``make_layers`` (``SupportsPP``: a stage holds its layers, the others are ``PPMissingLayer``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from modelgen.runtime.layers.mamba.vllm import (
    HybridMambaModel,
    MambaMixer,
    mamba_state_copy_func,
    mamba_state_dtype,
    mamba_state_shape,
)
from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.fused_moe import FusedMoEFactory
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
)
from vllm.model_executor.layers.logits_processor import LogitsProcessor
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

from .config import JambaConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class JambaAttention(nn.Module):
    """GQA self-attention: fused QKV, no RoPE (NoPE), vLLM's paged attention, row-parallel output."""

    def __init__(self, config: JambaConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.head_dim = config.hidden_size // config.num_attention_heads
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
        # NoPE layer: no rotary embedding (q and k attend unrotated)
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
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        output, _ = self.o_proj(self.attn(q, k, v))
        return output


class JambaMambaMixer(MambaMixer):
    """Mamba-1 mixer: in_proj -> [x, z]; silu(causal depthwise conv1d(x)); x_proj -> [dt, B, C], each RMSNormed
    (dt_layernorm, b_layernorm, c_layernorm); softplus(dt_proj(dt)); selective scan (A = -exp(A_log), D skip);
    out_proj(y * silu(z)). vLLM's layer (recurrent_state state: conv history + SSM state, one slot per request of
    vLLM's KV cache, registered under ``prefix``). Parameters keep the checkpoint's names (``in_proj``, ``conv1d``,
    ``x_proj``, ``dt_proj``, ``A_log``, ``D``, ``out_proj``)."""

    def __init__(self, config: JambaConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__(
            vllm_config,
            prefix,
            hidden_size=config.hidden_size,
            intermediate_size=config.mamba_expand * config.hidden_size,
            state_size=config.mamba_d_state,
            conv_kernel=config.mamba_d_conv,
            time_step_rank=config.mamba_dt_rank,
            conv_bias=config.mamba_conv_bias,
            proj_bias=config.mamba_proj_bias,
            rms_norm_eps=config.rms_norm_eps,
        )


class JambaMLP(nn.Module):
    """Gated MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up fused into one GEMM."""

    def __init__(
        self,
        config: JambaConfig,
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


class JambaSparseMoeBlock(nn.Module):
    """Mixture of experts: softmax top-k router, routed experts through vLLM's fused MoE.

    vLLM stacks the experts as ``w13 [E, 2I, H]`` (gate rows, then up) and ``w2 [E, H, I]``; under tensor
    parallelism each rank holds a slice of every expert's intermediate dim (or, with expert parallelism, a range of
    whole experts), and the output is reduced across ranks.
    """

    def __init__(self, config: JambaConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        # Router logits are computed unsharded (HF's router linear); vLLM routes inside the fused op.
        self.router = ReplicatedLinear(
            config.hidden_size, config.num_experts, bias=False, quant_config=None, prefix=f"{prefix}.router"
        )
        self.experts = FusedMoEFactory(
            num_experts=config.num_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            renormalize=False,
            scoring_func="softmax",
            quant_config=quant_config,
            prefix=f"{prefix}.experts",
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        router_logits, _ = self.router(hidden_states)
        output = self.experts(hidden_states=hidden_states, router_logits=router_logits)
        return output


class JambaDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: JambaConfig, vllm_config: VllmConfig, layer_idx: int, prefix: str):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block in ("attention_dense", "attention_moe"):
            self.self_attn = JambaAttention(config, vllm_config, f"{prefix}.self_attn")
        else:
            self.mamba = JambaMambaMixer(config, vllm_config, f"{prefix}.mamba")
        if block in ("attention_dense", "mamba_dense"):
            self.feed_forward = JambaMLP(config, vllm_config, config.intermediate_size, f"{prefix}.feed_forward")
        else:
            self.feed_forward = JambaSparseMoeBlock(config, vllm_config, f"{prefix}.feed_forward")
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def get_attention(self) -> nn.Module:
        """This layer's attention module (its name depends on the layer's block)."""
        if self.block in ("attention_dense", "attention_moe"):
            return self.self_attn
        else:
            return self.mamba

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.get_attention()(positions, hidden_states)
        hidden_states, residual = self.pre_ff_layernorm(hidden_states, residual)
        hidden_states = self.feed_forward(hidden_states)
        return hidden_states, residual


class JambaModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(JambaConfig, vllm_config)
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
            lambda prefix: JambaDecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix),
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
        for layer in self.layers[self.start_layer : self.end_layer]:
            hidden_states, residual = layer(positions, hidden_states, residual)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        hidden_states, _ = self.final_layernorm(hidden_states, residual)
        return hidden_states


class JambaForCausalLM(HybridMambaModel, nn.Module, SupportsPP):
    # vLLM reads packed_modules_mapping (fused parameter -> HF modules) for LoRA and quantization.
    packed_modules_mapping = PACKED_MODULES_MAPPING

    # HybridMambaModel: vLLM's HasInnerState and IsHybrid.
    # vLLM sizes the Mamba layers' states (one slot per request, in its KV cache) from these, before building the model.
    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> tuple[torch.dtype, torch.dtype]:
        """(conv state, SSM state) dtypes."""
        return mamba_state_dtype(vllm_config)

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig) -> tuple[tuple[int, int], tuple[int, int]]:
        """Per-rank (conv state, SSM state ``[intermediate, d_state]``) shapes of a slot."""
        config = spec_config(JambaConfig, vllm_config)
        return mamba_state_shape(
            vllm_config,
            intermediate_size=config.mamba_expand * config.hidden_size,
            state_size=config.mamba_d_state,
            conv_kernel=config.mamba_d_conv,
        )

    @classmethod
    def get_mamba_state_copy_func(cls):
        """How vLLM copies a slot's (conv, SSM) state (prefix caching of hybrid models)."""
        return mamba_state_copy_func()

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(JambaConfig, vllm_config)
        self.config = config
        self.model = JambaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
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
