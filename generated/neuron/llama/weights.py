# ==================================================================================================================
# GENERATED FROM specs/llama.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/llama.yaml --target neuron
# source hash (spec + templates + generator): 8f09827950bac444
# ==================================================================================================================
"""Checkpoint mappings of LlamaForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import LlamaConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ('model.layers.*.self_attn.rotary_emb.inv_freq',)

# Substring renames applied to every checkpoint key before the mappings are looked up.
RENAMES = (('weight_scale_inv', 'weight_scale'),)


def _gated_mlp(mappings: dict[str, list[str]], mlp: str, bias: bool) -> None:
    mappings[f"{mlp}.gate_proj_weight"] = [f"{mlp}.gate_proj.weight"]
    mappings[f"{mlp}.up_proj_weight"] = [f"{mlp}.up_proj.weight"]
    mappings[f"{mlp}.down_proj_weight"] = [f"{mlp}.down_proj.weight"]
    if bias:
        mappings[f"{mlp}.gate_proj_bias"] = [f"{mlp}.gate_proj.bias"]
        mappings[f"{mlp}.up_proj_bias"] = [f"{mlp}.up_proj.bias"]
        mappings[f"{mlp}.down_proj_bias"] = [f"{mlp}.down_proj.bias"]


def checkpoint_mappings(config: LlamaConfig, available: set[str]) -> dict[str, list[str]]:
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
        _gated_mlp(mappings, mlp, config.mlp_bias)
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
