# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/nemotron_h.yaml --target vllm
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronH for the vllm target: vLLM's model interface and layer library.

Hybrid decoder of one-sub-layer blocks: Mamba-2 (SSD) mixers with per-request conv and SSM states, NoPE GQA attention,
ungated ReLU^2 MLPs and mixtures of ungated ReLU^2 experts (grouped sigmoid router, shared expert), each behind an
RMSNorm, by layers_block_type.

Reference: transformers/models/nemotron_h/modeling_nemotron_h.py.

vLLM builds ``NemotronHForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
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
from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.activation import get_act_fn
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.fused_moe import FusedMoEFactory
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (
    ColumnParallelLinear,
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

from .config import NemotronHConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class NemotronHMixer(MambaMixer2):
    """Mamba-2 mixer: in_proj -> [z, xBC, dt]; act(causal depthwise conv1d(xBC)) -> x, B, C; the SSD scan; RMSNorm(y
    * silu(z)) per group; out_proj -- vLLM's layer (recurrent_state state: conv inputs and SSM state, one slot
    per request of vLLM's KV cache, registered under ``prefix``). Parameters keep the checkpoint's names."""

    def __init__(self, config: NemotronHConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__(
            vllm_config,
            prefix,
            hidden_size=config.hidden_size,
            num_heads=config.mamba_num_heads,
            head_dim=config.mamba_head_dim,
            state_size=config.ssm_state_size,
            n_groups=config.n_groups,
            conv_kernel=config.conv_kernel,
            time_step_limit=config.time_step_limit,
            use_bias=config.use_bias,
            use_conv_bias=config.use_conv_bias,
            activation=config.mamba_hidden_act,
            eps=config.layer_norm_epsilon,
        )


class NemotronHAttention(nn.Module):
    """GQA self-attention: fused QKV, no RoPE (NoPE), vLLM's paged attention, row-parallel output."""

    def __init__(self, config: NemotronHConfig, vllm_config: VllmConfig, prefix: str):
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


class NemotronHMLP(nn.Module):
    """Ungated MLP: down_proj(relu2(up_proj(x))); intermediate dim sharded across ranks."""

    def __init__(
        self,
        config: NemotronHConfig,
        vllm_config: VllmConfig,
        intermediate_size: int,
        prefix: str,
        reduce_results: bool = True,
    ):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.up_proj = ColumnParallelLinear(
            config.hidden_size,
            intermediate_size,
            bias=config.mlp_bias,
            quant_config=quant_config,
            prefix=f"{prefix}.up_proj",
        )
        self.down_proj = RowParallelLinear(
            intermediate_size,
            config.hidden_size,
            bias=config.mlp_bias,
            quant_config=quant_config,
            reduce_results=reduce_results,
            prefix=f"{prefix}.down_proj",
        )
        self.act_fn = get_act_fn("relu2")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.up_proj(x)
        x, _ = self.down_proj(self.act_fn(x))
        return x


class NemotronHSparseMoeBlock(nn.Module):
    """Mixture of experts: sigmoid top-k router (grouped) + shared experts, routed experts through vLLM's fused MoE.

    vLLM stacks the non-gated experts as ``w13 [E, I, H]`` (up) and ``w2 [E, H, I]``; under tensor
    parallelism each rank holds a slice of every expert's intermediate dim (or, with expert parallelism, a range of
    whole experts), and the output is reduced across ranks.
    """

    def __init__(self, config: NemotronHConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        # Router logits are computed unsharded (HF's gate linear); vLLM routes inside the fused op.
        self.gate = ReplicatedLinear(
            config.hidden_size, config.n_routed_experts, bias=False, quant_config=None, prefix=f"{prefix}.gate"
        )
        # e_score_correction_bias: added to the scores for expert selection only, not to the weights (DeepSeek-V3).
        self.gate.e_score_correction_bias = nn.Parameter(torch.empty(config.n_routed_experts), requires_grad=False)
        self.experts = FusedMoEFactory(
            num_experts=config.n_routed_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
            renormalize=config.norm_topk_prob,
            scoring_func="sigmoid",
            # Grouped top-k: groups ranked by the sum of their top-2 scores (vLLM's rule with a correction bias).
            use_grouped_topk=config.n_group is not None,  # null n_group: plain top-k (DeepSeek-V2 greedy)
            num_expert_group=config.n_group,
            topk_group=config.topk_group,
            e_score_correction_bias=self.gate.e_score_correction_bias,
            routed_scaling_factor=config.routed_scaling_factor,
            apply_routed_scale_to_output=True,  # the routed experts' sum times the factor, as HF scales the weights
            activation="relu2_no_mul",  # non-gated experts: down(act(up(x))), w13 = up
            router_logits_dtype=torch.float32,  # HF keeps the router in float32
            quant_config=quant_config,
            prefix=f"{prefix}.experts",
        )
        self.shared_experts = NemotronHMLP(
            config, vllm_config, config.moe_shared_expert_intermediate_size, f"{prefix}.shared_experts"
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        router_logits, _ = self.gate(hidden_states)
        output = self.experts(hidden_states=hidden_states, router_logits=router_logits)
        shared = self.shared_experts(hidden_states)
        output = output + shared
        return output


class NemotronHDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: NemotronHConfig, vllm_config: VllmConfig, layer_idx: int, prefix: str):
        super().__init__()
        block = config.layer_block(layer_idx)
        self.block = block
        if block == "mamba":
            self.mixer = NemotronHMixer(config, vllm_config, f"{prefix}.mixer")
        elif block == "attention":
            self.mixer = NemotronHAttention(config, vllm_config, f"{prefix}.mixer")
        elif block == "mlp":
            self.mixer = NemotronHMLP(config, vllm_config, config.intermediate_size, f"{prefix}.mixer")
        else:
            self.mixer = NemotronHSparseMoeBlock(config, vllm_config, f"{prefix}.mixer")
        self.norm = RMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # One sub-layer (a mixer or an MLP): x + f(norm(x)).
        if residual is None:
            residual = hidden_states
            hidden_states = self.norm(hidden_states)
        else:
            hidden_states, residual = self.norm(hidden_states, residual)
        if self.block in ["mlp", "moe"]:
            return self.mixer(hidden_states), residual
        return self.mixer(positions, hidden_states), residual


class NemotronHModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(NemotronHConfig, vllm_config)
        self.config = config
        pp = get_pp_group()
        # The embedding lives on the first stage (and on the last when the LM head is tied to it).
        if pp.is_first_rank or (False and pp.is_last_rank):
            self.embeddings = VocabParallelEmbedding(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=f"{prefix}.embeddings",
            )
        else:
            self.embeddings = PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.schedule_length,
            lambda prefix: NemotronHDecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix),
            prefix=f"{prefix}.layers",
        )
        if pp.is_last_rank:
            self.norm_f = RMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        else:
            self.norm_f = PPMissingLayer()
        # What a stage hands the next (pipeline parallelism): the two halves of the residual stream.
        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(
            ["hidden_states", "residual"], config.hidden_size
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids)

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
        hidden_states, _ = self.norm_f(hidden_states, residual)
        return hidden_states


class NemotronHForCausalLM(HybridMamba2Model, nn.Module, SupportsPP):
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
        config = spec_config(NemotronHConfig, vllm_config)
        return mamba2_state_shape(
            vllm_config, num_heads=config.mamba_num_heads, head_dim=config.mamba_head_dim,
            state_size=config.ssm_state_size, n_groups=config.n_groups, conv_kernel=config.conv_kernel,
        )

    @classmethod
    def get_mamba_state_copy_func(cls):
        """How vLLM copies a slot's states (prefix caching of hybrid models)."""
        return mamba2_state_copy_func()

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(NemotronHConfig, vllm_config)
        self.config = config
        self.backbone = NemotronHModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "backbone"))
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=maybe_prefix(prefix, "lm_head"),
            )
            self.logits_processor = LogitsProcessor(config.vocab_size)
        else:
            self.lm_head = PPMissingLayer()
        self.make_empty_intermediate_tensors = self.backbone.make_empty_intermediate_tensors

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.backbone.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors:
        """``input_ids, positions [num_tokens]`` -> final hidden states ``[num_tokens, hidden]`` (or, before the
        last pipeline stage, the residual stream for the next)."""
        return self.backbone(input_ids, positions, intermediate_tensors, inputs_embeds)

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
