# ==================================================================================================================
# GENERATED FROM specs/phi.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/phi.yaml --target neuron
# source hash (spec + templates + generator): 8e35530cc9db435c
# ==================================================================================================================
"""Checkpoint mappings of PhiForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import PhiConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    (".self_attn.dense.", ".self_attn.o_proj."),
    (".mlp.fc1.", ".mlp.up_proj."),
    (".mlp.fc2.", ".mlp.down_proj."),
)


def _phi_attention_mappings(mappings: dict[str, list[str]], module: str, config: PhiConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    mappings[module + ".qkv_proj_bias"] = [
        module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
    ]
    mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]
    if config.qk_layernorm:
        for norm in ("q_layernorm", "k_layernorm"):
            mappings[f"{module}.{norm}.weight"] = [f"{module}.{norm}.weight"]
            mappings[f"{module}.{norm}.bias"] = [f"{module}.{norm}.bias"]


def _phi_mlp_mappings(mappings: dict[str, list[str]], module: str, config: PhiConfig) -> None:
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
    mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: PhiConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _phi_attention_mappings(mappings, prefix + ".self_attn", config)
        _phi_mlp_mappings(mappings, prefix + ".mlp", config)
        for key in ("input_layernorm.weight", "input_layernorm.bias"):
            mappings[f"{prefix}.{key}"] = [f"{prefix}.{key}"]
    mappings["model.final_layernorm.weight"] = ["model.final_layernorm.weight"]
    mappings["model.final_layernorm.bias"] = ["model.final_layernorm.bias"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    mappings["lm_head_bias"] = ["lm_head.bias"]
    return mappings
