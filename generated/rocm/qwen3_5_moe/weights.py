# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5_moe.yaml --target rocm
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Weight-loader tables of Qwen35MoeForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
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

# Routed experts (ATOM's make_expert_params_mapping), relative to each MoE block (e.g. model.layers.3.mlp):
# (stacked parameter, checkpoint name with {e} = expert index, shard id). w13 = [gate; up], w2 = down.
EXPERT_PARAMS_MAPPING = (
    ("experts.w13_weight", "experts.{e}.gate_proj.weight", "w1"),
    ("experts.w13_weight", "experts.{e}.up_proj.weight", "w3"),
    ("experts.w2_weight", "experts.{e}.down_proj.weight", "w2"),
)

# transformers v5 fused expert tensors (save_pretrained(save_original_format=False)): one tensor per stacked parameter.
FUSED_EXPERT_MAPPING = (
    ("experts.w13_weight", "experts.gate_up_proj", "w13"),
    ("experts.w2_weight", "experts.down_proj", "w2"),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.visual.**", "mtp.**")

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (("model.language_model.", "model."),)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
