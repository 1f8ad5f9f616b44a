# ==================================================================================================================
# GENERATED FROM specs/gemma3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gemma3.yaml --target rocm
# source hash (spec + templates + generator): 2e05c38a053c1cea
# ==================================================================================================================
"""Weight-loader tables of Gemma3ForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = (
    "vision_tower.**",
    "multi_modal_projector.**",
    "model.vision_tower.**",
    "model.multi_modal_projector.**",
)

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (
    ("weight_scale_inv", "weight_scale"),
    ("language_model.model.", "model."),
    ("model.language_model.", "model."),
    ("language_model.lm_head.", "lm_head."),
)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
