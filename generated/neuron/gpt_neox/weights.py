# ==================================================================================================================
# GENERATED FROM specs/gpt_neox.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gpt_neox.yaml --target neuron
# source hash (spec + templates + generator): aeb2b996043dc05a
# ==================================================================================================================
"""Checkpoint mappings of GPTNeoXForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit, split_mappings

from .config import GPTNeoXConfig


def _query_key_value_sizes(config: GPTNeoXConfig) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `query_key_value` tensor, in storage order."""
    return (
        config.hidden_size // config.num_attention_heads,  # q_proj
        config.hidden_size // config.num_attention_heads,  # k_proj
        config.hidden_size // config.num_attention_heads,  # v_proj
    )


def _query_key_value_groups(config: GPTNeoXConfig) -> int:
    """Interleaved groups of a stored `query_key_value` tensor along dim 0: the parts repeat in each."""
    return config.num_attention_heads


# Checkpoint modules stored already fused (spec checkpoint.split, the reverse of a fusion): each tensor of the module
# is read as its parts, which then load as if the checkpoint stored them separately (runtime/loader/split.py).
CHECKPOINT_SPLITS = (
    CheckpointSplit("query_key_value", 0, ("q_proj", "k_proj", "v_proj"), _query_key_value_sizes,
                    _query_key_value_groups),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = (
    "gpt_neox.layers.*.attention.bias",
    "gpt_neox.layers.*.attention.masked_bias",
    "gpt_neox.layers.*.attention.rotary_emb.inv_freq",
)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    ("embed_out.", "lm_head."),
    (".attention.dense.", ".attention.o_proj."),
    (".mlp.dense_h_to_4h.", ".mlp.up_proj."),
    (".mlp.dense_4h_to_h.", ".mlp.down_proj."),
)


def _gptneo_xattention_mappings(mappings: dict[str, list[str]], module: str, config: GPTNeoXConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _gptneo_xmlp_mappings(mappings: dict[str, list[str]], module: str, config: GPTNeoXConfig) -> None:
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
    mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def checkpoint_mappings(config: GPTNeoXConfig) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["gpt_neox.embed_in_weight"] = ["gpt_neox.embed_in.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "gpt_neox.layers." + str(i)
        _gptneo_xattention_mappings(mappings, prefix + ".attention", config)
        _gptneo_xmlp_mappings(mappings, prefix + ".mlp", config)
        for key in (
            "input_layernorm.weight",
            "input_layernorm.bias",
            "post_attention_layernorm.weight",
            "post_attention_layernorm.bias",
        ):
            mappings[f"{prefix}.{key}"] = [f"{prefix}.{key}"]
    mappings["gpt_neox.final_layer_norm.weight"] = ["gpt_neox.final_layer_norm.weight"]
    mappings["gpt_neox.final_layer_norm.bias"] = ["gpt_neox.final_layer_norm.bias"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["gpt_neox.embed_in.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return split_mappings(mappings, CHECKPOINT_SPLITS)  # keys of split parts read slices of the stored tensor
