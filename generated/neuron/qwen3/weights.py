# ==================================================================================================================
# GENERATED FROM specs/qwen3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3.yaml --target neuron
# source hash (spec + templates + generator): b9cbdaaa88a00965
# ==================================================================================================================
"""Checkpoint mappings of Qwen3ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Qwen3Config

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


def checkpoint_mappings(config: Qwen3Config, available: set[str]) -> dict[str, list[str]]:
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
