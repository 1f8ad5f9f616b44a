# ==================================================================================================================
# GENERATED FROM specs/granitemoe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/granitemoe.yaml --target neuron
# source hash (spec + templates + generator): 293ae632995ee058
# ==================================================================================================================
"""Checkpoint mappings of GraniteMoeForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import GraniteMoeConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    (".block_sparse_moe.router.layer.", ".block_sparse_moe.router."),
    (".block_sparse_moe.input_linear.weight", ".block_sparse_moe.experts.gate_up_proj"),
    (".block_sparse_moe.output_linear.weight", ".block_sparse_moe.experts.down_proj"),
)


def _granite_moe_attention_mappings(mappings: dict[str, list[str]], module: str, config: GraniteMoeConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _granite_moe_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: GraniteMoeConfig, available: set[str]
) -> None:
    """Router, routed experts of one MoE block.

    Experts load from fused tensors (experts on a tensor dim), the only layout the family's checkpoints have.
    """
    mappings[module + ".router_weight"] = [module + ".router.weight"]
    # The family stores its experts fused only (no per-expert names).
    mappings[module + ".experts_w13_weight"] = [module + ".experts.gate_up_proj"]
    mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]


def checkpoint_mappings(config: GraniteMoeConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _granite_moe_attention_mappings(mappings, prefix + ".self_attn", config)
        _granite_moe_sparse_moe_block_mappings(mappings, prefix + ".block_sparse_moe", config, available)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["model.norm.weight"] = ["model.norm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
