# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/bamba.yaml --target neuron
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""Checkpoint mappings of BambaForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import BambaConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.layers.*.self_attn.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("weight_scale_inv", "weight_scale"),)


def _bamba_attention_mappings(mappings: dict[str, list[str]], module: str, config: BambaConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _bamba_mixer_mappings(mappings: dict[str, list[str]], module: str, config: BambaConfig) -> None:
    names = [("in_proj_weight", "in_proj.weight"), ("conv1d_weight", "conv1d.weight"), ("dt_bias", "dt_bias"),
             ("A_log", "A_log"), ("D", "D"), ("norm_weight", "norm.weight"), ("out_proj_weight", "out_proj.weight")]
    if config.mamba_conv_bias:
        names.append(("conv1d_bias", "conv1d.bias"))
    if config.mamba_proj_bias:
        names += [("in_proj_bias", "in_proj.bias"), ("out_proj_bias", "out_proj.bias")]
    for param, key in names:
        mappings[f"{module}.{param}"] = [f"{module}.{key}"]


def _bamba_mlp_mappings(mappings: dict[str, list[str]], module: str, config: BambaConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    if config.mlp_bias:
        mappings[module + ".gate_proj_bias"] = [module + ".gate_proj.bias"]
        mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
        mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: BambaConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block == "attention":
            _bamba_attention_mappings(mappings, prefix + ".self_attn", config)
        else:
            _bamba_mixer_mappings(mappings, prefix + ".mamba", config)
        _bamba_mlp_mappings(mappings, prefix + ".feed_forward", config)
        for norm in ("input_layernorm", "pre_ff_layernorm"):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["model.final_layernorm.weight"] = ["model.final_layernorm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
