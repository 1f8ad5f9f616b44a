# ==================================================================================================================
# GENERATED FROM specs/cohere.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/cohere.yaml --target neuron
# source hash (spec + templates + generator): 58eb8c17b12cfad0
# ==================================================================================================================
"""Checkpoint mappings of CohereForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import CohereConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _cohere_attention_mappings(mappings: dict[str, list[str]], module: str, config: CohereConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]
    if config.use_qk_norm:
        for norm in ("q_norm", "k_norm"):
            mappings[f"{module}.{norm}.weight"] = [f"{module}.{norm}.weight"]


def _cohere_mlp_mappings(mappings: dict[str, list[str]], module: str, config: CohereConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def checkpoint_mappings(config: CohereConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _cohere_attention_mappings(mappings, prefix + ".self_attn", config)
        _cohere_mlp_mappings(mappings, prefix + ".mlp", config)
        mappings[prefix + ".input_layernorm.weight"] = [prefix + ".input_layernorm.weight"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
