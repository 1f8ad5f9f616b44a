# ==================================================================================================================
# GENERATED FROM specs/glm_moe_dsa.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm_moe_dsa.yaml --target neuron
# source hash (spec + templates + generator): c7d36e698e90fbf2
# ==================================================================================================================
"""Checkpoint mappings of GlmMoeDsaForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import GlmMoeDsaConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ()


def _glm_moe_dsa_attention0_mappings(mappings: dict[str, list[str]], module: str, config: GlmMoeDsaConfig) -> None:
    names = ["kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight"]
    if config.q_lora_rank is None:
        names.append("q_proj.weight")
    else:
        names += ["q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"]
    if config.attention_bias:
        names += ["kv_a_proj_with_mqa.bias", "o_proj.bias"]
        if config.q_lora_rank is not None:
            names.append("q_a_proj.bias")
    names += ["indexer.wq_b.weight", "indexer.wk.weight", "indexer.weights_proj.weight", "indexer.k_norm.weight",
              "indexer.k_norm.bias"]
    for name in names:
        # Projections are flat parameters (q_a_proj.weight -> q_a_proj_weight); the norms are RMSNorm modules.
        param = name if "_layernorm" in name else name.replace(".", "_")
        mappings[f"{module}.{param}"] = [f"{module}.{name}"]


def _glm_moe_dsa_attention1_mappings(mappings: dict[str, list[str]], module: str, config: GlmMoeDsaConfig) -> None:
    names = ["kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight"]
    if config.q_lora_rank is None:
        names.append("q_proj.weight")
    else:
        names += ["q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"]
    if config.attention_bias:
        names += ["kv_a_proj_with_mqa.bias", "o_proj.bias"]
        if config.q_lora_rank is not None:
            names.append("q_a_proj.bias")
    for name in names:
        # Projections are flat parameters (q_a_proj.weight -> q_a_proj_weight); the norms are RMSNorm modules.
        param = name if "_layernorm" in name else name.replace(".", "_")
        mappings[f"{module}.{param}"] = [f"{module}.{name}"]


def _glm_moe_dsa_mlp_mappings(mappings: dict[str, list[str]], module: str, config: GlmMoeDsaConfig) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def _glm_moe_dsa_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: GlmMoeDsaConfig, available: set[str]
) -> None:
    """Router, routed experts and shared experts of one MoE block.

    Experts load from transformers v5's fused tensors when the checkpoint has them (experts on a tensor dim), else
    from per-expert tensors: w13 interleaved per expert [gate_0, up_0, gate_1, up_1, ...], w2 grouped [down_0, ...].
    """
    mappings[module + ".gate_weight"] = [module + ".gate.weight"]
    mappings[module + ".gate_e_score_correction_bias"] = [
        module + ".gate.e_score_correction_bias"
    ]
    # Per-expert checkpoint names relative to the MoE module; {e} is the expert index.
    gate, up, down = "experts.{e}.gate_proj.weight", "experts.{e}.up_proj.weight", "experts.{e}.down_proj.weight"
    num_experts = config.n_routed_experts
    if module + ".experts.gate_up_proj" in available:
        mappings[module + ".experts_w13_weight"] = [module + ".experts.gate_up_proj"]
        mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]
    else:
        mappings[module + ".experts_w13_weight"] = [
            module + "." + name.format(e=e) for e in range(num_experts) for name in (gate, up)
        ]
        mappings[module + ".experts_w2_weight"] = [module + "." + down.format(e=e) for e in range(num_experts)]
    _glm_moe_dsa_mlp_mappings(mappings, module + ".shared_experts", config)


def checkpoint_mappings(config: GlmMoeDsaConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block in ("dense", "sparse"):
            _glm_moe_dsa_attention0_mappings(mappings, prefix + ".self_attn", config)
        else:
            _glm_moe_dsa_attention1_mappings(mappings, prefix + ".self_attn", config)
        if block in ("dense", "dense_shared"):
            _glm_moe_dsa_mlp_mappings(mappings, prefix + ".mlp", config)
        else:
            _glm_moe_dsa_sparse_moe_block_mappings(mappings, prefix + ".mlp", config, available)
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
