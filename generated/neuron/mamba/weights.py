# ==================================================================================================================
# GENERATED FROM specs/mamba.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mamba.yaml --target neuron
# source hash (spec + templates + generator): 459784f62379ca15
# ==================================================================================================================
"""Checkpoint mappings of MambaForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import MambaConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("backbone.embedding.", "backbone.embeddings."),)


def _mamba_mamba_mixer_mappings(mappings: dict[str, list[str]], module: str, config: MambaConfig) -> None:
    names = [("in_proj", "weight"), ("conv1d", "weight"), ("x_proj", "weight"), ("dt_proj", "weight"),
             ("dt_proj", "bias"), ("out_proj", "weight")]
    if config.use_conv_bias:
        names.append(("conv1d", "bias"))
    if config.use_bias:
        names += [("in_proj", "bias"), ("out_proj", "bias")]
    for part, kind in names:
        mappings[f"{module}.{part}_{kind}"] = [f"{module}.{part}.{kind}"]
    for name in ("A_log", "D"):
        mappings[f"{module}.{name}"] = [f"{module}.{name}"]


def checkpoint_mappings(config: MambaConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["backbone.embeddings_weight"] = ["backbone.embeddings.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "backbone.layers." + str(i)
        _mamba_mamba_mixer_mappings(mappings, prefix + ".mixer", config)
        mappings[prefix + ".norm.weight"] = [prefix + ".norm.weight"]
    mappings["backbone.norm_f.weight"] = ["backbone.norm_f.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["backbone.embeddings.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
