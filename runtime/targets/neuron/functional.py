"""Functional ops for the neuron target (``import modelgen.runtime.targets.neuron.functional as NF``).

Weights are stored ``[in_features, out_features]`` (the layout the Neuron guide's loaders produce with
``is_storage_transposed=True``), so projections are ``x @ W``. No op branches on tensor values and no op changes shape
with data, so every bucket traces to one static graph.
"""
from __future__ import annotations

import torch

from ... import backends
from ... import distributed as dist
from ...layers.attention import ops as attn_ops
from ...layers.moe import ops as moe_ops
from ...ops.activation import GATED_ACTIVATIONS, gated_activation
from ...ops.norm import rms_norm as _rms_norm
from ...ops.rope import apply_rope
from ...ops.sampling import sample_static

BACKEND, BACKEND_REASON = backends.select("neuron")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    y = x @ weight
    return y + bias if bias is not None else y


def qkv_proj(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return linear(x, weight, bias)


def o_proj(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Row-parallel output projection: partial sums reduced across ranks, bias added once."""
    y = dist.all_reduce(x @ weight)
    return y + bias if bias is not None else y


def mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str,
    gate_bias: torch.Tensor | None = None,
    up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gated MLP ``down(act(gate(x)) * up(x))`` with column-parallel gate/up and row-parallel down."""
    gate_up = torch.cat([linear(x, gate_weight, gate_bias), linear(x, up_weight, up_bias)], dim=-1)
    return o_proj(GATED_ACTIVATIONS[activation](gate_up), down_weight, down_bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _rms_norm(x, weight, eps)


def rope(x: torch.Tensor, cos_sin: torch.Tensor, positions: torch.Tensor, rotary_dim: int, style: str) -> torch.Tensor:
    return apply_rope(x, cos_sin, positions, rotary_dim, style)


def embedding(input_ids: torch.Tensor, weight: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    """Vocab-dim-sharded embedding: each rank holds rows ``[rank * V_local, (rank + 1) * V_local)``.

    ``rank`` is the forward's scalar tensor, so one traced graph serves every rank.
    """
    per_rank = weight.shape[0]
    local = input_ids - rank * per_rank
    inside = (local >= 0) & (local < per_rank)
    out = torch.nn.functional.embedding(local.clamp(0, per_rank - 1), weight)
    return dist.all_reduce(out * inside[:, None].to(out.dtype))


def lm_head(hidden: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Column-parallel LM head (weight ``[hidden, V_local]``): local logits gathered to the full vocabulary."""
    return dist.all_gather(hidden @ weight, -1)[:, :vocab_size]


def write_kv_cache(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    attn_ops.write_paged_kv_static(k, v, k_cache, v_cache, slot_mapping)


def sliding_window(window: int | None, where: str) -> int | None:
    """A layer's window from the config: None (full attention) or a positive int (checked once, at construction)."""
    return attn_ops.check_sliding_window(window, where)


def attention_chunk(chunk: int | None, where: str) -> int | None:
    """A layer's attention chunk from the config (Llama 4 ``attention_chunk_size``): None (off) or a positive int."""
    return attn_ops.check_chunk(chunk, where)


def alibi_slopes(num_heads: int, heads_per_rank: int) -> torch.Tensor:
    """This rank's heads' ALiBi slopes ``[heads_per_rank]`` (float32) of a ``num_heads``-head attention."""
    rank = dist.tp_rank()
    return attn_ops.alibi_slopes(num_heads)[rank * heads_per_rank:(rank + 1) * heads_per_rank]


Alibi = attn_ops.Alibi  # (slopes, scale, bf16): the bias scale * slopes[h] * k of a layer (ops.Alibi)


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_ids: torch.Tensor, positions: torch.Tensor, scale: float,
    sliding_window: int | None = None, sinks: torch.Tensor | None = None, softcap: float | None = None,
    chunk: int | None = None, alibi: attn_ops.Alibi | None = None,
) -> torch.Tensor:
    """Prefill: causal attention among one bucket's packed prompt tokens (windowed / with sinks / soft-capped /
    chunked / ALiBi-biased when given; ``softcap`` c: Gemma 2's ``c * tanh(scores / c)`` before the mask, see
    ``runtime/layers/attention/ops.py``)."""
    return attn_ops.packed_prefill_attention(q, k, v, seq_ids, positions, scale, sliding_window, sinks, softcap,
                                             chunk, alibi)


def segmented_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
    chunk: int | None = None,
    alibi: attn_ops.Alibi | None = None,
) -> torch.Tensor:
    """Segmented prefill: a prompt chunk attends its request's cached prefix and itself (already written)."""
    return attn_ops.paged_segment_attention(
        q, k_cache, v_cache, block_table, seq_ids, positions, scale, sliding_window, sinks, softcap, chunk, alibi
    )


def attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
    chunk: int | None = None,
    alibi: attn_ops.Alibi | None = None,
) -> torch.Tensor:
    """Decode: one query per request over its paged context (``positions + 1`` cached tokens, its own included)."""
    return attn_ops.paged_decode_attention(
        q, k_cache, v_cache, block_table, positions + 1, scale, sliding_window, sinks, softcap, chunk, alibi
    )


def router(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    top_k: int,
    *,
    scoring: str,
    renormalize: bool,
    n_group: int | None = None,
    topk_group: int | None = None,
    e_score_correction_bias: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0,
    weights_in_model_dtype: bool = False,
    bias: torch.Tensor | None = None,
    group_score: str = "top2_sum",
    renormalize_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits in the router weight's dtype (float32 routers cast the hidden states up; ``bias``: the router
    linear's own bias, GPT-OSS), then top-k (``renormalize_p``: the p-norm the weights are divided by, DBRX)."""
    logits = linear(hidden.to(weight.dtype), weight.t(), bias)
    weights, ids = moe_ops.route(
        logits, top_k, scoring=scoring, renormalize=renormalize, n_group=n_group, topk_group=topk_group,
        e_score_correction_bias=e_score_correction_bias, routed_scaling_factor=routed_scaling_factor,
        group_score=group_score, renormalize_p=renormalize_p,
    )
    return (weights.to(logits.dtype) if weights_in_model_dtype else weights), ids


def moe(
    hidden: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str,
    expert_offset: int,
    activation_params: dict[str, float] | None = None,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    weight_on_input: bool = False,
    gated: bool = True,
) -> torch.Tensor:
    """Shape-static fused MoE over this rank's experts ``[expert_offset, expert_offset + L)``; summed across ranks.
    ``activation_params``: a parametric activation's parameters; ``w13_bias``/``w2_bias``: expert biases (GPT-OSS);
    ``weight_on_input``: the routing weight scales the expert's input, not its output (Llama 4); ``gated=False``:
    non-gated experts, ``w13 [E_local, I, H]`` the up projection (Nemotron-H)."""
    out = moe_ops.fused_moe_static(
        hidden, w13, w2, topk_weights, topk_ids, moe_ops.expert_activation(activation, activation_params, gated),
        expert_offset=expert_offset, num_local_experts=w13.shape[0], w13_bias=w13_bias, w2_bias=w2_bias,
        weight_on_input=weight_on_input, gated=gated,
    )
    return dist.all_reduce(out)


def sample(logits: torch.Tensor, sampling_params: torch.Tensor) -> torch.Tensor:
    """On-device sampling: ``sampling_params [num_reqs, 3] = [top_k, top_p, temperature]`` -> token ids."""
    return sample_static(logits, sampling_params)
