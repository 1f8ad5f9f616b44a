# ==================================================================================================================
# GENERATED FROM specs/minimax.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/minimax.yaml --target rocm
# source hash (spec + templates + generator): 8eb40ba1c52fdebf
# ==================================================================================================================
"""Weight-loader tables of MiniMaxForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
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
    ("experts.w13_weight", "experts.{e}.w1.weight", "w1"),
    ("experts.w13_weight", "experts.{e}.w3.weight", "w3"),
    ("experts.w2_weight", "experts.{e}.w2.weight", "w2"),
)

# transformers v5 fused expert tensors (save_pretrained(save_original_format=False)): one tensor per stacked parameter.
FUSED_EXPERT_MAPPING = (
    ("experts.w13_weight", "experts.gate_up_proj", "w13"),
    ("experts.w2_weight", "experts.down_proj", "w2"),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = (
    "model.layers.*.self_attn.slope_rate",
    "model.layers.*.self_attn.query_decay",
    "model.layers.*.self_attn.key_decay",
    "model.layers.*.self_attn.diagonal_decay",
)

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = ((".block_sparse_moe.", ".mlp."), (".self_attn.qkv_proj.", ".self_attn.qkv."))

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
