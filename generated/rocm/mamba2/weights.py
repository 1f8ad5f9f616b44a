# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/mamba2.yaml --target rocm
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Weight-loader tables of Mamba2ForCausalLM (rocm): how HF checkpoint names reach the fused parameters."""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (ATOM's packed_modules_mapping).
PACKED_MODULES_MAPPING = {
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (("backbone.embedding.", "backbone.embeddings."),)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "backbone.embeddings.weight"}
