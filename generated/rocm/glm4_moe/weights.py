# ==================================================================================================================
# GENERATED FROM specs/glm4_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/glm4_moe.yaml --target rocm
# source hash (spec + templates + generator): 8a95b4d8273e6bdf
# ==================================================================================================================
"""Weight-loader tables of Glm4MoeForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
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

# Shared experts fused as extra expert slots: (stacked parameter, checkpoint name, shard id); each tensor is split
# along its intermediate dim into one slot per shared expert.
SHARED_EXPERT_MAPPING = (
    ("experts.w13_weight", "shared_experts.gate_proj.weight", "shared_w1"),
    ("experts.w13_weight", "shared_experts.up_proj.weight", "shared_w3"),
    ("experts.w2_weight", "shared_experts.down_proj.weight", "shared_w2"),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = ()

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
