# ==================================================================================================================
# GENERATED FROM specs/qwen3_vl.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_vl.yaml --target neuron
# source hash (spec + templates + generator): 43f410fc65920204
# ==================================================================================================================
"""Checkpoint mappings of Qwen3VLForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Qwen3VLConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.visual.**", "visual.**")

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("model.language_model.", "model."),)


def _qwen3_vlattention_mappings(mappings: dict[str, list[str]], module: str, config: Qwen3VLConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]
    for norm in ("q_norm", "k_norm"):
        mappings[f"{module}.{norm}.weight"] = [f"{module}.{norm}.weight"]


def _qwen3_vlmlp_mappings(mappings: dict[str, list[str]], module: str, config: Qwen3VLConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def checkpoint_mappings(config: Qwen3VLConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _qwen3_vlattention_mappings(mappings, prefix + ".self_attn", config)
        _qwen3_vlmlp_mappings(mappings, prefix + ".mlp", config)
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
