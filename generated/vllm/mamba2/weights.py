# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/mamba2.yaml --target vllm
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Weight-loader tables of Mamba2ForCausalLM (vllm): how HF checkpoint names reach vLLM's fused parameters.

``load_weights`` (modelgen.runtime.vllm.loader) routes every checkpoint tensor through these tables and refuses a
checkpoint with a tensor nothing consumes or ignores, or a parameter nothing fills (vLLM's own loaders skip both).
"""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (vLLM's stacked_params_mapping).
STACKED_PARAMS_MAPPING = {
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (("backbone.embedding.", "backbone.embeddings."),)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "backbone.embeddings.weight"}

# Fused parameter -> the HF modules it packs (vLLM's packed_modules_mapping: LoRA and quantization read it).
PACKED_MODULES_MAPPING = {
}
