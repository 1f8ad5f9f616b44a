# ==================================================================================================================
# GENERATED FROM specs/qwen3_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_moe.yaml --target neuron
# source hash (spec + templates + generator): 666ea7522aff5277
# ==================================================================================================================
"""Checkpoint mappings of Qwen3MoeForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Qwen3MoeConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _gated_mlp(mappings: dict[str, list[str]], mlp: str, bias: bool) -> None:
    mappings[f"{mlp}.gate_proj_weight"] = [f"{mlp}.gate_proj.weight"]
    mappings[f"{mlp}.up_proj_weight"] = [f"{mlp}.up_proj.weight"]
    mappings[f"{mlp}.down_proj_weight"] = [f"{mlp}.down_proj.weight"]
    if bias:
        mappings[f"{mlp}.gate_proj_bias"] = [f"{mlp}.gate_proj.bias"]
        mappings[f"{mlp}.up_proj_bias"] = [f"{mlp}.up_proj.bias"]
        mappings[f"{mlp}.down_proj_bias"] = [f"{mlp}.down_proj.bias"]


def _moe(mappings: dict[str, list[str]], moe: str, num_experts: int, available: set[str]) -> None:
    """Router, routed experts and shared experts of one MoE block.

    Experts load from transformers v5's fused tensors when the checkpoint has them (experts on a tensor dim), else
    from per-expert tensors: w13 interleaved per expert [gate_0, up_0, gate_1, up_1, ...], w2 grouped [down_0, ...].
    """
    mappings[f"{moe}.gate_weight"] = [f"{moe}.gate.weight"]
    if f"{moe}.experts.gate_up_proj" in available:
        mappings[f"{moe}.experts_w13_weight"] = [f"{moe}.experts.gate_up_proj"]
        mappings[f"{moe}.experts_w2_weight"] = [f"{moe}.experts.down_proj"]
    else:
        mappings[f"{moe}.experts_w13_weight"] = [
            key for e in range(num_experts)
            for key in (f"{moe}.experts.{e}.gate_proj.weight", f"{moe}.experts.{e}.up_proj.weight")
        ]
        mappings[f"{moe}.experts_w2_weight"] = [f"{moe}.experts.{e}.down_proj.weight" for e in range(num_experts)]


def checkpoint_mappings(config: Qwen3MoeConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}"
        attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        mappings[f"{attn}.qkv_proj_weight"] = [f"{attn}.q_proj.weight", f"{attn}.k_proj.weight", f"{attn}.v_proj.weight"]
        if config.attention_bias:
            mappings[f"{attn}.qkv_proj_bias"] = [f"{attn}.q_proj.bias", f"{attn}.k_proj.bias", f"{attn}.v_proj.bias"]
        mappings[f"{attn}.o_proj_weight"] = [f"{attn}.o_proj.weight"]
        if config.attention_bias:
            mappings[f"{attn}.o_proj_bias"] = [f"{attn}.o_proj.bias"]
        for norm in ("q_norm", "k_norm"):
            mappings[f"{attn}.{norm}.weight"] = [f"{attn}.{norm}.weight"]
        if config.layer_block(i) == "sparse":
            _moe(mappings, mlp, config.num_experts, available)
        else:
            _gated_mlp(mappings, mlp, False)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
