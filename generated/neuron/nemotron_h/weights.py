# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/nemotron_h.yaml --target neuron
# source hash (spec + templates + generator): f7a1c6d11ca8b375
# ==================================================================================================================
"""Checkpoint mappings of NemotronHForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import NemotronHConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _nemotron_hmixer_mappings(mappings: dict[str, list[str]], module: str, config: NemotronHConfig) -> None:
    names = [("in_proj_weight", "in_proj.weight"), ("conv1d_weight", "conv1d.weight"), ("dt_bias", "dt_bias"),
             ("A_log", "A_log"), ("D", "D"), ("norm_weight", "norm.weight"), ("out_proj_weight", "out_proj.weight")]
    if config.use_conv_bias:
        names.append(("conv1d_bias", "conv1d.bias"))
    if config.use_bias:
        names += [("in_proj_bias", "in_proj.bias"), ("out_proj_bias", "out_proj.bias")]
    for param, key in names:
        mappings[f"{module}.{param}"] = [f"{module}.{key}"]


def _nemotron_hattention_mappings(mappings: dict[str, list[str]], module: str, config: NemotronHConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]


def _nemotron_hmlp_mappings(mappings: dict[str, list[str]], module: str, config: NemotronHConfig) -> None:
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    if config.mlp_bias:
        mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
        mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: NemotronHConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["backbone.embeddings_weight"] = ["backbone.embeddings.weight"]
    for i in range(config.schedule_length):
        prefix = "backbone.layers." + str(i)
        block = config.layer_block(i)
        if block == "mamba":
            _nemotron_hmixer_mappings(mappings, prefix + ".mixer", config)
        elif block == "attention":
            _nemotron_hattention_mappings(mappings, prefix + ".mixer", config)
        else:
            _nemotron_hmlp_mappings(mappings, prefix + ".mixer", config)
        mappings[prefix + ".norm.weight"] = [prefix + ".norm.weight"]
    mappings["backbone.norm_f.weight"] = ["backbone.norm_f.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
