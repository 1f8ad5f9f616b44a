# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/falcon.yaml --target vllm
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Falcon for the vllm target: vLLM's model interface and layer library.

Dense decoder with a fused QKV grouped per KV head (multi-query, grouped or multi-head), RoPE, LayerNorms, optional
biases, an ungated GELU MLP and a parallel (shared or own norms) or sequential residual.

Reference: transformers/models/falcon/modeling_falcon.py.

vLLM builds ``FalconForCausalLM(vllm_config=..., prefix=...)`` when modelgen's plugin serves this architecture
(``MODELGEN_VLLM_MODELS``), runs ``forward(input_ids, positions, intermediate_tensors, inputs_embeds)`` over
flattened tokens (attention reads its metadata from vLLM's forward context), ``compute_logits`` on the sampled rows
and ``load_weights(weights)`` once. Tensor parallelism comes from vLLM's parallel linears, pipeline parallelism from
``make_layers`` (``SupportsPP``: a stage holds its layers, the others are ``PPMissingLayer``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from modelgen.runtime.layers.attention import alibi_slopes
from modelgen.runtime.layers.norm import LayerNorm
from modelgen.runtime.vllm.config import spec_config
from modelgen.runtime.vllm.loader import WeightTables, load_generated_weights
from modelgen.runtime.vllm.rope import rope_parameters
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank
from vllm.model_executor.layers.activation import get_act_fn
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
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

from .config import FalconConfig
from .weights import (
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    STACKED_PARAMS_MAPPING,
    TIED_PARAMETERS,
)


class FalconAttention0(nn.Module):
    """GQA self-attention: fused QKV, RoPE (rotate_half), vLLM's paged attention, row-parallel output."""

    def __init__(self, config: FalconConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.head_dim = config.falcon_head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            config.num_attention_heads,
            config.kv_heads,
            bias=config.bias,
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
            bias=config.bias,
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
                rotary_dim=self.head_dim,
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
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        output, _ = self.o_proj(self.attn(q, k, v))
        return output


class FalconAttention1(nn.Module):
    """GQA self-attention: fused QKV, no RoPE (NoPE), vLLM's paged attention, ALiBi, row-parallel output."""

    def __init__(self, config: FalconConfig, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        quant_config = vllm_config.quant_config
        self.head_dim = config.falcon_head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            config.num_attention_heads,
            config.kv_heads,
            bias=config.bias,
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
            bias=config.bias,
            quant_config=quant_config,
            prefix=f"{prefix}.o_proj",
        )
        # NoPE layer: no rotary embedding (q and k attend unrotated)
        # ALiBi: scale * slopes[h] * (k - q) on the scores (vLLM's form; the same softmax), this rank's heads
        start = get_tensor_model_parallel_rank() * self.num_heads
        slopes = alibi_slopes(config.num_attention_heads)[start : start + self.num_heads]
        # HF rounds the slopes to bfloat16 (so here); vLLM forms slopes[h] * (k - q) in float32, which equals HF's
        # bfloat16 product where that is exact (slopes of at most 8 heads' rule, positions up to 256)
        slopes = slopes.bfloat16().float()
        slopes = slopes * config.falcon_head_dim ** (-0.5)
        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.head_dim ** -0.5,
            num_kv_heads=self.num_kv_heads,
            cache_config=vllm_config.cache_config,
            quant_config=quant_config,
            alibi_slopes=slopes.tolist(),
            prefix=f"{prefix}.attn",
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        output, _ = self.o_proj(self.attn(q, k, v))
        return output


class FalconMLP(nn.Module):
    """Ungated MLP: down_proj(act(up_proj(x))); intermediate dim sharded across ranks."""

    def __init__(
        self,
        config: FalconConfig,
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
            bias=config.bias,
            quant_config=quant_config,
            prefix=f"{prefix}.up_proj",
        )
        self.down_proj = RowParallelLinear(
            intermediate_size,
            config.hidden_size,
            bias=config.bias,
            quant_config=quant_config,
            reduce_results=reduce_results,
            prefix=f"{prefix}.down_proj",
        )
        self.act_fn = get_act_fn(config.activation)  # transformers' ACT2FN name, from the config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.up_proj(x)
        x, _ = self.down_proj(self.act_fn(x))
        return x


class FalconDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately, as vLLM's RMSNorms fuse the residual add."""

    def __init__(self, config: FalconConfig, vllm_config: VllmConfig, layer_idx: int, prefix: str):
        super().__init__()
        block = config.layer_block(layer_idx)
        if block == "decoder":
            self.self_attention = FalconAttention0(config, vllm_config, f"{prefix}.self_attention")
        else:
            self.self_attention = FalconAttention1(config, vllm_config, f"{prefix}.self_attention")
        self.mlp = FalconMLP(config, vllm_config, config.ffn_hidden_size, f"{prefix}.mlp")
        self.parallel_residual = config.parallel_layer  # attention and MLP both read the layer's input
        self.parallel_mlp_norm = config.own_mlp_norm  # a parallel MLP reads its own norm of the input
        self.input_layernorm = LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        if not self.parallel_residual or self.parallel_mlp_norm:
            self.post_attention_layernorm = LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        attn_output = self.self_attention(positions, hidden_states)
        if self.parallel_residual:
            # x + attn(n) + mlp(m), n = input_layernorm(x), m = post_attention_layernorm(x) or n, summed in that order.
            mlp_input = self.post_attention_layernorm(residual) if self.parallel_mlp_norm else hidden_states
            return self.mlp(mlp_input), residual + attn_output
        hidden_states, residual = self.post_attention_layernorm(attn_output, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class FalconModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(FalconConfig, vllm_config)
        self.config = config
        pp = get_pp_group()
        # The embedding lives on the first stage (and on the last when the LM head is tied to it).
        if pp.is_first_rank or (config.tie_word_embeddings and pp.is_last_rank):
            self.word_embeddings = VocabParallelEmbedding(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=f"{prefix}.word_embeddings",
            )
        else:
            self.word_embeddings = PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: FalconDecoderLayer(config, vllm_config, extract_layer_index(prefix), prefix),
            prefix=f"{prefix}.layers",
        )
        if pp.is_last_rank:
            self.ln_f = LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        else:
            self.ln_f = PPMissingLayer()
        # What a stage hands the next (pipeline parallelism): the two halves of the residual stream.
        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(
            ["hidden_states", "residual"], config.hidden_size
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings(input_ids)

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
        hidden_states, _ = self.ln_f(hidden_states, residual)
        return hidden_states


class FalconForCausalLM(nn.Module, SupportsPP):
    # vLLM reads packed_modules_mapping (fused parameter -> HF modules) for LoRA and quantization.
    packed_modules_mapping = PACKED_MODULES_MAPPING

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = spec_config(FalconConfig, vllm_config)
        self.config = config
        self.transformer = FalconModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "transformer"))
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=maybe_prefix(prefix, "lm_head"),
            )
            if config.tie_word_embeddings:
                # One tensor; load_weights fills it through the embedding (TIED_PARAMETERS).
                self.lm_head = self.lm_head.tie_weights(self.transformer.word_embeddings)
            self.logits_processor = LogitsProcessor(config.vocab_size)
        else:
            self.lm_head = PPMissingLayer()
        self.make_empty_intermediate_tensors = self.transformer.make_empty_intermediate_tensors

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.transformer.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors:
        """``input_ids, positions [num_tokens]`` -> final hidden states ``[num_tokens, hidden]`` (or, before the
        last pipeline stage, the residual stream for the next)."""
        return self.transformer(input_ids, positions, intermediate_tensors, inputs_embeds)

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
