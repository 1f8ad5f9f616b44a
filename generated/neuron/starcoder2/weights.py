# ==================================================================================================================
# GENERATED FROM specs/starcoder2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/starcoder2.yaml --target neuron
# source hash (spec + templates + generator): 28ed493bede862a2
# ==================================================================================================================
"""Checkpoint mappings of Starcoder2ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Starcoder2Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ((".mlp.c_fc.", ".mlp.up_proj."), (".mlp.c_proj.", ".mlp.down_proj."))


def _starcoder2_attention_mappings(mappings: dict[str, list[str]], module: str, config: Starcoder2Config) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.use_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _starcoder2_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Starcoder2Config) -> None:
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    if config.use_bias:
        mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
        mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: Starcoder2Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _starcoder2_attention_mappings(mappings, prefix + ".self_attn", config)
        _starcoder2_mlp_mappings(mappings, prefix + ".mlp", config)
        for key in (
            "input_layernorm.weight",
            "input_layernorm.bias",
            "post_attention_layernorm.weight",
            "post_attention_layernorm.bias",
        ):
            mappings[f"{prefix}.{key}"] = [f"{prefix}.{key}"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    mappings["model.norm.bias"] = ["model.norm.bias"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
