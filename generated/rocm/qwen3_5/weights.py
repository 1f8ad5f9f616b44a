# ==================================================================================================================
# GENERATED FROM specs/qwen3_5.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5.yaml --target rocm
# source hash (spec + templates + generator): 276b47a7d839ff20
# ==================================================================================================================
"""Weight-loader tables of Qwen35ForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
    "in_proj_qkv": ("in_proj_qkvz", "qkv"),
    "in_proj_z": ("in_proj_qkvz", "z"),
    "in_proj_b": ("in_proj_ba", "b"),
    "in_proj_a": ("in_proj_ba", "a"),
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.visual.**", "mtp.**")

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (("model.language_model.", "model."),)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
