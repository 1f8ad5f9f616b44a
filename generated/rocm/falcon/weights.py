# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/falcon.yaml --target rocm
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Weight-loader tables of FalconForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit

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

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "query_key_value": ("query_key_value", CHECKPOINT_SPLITS[0]),  # stored fused: split
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("transformer.layers.*.self_attention.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (
    ("transformer.h.", "transformer.layers."),
    (".ln_attn.", ".input_layernorm."),
    (".ln_mlp.", ".post_attention_layernorm."),
    (".self_attention.dense.", ".self_attention.o_proj."),
    (".mlp.dense_h_to_4h.", ".mlp.up_proj."),
    (".mlp.dense_4h_to_h.", ".mlp.down_proj."),
)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "transformer.word_embeddings.weight"}
