# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/nemotron_h.yaml --target neuron
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""Checkpoint mappings of NemotronHForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import NemotronHConfig

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    ("model.embeddings.", "backbone.embeddings."),
    ("model.layers.", "backbone.layers."),
    ("model.norm_f.", "backbone.norm_f."),
)


def _nemotron_hmixer_mappings(mappings: dict[str, list[str]], module: str, config: NemotronHConfig) -> None:
    names = [("in_proj_weight", "in_proj.weight"), ("conv1d_weight", "conv1d.weight"), ("dt_bias", "dt_bias"),
             ("A_log", "A_log"), ("D", "D"), ("norm_weight", "norm.weight"), ("out_proj_weight", "out_proj.weight")]
    if config.use_conv_bias:
        names.append(("conv1d_bias", "conv1d.bias"))
    if config.use_bias:
        names += [("in_proj_bias", "in_proj.bias"), ("out_proj_bias", "out_proj.bias")]
    for param, key in names:
        mappings[f"{module}.{param}"] = [f"{module}.{key}"]


def _nemotron_hattention_mappings(mappings: dict[str, list[str]], module: str, config: NemotronHConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]


def _nemotron_hmlp_mappings(mappings: dict[str, list[str]], module: str, config: NemotronHConfig) -> None:
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]
    if config.mlp_bias:
        mappings[module + ".up_proj_bias"] = [module + ".up_proj.bias"]
        mappings[module + ".down_proj_bias"] = [module + ".down_proj.bias"]


def _nemotron_hsparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: NemotronHConfig, available: set[str]
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
    up, down = "experts.{e}.up_proj.weight", "experts.{e}.down_proj.weight"  # non-gated: no gate
    num_experts = config.n_routed_experts
    if module + ".experts.up_proj" in available:
        mappings[module + ".experts_w13_weight"] = [module + ".experts.up_proj"]
        mappings[module + ".experts_w2_weight"] = [module + ".experts.down_proj"]
    else:
        mappings[module + ".experts_w13_weight"] = [
            module + "." + name.format(e=e) for e in range(num_experts) for name in (up,)
        ]
        mappings[module + ".experts_w2_weight"] = [module + "." + down.format(e=e) for e in range(num_experts)]
    _nemotron_hmlp_mappings(mappings, module + ".shared_experts", config)


def checkpoint_mappings(config: NemotronHConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["backbone.embeddings_weight"] = ["backbone.embeddings.weight"]
    for i in range(config.schedule_length):
        prefix = "backbone.layers." + str(i)
        block = config.layer_block(i)
        if block == "mamba":
            _nemotron_hmixer_mappings(mappings, prefix + ".mixer", config)
        elif block == "attention":
            _nemotron_hattention_mappings(mappings, prefix + ".mixer", config)
        elif block == "mlp":
            _nemotron_hmlp_mappings(mappings, prefix + ".mixer", config)
        else:
            _nemotron_hsparse_moe_block_mappings(mappings, prefix + ".mixer", config, available)
        mappings[prefix + ".norm.weight"] = [prefix + ".norm.weight"]
    mappings["backbone.norm_f.weight"] = ["backbone.norm_f.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
