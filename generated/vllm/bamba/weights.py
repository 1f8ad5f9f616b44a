# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/bamba.yaml --target vllm
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""Weight-loader tables of BambaForCausalLM (vllm): how HF checkpoint names reach vLLM's fused parameters.

``load_weights`` (modelgen.runtime.vllm.loader) routes every checkpoint tensor through these tables and refuses a
checkpoint with a tensor nothing consumes or ignores, or a parameter nothing fills (vLLM's own loaders skip both).
"""
from __future__ import annotations

# HF module name -> (fused parameter, shard id) (vLLM's stacked_params_mapping).
STACKED_PARAMS_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.layers.*.self_attn.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (("weight_scale_inv", "weight_scale"),)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}

# Fused parameter -> the HF modules it packs (vLLM's packed_modules_mapping: LoRA and quantization read it).
PACKED_MODULES_MAPPING = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}
