# ==================================================================================================================
# GENERATED FROM specs/gemma3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gemma3.yaml --target neuron
# source hash (spec + templates + generator): 2e05c38a053c1cea
# ==================================================================================================================
"""Checkpoint mappings of Gemma3ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Gemma3Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = (
    "vision_tower.**",
    "multi_modal_projector.**",
    "model.vision_tower.**",
    "model.multi_modal_projector.**",
)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    ("weight_scale_inv", "weight_scale"),
    ("language_model.model.", "model."),
    ("model.language_model.", "model."),
    ("language_model.lm_head.", "lm_head."),
)


def _gemma3_attention0_mappings(mappings: dict[str, list[str]], module: str, config: Gemma3Config) -> None:
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


def _gemma3_attention1_mappings(mappings: dict[str, list[str]], module: str, config: Gemma3Config) -> None:
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


def _gemma3_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Gemma3Config) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def checkpoint_mappings(config: Gemma3Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block == "decoder":
            _gemma3_attention0_mappings(mappings, prefix + ".self_attn", config)
        else:
            _gemma3_attention1_mappings(mappings, prefix + ".self_attn", config)
        _gemma3_mlp_mappings(mappings, prefix + ".mlp", config)
        for norm in (
            "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"
        ):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
