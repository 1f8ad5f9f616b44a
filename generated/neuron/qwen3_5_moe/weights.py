# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_5_moe.yaml --target neuron
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Checkpoint mappings of Qwen35MoeForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Qwen35MoeConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.visual.**", "mtp.**")

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("model.language_model.", "model."),)


def _qwen35_moe_attention_mappings(mappings: dict[str, list[str]], module: str, config: Qwen35MoeConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]
    for norm in ("q_norm", "k_norm"):
        mappings[f"{module}.{norm}.weight"] = [f"{module}.{norm}.weight"]


def _qwen35_moe_gated_delta_net_mappings(mappings: dict[str, list[str]], module: str, config: Qwen35MoeConfig) -> None:
    # The checkpoint's split projections (checkpoint.fuse), read in the order the fused weight stacks them.
    mappings[module + ".in_proj_qkvz_weight"] = [
        module + ".in_proj_qkv.weight", module + ".in_proj_z.weight",
    ]
    mappings[module + ".in_proj_ba_weight"] = [
        module + ".in_proj_b.weight", module + ".in_proj_a.weight",
    ]
    mappings[module + ".conv1d_weight"] = [module + ".conv1d.weight"]
    for name in ("A_log", "dt_bias"):
        mappings[module + "." + name] = [module + "." + name]
    mappings[module + ".norm_weight"] = [module + ".norm.weight"]
    mappings[module + ".out_proj_weight"] = [module + ".out_proj.weight"]


def _qwen35_moe_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Qwen35MoeConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def _qwen35_moe_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: Qwen35MoeConfig, available: set[str]
) -> None:
    """Router, routed experts and shared experts of one MoE block.

    Experts load from transformers v5's fused tensors when the checkpoint has them (experts on a tensor dim), else
    from per-expert tensors: w13 interleaved per expert [gate_0, up_0, gate_1, up_1, ...], w2 grouped [down_0, ...].
    """
    mappings[module + ".gate_weight"] = [module + ".gate.weight"]
    # Per-expert checkpoint names relative to the MoE module; {e} is the expert index.
    gate, up, down = "experts.{e}.gate_proj.weight", "experts.{e}.up_proj.weight", "experts.{e}.down_proj.weight"
    num_experts = config.num_experts
    if module + ".experts.gate_up_proj" in available:
        mappings[module + ".experts_w13_weight"] = [module + ".experts.gate_up_proj"]
        mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]
    else:
        mappings[module + ".experts_w13_weight"] = [
            module + "." + name.format(e=e) for e in range(num_experts) for name in (gate, up)
        ]
        mappings[module + ".experts_w2_weight"] = [module + "." + down.format(e=e) for e in range(num_experts)]
    _qwen35_moe_mlp_mappings(mappings, module + ".shared_expert", config)
    mappings[module + ".shared_expert_gate_weight"] = [module + ".shared_expert_gate.weight"]


def checkpoint_mappings(config: Qwen35MoeConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block == "full":
            _qwen35_moe_attention_mappings(mappings, prefix + ".self_attn", config)
        else:
            _qwen35_moe_gated_delta_net_mappings(mappings, prefix + ".linear_attn", config)
        _qwen35_moe_sparse_moe_block_mappings(mappings, prefix + ".mlp", config, available)
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
