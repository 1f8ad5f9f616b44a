# ==================================================================================================================
# GENERATED FROM specs/gpt_oss.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gpt_oss.yaml --target neuron
# source hash (spec + templates + generator): 560ee8db1905c88d
# ==================================================================================================================
"""Checkpoint mappings of GptOssForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import GptOssConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ("model.layers.*.self_attn.rotary_emb.inv_freq",)

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (("weight_scale_inv", "weight_scale"),)


def _gpt_oss_attention0_mappings(mappings: dict[str, list[str]], module: str, config: GptOssConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    mappings[module + ".sinks"] = [module + ".sinks"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _gpt_oss_attention1_mappings(mappings: dict[str, list[str]], module: str, config: GptOssConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    mappings[module + ".sinks"] = [module + ".sinks"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _gpt_oss_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: GptOssConfig, available: set[str]
) -> None:
    """Router, routed experts of one MoE block.

    Experts load from transformers v5's fused tensors when the checkpoint has them (experts on a tensor dim), else
    from per-expert tensors: w13 interleaved per expert [gate_0, up_0, gate_1, up_1, ...], w2 grouped [down_0, ...].
    """
    mappings[module + ".router_weight"] = [module + ".router.weight"]
    mappings[module + ".router_bias"] = [module + ".router.bias"]
    # Per-expert checkpoint names relative to the MoE module; {e} is the expert index.
    gate, up, down = "experts.{e}.gate_proj.weight", "experts.{e}.up_proj.weight", "experts.{e}.down_proj.weight"
    num_experts = config.num_local_experts
    if module + ".experts.gate_up_proj" in available:
        mappings[module + ".experts_w13_weight"] = [module + ".experts.gate_up_proj"]
        mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]
        mappings[module + ".experts_w13_bias"] = [module + ".experts.gate_up_proj_bias"]
        mappings[module + ".experts_w2_bias"] = [module + ".experts.down_proj_bias"]
    else:
        mappings[module + ".experts_w13_weight"] = [
            module + "." + name.format(e=e) for e in range(num_experts) for name in (gate, up)
        ]
        mappings[module + ".experts_w2_weight"] = [module + "." + down.format(e=e) for e in range(num_experts)]


def checkpoint_mappings(config: GptOssConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block == "decoder":
            _gpt_oss_attention0_mappings(mappings, prefix + ".self_attn", config)
        else:
            _gpt_oss_attention1_mappings(mappings, prefix + ".self_attn", config)
        _gpt_oss_sparse_moe_block_mappings(mappings, prefix + ".mlp", config, available)
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
