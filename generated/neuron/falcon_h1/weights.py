# ==================================================================================================================
# GENERATED FROM specs/falcon_h1.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon_h1.yaml --target neuron
# source hash (spec + templates + generator): c6d883bdd38a51b9
# ==================================================================================================================
"""Checkpoint mappings of FalconH1ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import FalconH1Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _falcon_h1_attention_mappings(mappings: dict[str, list[str]], module: str, config: FalconH1Config) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _falcon_h1_mixer_mappings(mappings: dict[str, list[str]], module: str, config: FalconH1Config) -> None:
    names = [("in_proj_weight", "in_proj.weight"), ("conv1d_weight", "conv1d.weight"), ("dt_bias", "dt_bias"),
             ("A_log", "A_log"), ("D", "D"), ("norm_weight", "norm.weight"), ("out_proj_weight", "out_proj.weight")]
    if not config.mamba_rms_norm:
        names.remove(("norm_weight", "norm.weight"))  # no gated norm: y * silu(z)
    if config.mamba_conv_bias:
        names.append(("conv1d_bias", "conv1d.bias"))
    if config.mamba_proj_bias:
        names.append(("in_proj_bias", "in_proj.bias"))
    if config.projectors_bias:
        names.append(("out_proj_bias", "out_proj.bias"))
    for param, key in names:
        mappings[f"{module}.{param}"] = [f"{module}.{key}"]


def _falcon_h1_mlp_mappings(mappings: dict[str, list[str]], module: str, config: FalconH1Config) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    if config.mlp_bias:
        mappings[module + ".gate_proj_bias"] = [module + ".gate_proj.bias"]
        mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
        mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: FalconH1Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _falcon_h1_attention_mappings(mappings, prefix + ".self_attn", config)
        _falcon_h1_mixer_mappings(mappings, prefix + ".mamba", config)
        _falcon_h1_mlp_mappings(mappings, prefix + ".feed_forward", config)
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
