# ==================================================================================================================
# GENERATED FROM specs/qwen2_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen2_moe.yaml --target neuron
# source hash (spec + templates + generator): 8cc8b2c09e3837aa
# ==================================================================================================================
"""Checkpoint mappings of Qwen2MoeForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Qwen2MoeConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.layers.*.self_attn.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("weight_scale_inv", "weight_scale"),)


def _qwen2_moe_attention0_mappings(mappings: dict[str, list[str]], module: str, config: Qwen2MoeConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.qkv_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]


def _qwen2_moe_attention1_mappings(mappings: dict[str, list[str]], module: str, config: Qwen2MoeConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.qkv_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]


def _qwen2_moe_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Qwen2MoeConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def _qwen2_moe_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: Qwen2MoeConfig, available: set[str]
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
    _qwen2_moe_mlp_mappings(mappings, module + ".shared_expert", config)
    mappings[module + ".shared_expert_gate_weight"] = [module + ".shared_expert_gate.weight"]


def checkpoint_mappings(config: Qwen2MoeConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block in ("decoder", "sparse"):
            _qwen2_moe_attention0_mappings(mappings, prefix + ".self_attn", config)
        else:
            _qwen2_moe_attention1_mappings(mappings, prefix + ".self_attn", config)
        if block in ("decoder", "decoder_sliding"):
            _qwen2_moe_mlp_mappings(mappings, prefix + ".mlp", config)
        else:
            _qwen2_moe_sparse_moe_block_mappings(mappings, prefix + ".mlp", config, available)
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
