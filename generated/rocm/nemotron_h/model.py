# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/nemotron_h.yaml --target rocm
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronH for the rocm target, in ATOM's style.

Hybrid decoder of one-sub-layer blocks: Mamba-2 (SSD) mixers with per-request conv and SSM states, NoPE GQA attention,
ungated ReLU^2 MLPs and mixtures of ungated ReLU^2 experts (grouped sigmoid router, shared expert), each behind an
RMSNorm, by layers_block_type.

Reference: transformers/models/nemotron_h/modeling_nemotron_h.py.

Tokens are flattened: activations are ``[num_tokens, hidden]``, and one :class:`AttentionMetadata` describes the whole
batch. The Mamba-2 mixers keep a conv state and an SSM state per request in the engine's state pool (chunked scan for
prefill, one recurrent step per decoded token). Attention projects Q, K and V with one fused GEMM (``qkv_proj``) and
reads and writes paged K/V blocks. The MLP has no gate (``up_proj``, activation, ``down_proj``). Routed experts run as
one fused MoE op over stacked ``w13`` (up: not gated) and ``w2`` weights. Fused weights load through ``weight_loader``s
that take shard ids (``PACKED_MODULES_MAPPING``). Ops run aiter's kernels where aiter imports (ROCm), otherwise the
Triton kernels of ``runtime/ops/gpu/`` on GPU tensors and the torch reference ops on the CPU (``runtime/backends.py``
chooses; ``MODELGEN_BACKEND`` overrides).
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec, LayerSpec
from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention
from modelgen.runtime.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from modelgen.runtime.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from modelgen.runtime.layers.mamba2 import Mamba2
from modelgen.runtime.layers.mlp import Activation
from modelgen.runtime.layers.moe import FusedMoE, TopKRouter
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping
from modelgen.runtime.state_cache import StateSpec

from .config import NemotronHConfig
from .weights import (
    EXPERT_PARAMS_MAPPING,
    FUSED_EXPERT_MAPPING,
    IGNORED_KEYS,
    PACKED_MODULES_MAPPING,
    RENAMES,
    TIED_PARAMETERS,
)


class NemotronHMixer(Mamba2):
    """Mamba-2 mixer: in_proj -> [z, xBC, dt]; act(causal depthwise conv1d(xBC)) -> x, B, C; the selective scan
    (SSD) with A = -exp(A_log), dt = softplus(dt + dt_bias) clamped, the D skip; RMSNorm(y * silu(z)) per group;
    out_proj.

    Parameters keep the checkpoint's names (``in_proj``, ``conv1d``, ``dt_bias``, ``A_log``, ``D``, ``norm``,
    ``out_proj``); each request's conv inputs and SSM state live in the engine's state pool, one slot per request
    (``kv_spec``).
    """

    def __init__(self, config: NemotronHConfig, layer_idx: int):
        super().__init__(
            hidden_size=config.hidden_size,
            num_heads=config.mamba_num_heads,
            head_dim=config.mamba_head_dim,
            state_size=config.ssm_state_size,
            n_groups=config.n_groups,
            conv_kernel=config.conv_kernel,
            chunk_size=config.chunk_size,
            time_step_limit=tuple(config.time_step_limit),
            use_bias=config.use_bias,
            use_conv_bias=config.use_conv_bias,
            activation=config.mamba_hidden_act,
            eps=config.layer_norm_epsilon,
            layer_name=f"layers.{layer_idx}.mixer",
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        # Position-free: the states carry the order; `state` names each sequence's slot.
        return super().forward(hidden_states, attn_metadata.state)

    def kv_spec(self) -> StateSpec:
        """This layer's cache, per rank: one recurrent_state slot per request (conv inputs and SSM state)."""
        return self.state_spec()

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.bind_state(*kv_caches[self.layer_name])


class NemotronHAttention(nn.Module):
    """GQA self-attention: fused QKV, no RoPE (NoPE), paged KV cache, row-parallel output."""

    def __init__(self, config: NemotronHConfig, layer_idx: int):
        super().__init__()
        self.head_dim = config.head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, self.head_dim, config.num_attention_heads, config.num_key_value_heads, bias=False
        )
        # Heads held by this tensor-parallel rank (KV heads are replicated when there are fewer than ranks).
        self.num_heads = self.qkv_proj.num_heads
        self.num_kv_heads = self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.o_proj = RowParallelLinear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)
        # NoPE layer: no rotary embedding (q and k attend unrotated)
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, scale=self.head_dim ** -0.5,
            layer_name=f"layers.{layer_idx}.mixer",
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        return self.o_proj(self.attn(q, k, v, attn_metadata, positions=positions))

    def kv_spec(self) -> LayerSpec:
        """This layer's cache, per rank: paged K and V blocks ``[num_blocks, num_kv_heads, block_size, head_dim]``."""
        return LayerSpec(
            name=self.attn.layer_name, num_kv_heads=self.num_kv_heads, head_size=self.head_dim,
            dtype=self.qkv_proj.weight.dtype, kind="paged_kv",
        )

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.attn.k_cache, self.attn.v_cache = kv_caches[self.attn.layer_name]


class NemotronHMLP(nn.Module):
    """Ungated MLP: down_proj(relu2(up_proj(x))); intermediate dim sharded across ranks."""

    def __init__(self, config: NemotronHConfig, intermediate_size: int):
        super().__init__()
        self.up_proj = ColumnParallelLinear(config.hidden_size, intermediate_size, bias=config.mlp_bias)
        self.down_proj = RowParallelLinear(intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = Activation("relu2")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


class NemotronHSparseMoeBlock(nn.Module):
    """Mixture of experts: sigmoid top-k router (grouped) + shared experts, routed experts through the fused MoE op.

    Experts are not gated: stacked ``w13 [E, I, H]`` (up) and ``w2 [E, H, I]``; each tensor-parallel rank owns a
    contiguous range of experts (expert parallelism) and the partial outputs are summed across ranks.
    """

    def __init__(self, config: NemotronHConfig):
        super().__init__()
        self.gate = TopKRouter(
            config.hidden_size,
            config.n_routed_experts,
            top_k=config.num_experts_per_tok,
            scoring="sigmoid",
            renormalize=config.norm_topk_prob,
            n_group=config.n_group,
            topk_group=config.topk_group,
            correction_bias=True,
            routed_scaling_factor=config.routed_scaling_factor,
            float32=True,  # router weight and scores in float32 (HF keeps it out of bf16)
        )
        self.experts = FusedMoE(
            config.n_routed_experts, config.hidden_size, config.moe_intermediate_size, activation="relu2",
            gated=False,  # down(act(up(x))): w13 holds the up projection alone
        )
        self.shared_experts = NemotronHMLP(config, config.moe_shared_expert_intermediate_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = self.gate(hidden_states)
        shared = self.shared_experts(hidden_states)
        return self.experts(hidden_states, topk_weights, topk_ids) + shared


class NemotronHDecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so each norm fuses the residual add."""

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
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        attn_metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # One sub-layer (a mixer or an MLP): x + f(norm(x)).
        if residual is None:
            residual = hidden_states
            hidden_states = self.norm(hidden_states)
        else:
            hidden_states, residual = self.norm(hidden_states, residual)
        if self.block in ["mlp", "moe"]:
            return self.mixer(hidden_states), residual
        return self.mixer(positions, hidden_states, attn_metadata), residual


class NemotronHModel(nn.Module):
    def __init__(self, config: NemotronHConfig):
        super().__init__()
        self.embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([NemotronHDecoderLayer(config, i) for i in range(config.schedule_length)])
        self.norm_f = RMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        hidden_states = self.embeddings(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, attn_metadata)
        hidden_states, _ = self.norm_f(hidden_states, residual)
        return hidden_states


class NemotronHForCausalLM(nn.Module):
    # The loader protocol (runtime/loader/protocol.py): the tables load_packed_weights reads, as ATOM's loading_core
    # reads packed_modules_mapping and get_expert_mapping().
    packed_modules_mapping = PACKED_MODULES_MAPPING
    ignored_keys = IGNORED_KEYS
    renames = RENAMES
    tied_parameters = TIED_PARAMETERS

    def __init__(self, config: NemotronHConfig):
        super().__init__()
        self.config = config
        self.backbone = NemotronHModel(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        """``input_ids, positions [num_tokens]`` -> final hidden states ``[num_tokens, hidden]``."""
        return self.backbone(input_ids, positions, attn_metadata)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Hidden states of the sampled positions -> logits over the full vocabulary (gathered across ranks)."""
        return self.lm_head.compute_logits(hidden_states)

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

    def get_expert_mapping(self) -> ExpertMapping:
        """Routed-expert tables: per-expert and fused checkpoint names -> stacked parameters (and shared slots)."""
        return ExpertMapping(
            per_expert=EXPERT_PARAMS_MAPPING,
            fused=FUSED_EXPERT_MAPPING,
        )

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from a safetensors checkpoint (strict: nothing missing, nothing unused)."""
        load_packed_weights(self, checkpoint)
