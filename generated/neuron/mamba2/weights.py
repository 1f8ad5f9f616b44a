# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mamba2.yaml --target neuron
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Checkpoint mappings of Mamba2ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Mamba2Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("backbone.embedding.", "backbone.embeddings."),)


def _mamba2_mixer_mappings(mappings: dict[str, list[str]], module: str, config: Mamba2Config) -> None:
    names = [("in_proj_weight", "in_proj.weight"), ("conv1d_weight", "conv1d.weight"), ("dt_bias", "dt_bias"),
             ("A_log", "A_log"), ("D", "D"), ("norm_weight", "norm.weight"), ("out_proj_weight", "out_proj.weight")]
    if config.use_conv_bias:
        names.append(("conv1d_bias", "conv1d.bias"))
    if config.use_bias:
        names += [("in_proj_bias", "in_proj.bias"), ("out_proj_bias", "out_proj.bias")]
    for param, key in names:
        mappings[f"{module}.{param}"] = [f"{module}.{key}"]


def checkpoint_mappings(config: Mamba2Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["backbone.embeddings_weight"] = ["backbone.embeddings.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "backbone.layers." + str(i)
        _mamba2_mixer_mappings(mappings, prefix + ".mixer", config)
        mappings[prefix + ".norm.weight"] = [prefix + ".norm.weight"]
    mappings["backbone.norm_f.weight"] = ["backbone.norm_f.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["backbone.embeddings.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
