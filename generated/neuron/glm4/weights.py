# ==================================================================================================================
# GENERATED FROM specs/glm4.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm4.yaml --target neuron
# source hash (spec + templates + generator): 3c1747e9dd8dc5d2
# ==================================================================================================================
"""Checkpoint mappings of Glm4ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit, split_mappings

from .config import Glm4Config


def _gate_up_proj_sizes(config: Glm4Config) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `gate_up_proj` tensor, in storage order."""
    return (
        config.intermediate_size,  # gate_proj
        config.intermediate_size,  # up_proj
    )


# Checkpoint modules stored already fused (spec checkpoint.split, the reverse of a fusion): each tensor of the module
# is read as its parts, which then load as if the checkpoint stored them separately (runtime/loader/split.py).
CHECKPOINT_SPLITS = (
    CheckpointSplit("gate_up_proj", 0, ("gate_proj", "up_proj"), _gate_up_proj_sizes),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _glm4_attention_mappings(mappings: dict[str, list[str]], module: str, config: Glm4Config) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]


def _glm4_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Glm4Config) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def checkpoint_mappings(config: Glm4Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _glm4_attention_mappings(mappings, prefix + ".self_attn", config)
        _glm4_mlp_mappings(mappings, prefix + ".mlp", config)
        for norm in ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return split_mappings(mappings, CHECKPOINT_SPLITS)  # keys of split parts read slices of the stored tensor
