# ==================================================================================================================
# GENERATED FROM specs/stablelm.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/stablelm.yaml --target neuron
# source hash (spec + templates + generator): 6fd7ab6125e9c1bf
# ==================================================================================================================
"""Checkpoint mappings of StableLmForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import StableLmConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.layers.*.self_attn.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("weight_scale_inv", "weight_scale"),)


def _stable_lm_attention_mappings(mappings: dict[str, list[str]], module: str, config: StableLmConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.use_qkv_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
    if config.qk_layernorm:
        for norm, heads in (("q_layernorm", config.num_attention_heads), ("k_layernorm", config.num_key_value_heads)):
            for h in range(heads):
                mappings[f"{module}.{norm}.norms.{h}.weight"] = [f"{module}.{norm}.norms.{h}.weight"]


def _stable_lm_mlp_mappings(mappings: dict[str, list[str]], module: str, config: StableLmConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def checkpoint_mappings(config: StableLmConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _stable_lm_attention_mappings(mappings, prefix + ".self_attn", config)
        _stable_lm_mlp_mappings(mappings, prefix + ".mlp", config)
        for key in ("input_layernorm.weight", "input_layernorm.bias"):
            mappings[f"{prefix}.{key}"] = [f"{prefix}.{key}"]
        if not (config.use_parallel_residual):
            mappings[prefix + ".post_attention_layernorm.weight"] = [prefix + ".post_attention_layernorm.weight"]
        if not (config.use_parallel_residual):
            mappings[prefix + ".post_attention_layernorm.bias"] = [prefix + ".post_attention_layernorm.bias"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    mappings["model.norm.bias"] = ["model.norm.bias"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
