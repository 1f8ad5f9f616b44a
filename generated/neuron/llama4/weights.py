# ==================================================================================================================
# GENERATED FROM specs/llama4.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/llama4.yaml --target neuron
# source hash (spec + templates + generator): 19628cc76f58aab4
# ==================================================================================================================
"""Checkpoint mappings of Llama4ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Llama4Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _llama4_attention0_mappings(mappings: dict[str, list[str]], module: str, config: Llama4Config) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _llama4_attention1_mappings(mappings: dict[str, list[str]], module: str, config: Llama4Config) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    if config.attention_bias:
        mappings[module + ".qkv_proj_bias"] = [
            module + ".q_proj.bias", module + ".k_proj.bias", module + ".v_proj.bias",
        ]
        mappings[module + ".o_proj_bias"] = [module + ".o_proj.bias"]


def _llama4_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Llama4Config) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def _llama4_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: Llama4Config, available: set[str]
) -> None:
    """Router, routed experts and shared experts of one MoE block.

    Experts load from fused tensors (experts on a tensor dim), the only layout the family's checkpoints have.
    """
    mappings[module + ".router_weight"] = [module + ".router.weight"]
    # The family stores its experts fused only (no per-expert names).
    mappings[module + ".experts_w13_weight"] = [module + ".experts.gate_up_proj"]
    mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]
    _llama4_mlp_mappings(mappings, module + ".shared_expert", config)


def checkpoint_mappings(config: Llama4Config, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block in ("decoder", "decoder_moe"):
            _llama4_attention0_mappings(mappings, prefix + ".self_attn", config)
        else:
            _llama4_attention1_mappings(mappings, prefix + ".self_attn", config)
        if block in ("decoder", "nope"):
            _llama4_mlp_mappings(mappings, prefix + ".feed_forward", config)
        else:
            _llama4_sparse_moe_block_mappings(mappings, prefix + ".feed_forward", config, available)
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
