# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/nemotron_h.yaml --target rocm
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""Weight-loader tables of NemotronHForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
}

# Routed experts (ATOM's make_expert_params_mapping), relative to each MoE block (e.g. model.layers.3.mlp):
# (stacked parameter, checkpoint name with {e} = expert index, shard id). w13 = [gate; up], w2 = down.
EXPERT_PARAMS_MAPPING = (
    ("experts.w13_weight", "experts.{e}.up_proj.weight", "w1"),
    ("experts.w2_weight", "experts.{e}.down_proj.weight", "w2"),
)

# transformers v5 fused expert tensors (save_pretrained(save_original_format=False)): one tensor per stacked parameter.
FUSED_EXPERT_MAPPING = (
    ("experts.w13_weight", "experts.up_proj", "w1"),
    ("experts.w2_weight", "experts.down_proj", "w2"),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (
    ("model.embeddings.", "backbone.embeddings."),
    ("model.layers.", "backbone.layers."),
    ("model.norm_f.", "backbone.norm_f."),
)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "backbone.embeddings.weight"}
