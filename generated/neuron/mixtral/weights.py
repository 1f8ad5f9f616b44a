# ==================================================================================================================
# GENERATED FROM specs/mixtral.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mixtral.yaml --target neuron
# source hash (spec + templates + generator): 1920e6ad85681262
# ==================================================================================================================
"""Checkpoint mappings of MixtralForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import MixtralConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ((".block_sparse_moe.", ".mlp."),)


def _mixtral_attention_mappings(mappings: dict[str, list[str]], module: str, config: MixtralConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]


def _mixtral_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: MixtralConfig, available: set[str]
) -> None:
    """Router, routed experts of one MoE block.

    Experts load from transformers v5's fused tensors when the checkpoint has them (experts on a tensor dim), else
    from per-expert tensors: w13 interleaved per expert [gate_0, up_0, gate_1, up_1, ...], w2 grouped [down_0, ...].
    """
    mappings[module + ".gate_weight"] = [module + ".gate.weight"]
    # Per-expert checkpoint names relative to the MoE module; {e} is the expert index.
    gate, up, down = "experts.{e}.w1.weight", "experts.{e}.w3.weight", "experts.{e}.w2.weight"
    num_experts = config.num_local_experts
    if module + ".experts.gate_up_proj" in available:
        mappings[module + ".experts_w13_weight"] = [module + ".experts.gate_up_proj"]
        mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]
    else:
        mappings[module + ".experts_w13_weight"] = [
            module + "." + name.format(e=e) for e in range(num_experts) for name in (gate, up)
        ]
        mappings[module + ".experts_w2_weight"] = [module + "." + down.format(e=e) for e in range(num_experts)]


def checkpoint_mappings(config: MixtralConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        _mixtral_attention_mappings(mappings, prefix + ".self_attn", config)
        _mixtral_sparse_moe_block_mappings(mappings, prefix + ".mlp", config, available)
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
