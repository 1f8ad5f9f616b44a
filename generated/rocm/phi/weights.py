# ==================================================================================================================
# GENERATED FROM specs/phi.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/phi.yaml --target rocm
# source hash (spec + templates + generator): 8e35530cc9db435c
# ==================================================================================================================
"""Weight-loader tables of PhiForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (
    (".self_attn.dense.", ".self_attn.o_proj."),
    (".mlp.fc1.", ".mlp.up_proj."),
    (".mlp.fc2.", ".mlp.down_proj."),
)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}
