# ==================================================================================================================
# GENERATED FROM specs/qwen3_next.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen3_next.yaml --target vllm
# source hash (spec + templates + generator): bb29085f76c04d70
# ==================================================================================================================
"""Weight-loader tables of Qwen3NextForCausalLM (vllm): how HF checkpoint names reach vLLM's fused parameters.

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

# Routed experts, relative to each MoE block (e.g. model.layers.3.mlp): (stacked parameter, checkpoint name with
# {e} = expert index, vLLM shard id). w13 = [gate; up], w2 = down.
EXPERT_PARAMS_MAPPING = (
    ("experts.routed_experts.w13_weight", "experts.{e}.gate_proj.weight", "w1"),
    ("experts.routed_experts.w13_weight", "experts.{e}.up_proj.weight", "w3"),
    ("experts.routed_experts.w2_weight", "experts.{e}.down_proj.weight", "w2"),
    ("experts.routed_experts.w13_weight_scale_inv", "experts.{e}.gate_proj.weight_scale_inv", "w1"),  # FP8 block scales
    ("experts.routed_experts.w13_weight_scale_inv", "experts.{e}.up_proj.weight_scale_inv", "w3"),  # FP8 block scales
    ("experts.routed_experts.w2_weight_scale_inv", "experts.{e}.down_proj.weight_scale_inv", "w2"),  # FP8 block scales
)

# transformers v5 fused expert tensors (save_pretrained(save_original_format=False)): one tensor per stacked
# parameter, split per expert at load (stacked layout).
FUSED_EXPERT_MAPPING = (
    ("experts.routed_experts.w13_weight", "experts.gate_up_proj", "w13"),
    ("experts.routed_experts.w2_weight", "experts.down_proj", "w2"),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("mtp.**",)

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = ()

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "model.embed_tokens.weight"}

# Fused parameter -> the HF modules it packs (vLLM's packed_modules_mapping: LoRA and quantization read it).
PACKED_MODULES_MAPPING = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}
