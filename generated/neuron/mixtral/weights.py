# ==================================================================================================================
# GENERATED FROM specs/mixtral.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mixtral.yaml --target neuron
# source hash (spec + templates + generator): 1d8da23033c77725
# ==================================================================================================================
"""Checkpoint mappings of MixtralForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import MixtralConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames applied to every checkpoint key before the mappings are looked up.
RENAMES = (('.block_sparse_moe.', '.mlp.'),)


def _moe(mappings: dict[str, list[str]], moe: str, num_experts: int, available: set[str]) -> None:
    """Router, routed experts and shared experts of one MoE block.

    Experts load from transformers v5's fused tensors when the checkpoint has them (experts on a tensor dim), else
    from per-expert tensors: w13 interleaved per expert [gate_0, up_0, gate_1, up_1, ...], w2 grouped [down_0, ...].
    """
    mappings[f"{moe}.gate_weight"] = [f"{moe}.gate.weight"]
    if f"{moe}.experts.gate_up_proj" in available:
        mappings[f"{moe}.experts_w13_weight"] = [f"{moe}.experts.gate_up_proj"]
        mappings[f"{moe}.experts_w2_weight"] = [f"{moe}.experts.down_proj"]
    else:
        mappings[f"{moe}.experts_w13_weight"] = [
            key for e in range(num_experts)
            for key in (f"{moe}.experts.{e}.w1.weight", f"{moe}.experts.{e}.w3.weight")
        ]
        mappings[f"{moe}.experts_w2_weight"] = [f"{moe}.experts.{e}.w2.weight" for e in range(num_experts)]


def checkpoint_mappings(config: MixtralConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}"
        attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        mappings[f"{attn}.qkv_proj_weight"] = [f"{attn}.q_proj.weight", f"{attn}.k_proj.weight", f"{attn}.v_proj.weight"]
        mappings[f"{attn}.o_proj_weight"] = [f"{attn}.o_proj.weight"]
        _moe(mappings, mlp, config.num_local_experts, available)
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
