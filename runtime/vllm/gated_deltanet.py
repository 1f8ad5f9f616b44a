"""Gated DeltaNet on the vllm target: vLLM's own ``QwenGatedDeltaNetAttention`` built from a spec's values.

vLLM's layer (vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py) is a ``MambaBase``: it registers itself
in the compilation config's static forward context under its prefix, declares its state (conv history + delta-rule
state) to vLLM's hybrid KV-cache manager through ``get_kv_cache_spec``, reads its ``GDNAttentionMetadata`` from the
forward context and runs the platform's kernels (on CPU ``torch.ops.vllm.cpu_gdn_attention_core``). It reads its
dimensions from a transformers config; here they come from the generated config through the spec's expressions, so
a spec that names its fields differently still builds it.

What this module adds:

* the attention-slot interface of the generated decoders, ``forward(positions, hidden_states)`` (the layer is
  position-free: the conv history and the delta-rule state carry the order);
* for split checkpoints (``qwen3_5`` layout: ``in_proj_qkv`` / ``in_proj_z`` / ``in_proj_b`` / ``in_proj_a``), the
  spec's shard ids (``checkpoint.fuse``: ``qkv``, ``z``, ``b``, ``a``) translated to the output shards of vLLM's
  ``MergedColumnParallelLinear`` (``(0, 1, 2)``, ``3``, ``0``, ``1``), as vLLM's Qwen3.5 mapper does;
* the state shape / dtype / copy functions the hybrid ``*ForCausalLM`` class gives vLLM (``IsHybrid``).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateCopyFunc,
    MambaStateCopyFuncCalculator,
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models.interfaces import HasInnerState, IsHybrid
from vllm.platforms import current_platform

# Layout -> fused parameter -> spec shard id (checkpoint.fuse) -> vLLM output shard(s) of that parameter.
SHARD_IDS: dict[str, dict[str, dict[Any, Any]]] = {
    "qwen3_5": {
        "in_proj_qkvz": {"qkv": (0, 1, 2), "z": 3},  # output sizes [key_dim, key_dim, value_dim, value_dim]
        "in_proj_ba": {"b": 0, "a": 1},  # output sizes [v_heads, v_heads]
    },
    "qwen3_next": {},  # in_proj_qkvz / in_proj_ba stored fused (interleaved per key head): one shard each
}


def _translate_shard_ids(param: nn.Parameter, ids: dict[Any, Any], where: str) -> None:
    """Wrap ``param``'s vLLM weight loader so the spec's shard ids reach it as vLLM's output-shard ids."""
    inner: Callable = param.weight_loader

    def weight_loader(p: nn.Parameter, loaded: torch.Tensor, shard_id: Any = None) -> None:
        if shard_id is None:
            return inner(p, loaded)
        if shard_id not in ids:
            raise ValueError(f"{where}: unknown shard id {shard_id!r} (expected one of {sorted(map(str, ids))})")
        return inner(p, loaded, ids[shard_id])

    param.weight_loader = weight_loader


class GatedDeltaNet(QwenGatedDeltaNetAttention):
    """vLLM's Qwen3-Next / Qwen3.5 Gated DeltaNet layer with modelgen's constructor and attention-slot forward.

    Parameters (checkpoint names): ``in_proj_qkvz``, ``in_proj_ba`` (fused GEMMs), ``conv1d.weight``
    ``[conv_dim, 1, K]``, ``A_log``, ``dt_bias`` (sharded by value head), ``norm.weight`` (gated RMSNorm over each
    value head), ``out_proj``.
    """

    def __init__(
        self,
        vllm_config: VllmConfig,
        prefix: str,
        *,
        hidden_size: int,
        num_k_heads: int,
        num_v_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        conv_kernel: int,
        rms_norm_eps: float,
        layout: str,
        reduce_results: bool = True,
    ):
        if layout not in SHARD_IDS:
            raise ValueError(f"{prefix}: unknown Gated DeltaNet layout {layout!r} (one of {sorted(SHARD_IDS)})")
        if current_platform.is_cpu() and vllm_config.model_config.dtype != torch.bfloat16:
            # vLLM's CPU GDN kernels (cpu_gdn_attention_core) assert BF16 activations at the first forward.
            raise ValueError(f"{prefix}: vLLM's CPU Gated DeltaNet kernels need dtype=bfloat16, not "
                             f"{vllm_config.model_config.dtype}")
        if num_v_heads % num_k_heads:
            raise ValueError(f"{prefix}: {num_v_heads} value heads are not a multiple of {num_k_heads} key heads")
        # The fields vLLM's layer reads from its transformers config (GatedDeltaNetAttention and its Qwen subclass).
        dims = SimpleNamespace(
            hidden_size=hidden_size,
            hidden_act="silu",  # the conv1d's activation (HF: F.silu after the causal conv)
            rms_norm_eps=rms_norm_eps,
            linear_num_key_heads=num_k_heads,
            linear_num_value_heads=num_v_heads,
            linear_key_head_dim=head_k_dim,
            linear_value_head_dim=head_v_dim,
            linear_conv_kernel_dim=conv_kernel,
            output_gate_type="silu",  # gated RMSNorm: norm(x) * silu(z)
        )
        super().__init__(
            dims,
            vllm_config=vllm_config,
            prefix=prefix,
            gqa_interleaved_layout=layout == "qwen3_next",
            reduce_results=reduce_results,
        )
        self.layout = layout
        for name, ids in SHARD_IDS[layout].items():
            _translate_shard_ids(getattr(self, name).weight, ids, f"{prefix}.{name}.weight")

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``hidden_states [num_tokens, hidden]`` -> ``[num_tokens, hidden]``; ``positions`` unused (the state
        carries the order; vLLM's GDN metadata, from the forward context, names each sequence's state slot)."""
        return self._forward_method(hidden_states)


# ---------------------------------------------------------------------------------- the hybrid *ForCausalLM class
class HybridGatedDeltaNetModel(nn.Module, HasInnerState, IsHybrid):
    """Base of a generated ``*ForCausalLM`` with Gated DeltaNet layers: vLLM's ``HasInnerState`` and ``IsHybrid``
    interfaces (their flags and default methods, e.g. ``get_mamba_state_copy_funcs``) behind ``nn.Module``, in vLLM's
    own order: the interfaces are typing Protocols, whose ``__init__`` would shadow ``nn.Module``'s were they listed
    first. The generated class adds the ``get_mamba_state_*_from_config`` classmethods (its spec's dimensions)."""


def gdn_state_dtype(vllm_config: VllmConfig) -> tuple[torch.dtype, torch.dtype]:
    """(conv state, delta-rule state) dtypes: vLLM's rule for GDN (model dtype, or the cache config's overrides)."""
    return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        vllm_config.model_config.dtype,
        vllm_config.cache_config.mamba_cache_dtype,
        vllm_config.cache_config.mamba_ssm_cache_dtype,
    )


def gdn_state_shape(
    vllm_config: VllmConfig,
    *,
    num_k_heads: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    conv_kernel: int,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-rank (conv state, delta-rule state) shapes of one request's slot, as the layer's ``get_state_shape``."""
    spec = vllm_config.speculative_config
    return MambaStateShapeCalculator.gated_delta_net_state_shape(
        vllm_config.parallel_config.tensor_parallel_size,
        num_k_heads,
        num_v_heads,
        head_k_dim,
        head_v_dim,
        conv_kernel,
        spec.num_speculative_tokens if spec else 0,
    )


def gdn_state_copy_func() -> tuple[MambaStateCopyFunc, MambaStateCopyFunc]:
    return MambaStateCopyFuncCalculator.gated_delta_net_state_copy_func()
