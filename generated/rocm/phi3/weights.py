# ==================================================================================================================
# GENERATED FROM specs/phi3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/phi3.yaml --target rocm
# source hash (spec + templates + generator): bf8b015ba8b29a82
# ==================================================================================================================
"""Weight-loader tables of Phi3ForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit

from .config import Phi3Config


def _qkv_proj_sizes(config: Phi3Config) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `qkv_proj` tensor, in storage order."""
    return (
        config.num_attention_heads * config.head_dim,  # q_proj
        config.num_key_value_heads * config.head_dim,  # k_proj
        config.num_key_value_heads * config.head_dim,  # v_proj
    )


def _gate_up_proj_sizes(config: Phi3Config) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `gate_up_proj` tensor, in storage order."""
    return (
        config.intermediate_size,  # gate_proj
        config.intermediate_size,  # up_proj
    )


# Checkpoint modules stored already fused (spec checkpoint.split, the reverse of a fusion): each tensor of the module
# is read as its parts, which then load as if the checkpoint stored them separately (runtime/loader/split.py).
CHECKPOINT_SPLITS = (
    CheckpointSplit("qkv_proj", 0, ("q_proj", "k_proj", "v_proj"), _qkv_proj_sizes),
    CheckpointSplit("gate_up_proj", 0, ("gate_proj", "up_proj"), _gate_up_proj_sizes),
)

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
    "qkv_proj": ("qkv_proj", CHECKPOINT_SPLITS[0]),  # stored fused: split
    "gate_up_proj": ("gate_up_proj", CHECKPOINT_SPLITS[1]),  # stored fused: split
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = ()

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
