# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/dbrx.yaml --target vllm
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""Weight-loader tables of DbrxForCausalLM (vllm): how HF checkpoint names reach vLLM's fused parameters.

``load_weights`` (modelgen.runtime.vllm.loader) routes every checkpoint tensor through these tables and refuses a
checkpoint with a tensor nothing consumes or ignores, or a parameter nothing fills (vLLM's own loaders skip both).
"""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit

from .config import DbrxConfig


def _Wqkv_sizes(config: DbrxConfig) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `Wqkv` tensor, in storage order."""
    return (
        config.hidden_size,  # q_proj
        config.num_key_value_heads * (config.hidden_size // config.num_attention_heads),  # k_proj
        config.num_key_value_heads * (config.hidden_size // config.num_attention_heads),  # v_proj
    )


# Checkpoint modules stored already fused (spec checkpoint.split, the reverse of a fusion): each tensor of the module
# is read as its parts, which then load as if the checkpoint stored them separately (runtime/loader/split.py).
CHECKPOINT_SPLITS = (
    CheckpointSplit("Wqkv", 0, ("q_proj", "k_proj", "v_proj"), _Wqkv_sizes),
)

# HF module name -> (fused parameter, shard id) (vLLM's stacked_params_mapping).
STACKED_PARAMS_MAPPING = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
    "Wqkv": ("Wqkv", CHECKPOINT_SPLITS[0]),  # stored fused: split
}

# Routed experts, relative to each MoE block (e.g. model.layers.3.mlp): (stacked parameter, checkpoint name with
# {e} = expert index, vLLM shard id). w13 = [gate; up], w2 = down.
EXPERT_PARAMS_MAPPING = (
)

# transformers v5 fused expert tensors (save_pretrained(save_original_format=False)): one tensor per stacked
# parameter, split per expert at load (flat layout).
FUSED_EXPERT_MAPPING = (
    ("experts.routed_experts.w13_weight", "experts.mlp.w1", "w1"),
    ("experts.routed_experts.w13_weight", "experts.mlp.v1", "w3"),
    ("experts.routed_experts.w2_weight", "experts.mlp.w2", "w2"),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before mapping.
RENAMES = (
    ("transformer.blocks.", "transformer.layers."),
    (".norm_attn_norm.attn.", ".attn."),
    (".norm_attn_norm.norm_1.", ".norm_1."),
    (".norm_attn_norm.norm_2.", ".norm_2."),
    (".attn.out_proj.", ".attn.o_proj."),
    (".ffn.router.layer.", ".ffn.router."),
)

# Parameters that share storage with another when the config ties them (filled through the twin).
TIED_PARAMETERS = {"lm_head.weight": "transformer.wte.weight"}

# Fused parameter -> the HF modules it packs (vLLM's packed_modules_mapping: LoRA and quantization read it).
PACKED_MODULES_MAPPING = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}
