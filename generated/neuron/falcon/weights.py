# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon.yaml --target neuron
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Checkpoint mappings of FalconForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit, split_mappings

from .config import FalconConfig


def _query_key_value_sizes(config: FalconConfig) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `query_key_value` tensor, in storage order."""
    return (
        config.num_attention_heads // config.kv_heads * config.falcon_head_dim,  # q_proj
        config.falcon_head_dim,  # k_proj
        config.falcon_head_dim,  # v_proj
    )


def _query_key_value_groups(config: FalconConfig) -> int:
    """Interleaved groups of a stored `query_key_value` tensor along dim 0: the parts repeat in each."""
    return config.kv_heads


# Checkpoint modules stored already fused (spec checkpoint.split, the reverse of a fusion): each tensor of the module
# is read as its parts, which then load as if the checkpoint stored them separately (runtime/loader/split.py).
CHECKPOINT_SPLITS = (
    CheckpointSplit("query_key_value", 0, ("q_proj", "k_proj", "v_proj"), _query_key_value_sizes,
                    _query_key_value_groups),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("transformer.layers.*.self_attention.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    ("transformer.h.", "transformer.layers."),
    (".ln_attn.", ".input_layernorm."),
    (".ln_mlp.", ".post_attention_layernorm."),
    (".self_attention.dense.", ".self_attention.o_proj."),
    (".mlp.dense_h_to_4h.", ".mlp.up_proj."),
    (".mlp.dense_4h_to_h.", ".mlp.down_proj."),
)


def _falcon_attention0_mappings(mappings: dict[str, list[str]], module: str, config: FalconConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _falcon_attention1_mappings(mappings: dict[str, list[str]], module: str, config: FalconConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _falcon_mlp_mappings(mappings: dict[str, list[str]], module: str, config: FalconConfig) -> None:
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    if config.bias:
        mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
        mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: FalconConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["transformer.word_embeddings_weight"] = ["transformer.word_embeddings.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "transformer.layers." + str(i)
        block = config.layer_block(i)
        if block == "decoder":
            _falcon_attention0_mappings(mappings, prefix + ".self_attention", config)
        else:
            _falcon_attention1_mappings(mappings, prefix + ".self_attention", config)
        _falcon_mlp_mappings(mappings, prefix + ".mlp", config)
        for key in ("input_layernorm.weight", "input_layernorm.bias"):
            mappings[f"{prefix}.{key}"] = [f"{prefix}.{key}"]
        if not (config.parallel_layer) or (config.own_mlp_norm):
            mappings[prefix + ".post_attention_layernorm.weight"] = [prefix + ".post_attention_layernorm.weight"]
        if not (config.parallel_layer) or (config.own_mlp_norm):
            mappings[prefix + ".post_attention_layernorm.bias"] = [prefix + ".post_attention_layernorm.bias"]
    mappings["transformer.ln_f.weight"] = ["transformer.ln_f.weight"]
    mappings["transformer.ln_f.bias"] = ["transformer.ln_f.bias"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["transformer.word_embeddings.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return split_mappings(mappings, CHECKPOINT_SPLITS)  # keys of split parts read slices of the stored tensor
