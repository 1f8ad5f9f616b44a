# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/zamba2.yaml --target neuron
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Checkpoint mappings of Zamba2ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Zamba2Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = ((".mamba_decoder.", "."),)


def _zamba2_mixer_mappings(mappings: dict[str, list[str]], module: str, config: Zamba2Config) -> None:
    names = [("in_proj_weight", "in_proj.weight"), ("conv1d_weight", "conv1d.weight"), ("dt_bias", "dt_bias"),
             ("A_log", "A_log"), ("D", "D"), ("norm_weight", "norm.weight"), ("out_proj_weight", "out_proj.weight")]
    names.append(("conv1d_bias", "conv1d.bias"))
    if config.add_bias_linear:
        names += [("in_proj_bias", "in_proj.bias"), ("out_proj_bias", "out_proj.bias")]
    for param, key in names:
        mappings[f"{module}.{param}"] = [f"{module}.{key}"]


def _zamba2_shared_block_mappings(
    mappings: dict[str, list[str]], module: str, config: Zamba2Config, copy: int, num_uses: int
) -> None:
    """The checkpoint keys of one copy of the shared block, under the name of its first user (``module``)."""
    attn, mlp = module + ".self_attn", module + ".feed_forward"
    mappings[module + ".input_layernorm.weight"] = [module + ".input_layernorm.weight"]
    mappings[module + ".pre_ff_layernorm.weight"] = [module + ".pre_ff_layernorm.weight"]
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        mappings[f"{attn}.{proj}_weight"] = [f"{attn}.{proj}.weight"]
    for proj in ("gate_up_proj", "down_proj"):
        mappings[f"{mlp}.{proj}_weight"] = [f"{mlp}.{proj}.weight"]
        if config.add_bias_linear:
            mappings[f"{mlp}.{proj}_bias"] = [f"{mlp}.{proj}.bias"]
    cycle = config.num_mem_blocks
    uses = [k for k in range(num_uses) if k % cycle == copy % cycle]
    lists = [(mlp, "gate_up_proj_adapter_list")]
    if config.use_shared_attention_adapter:
        lists += [(attn, name) for name in ("linear_q_adapter_list", "linear_k_adapter_list", "linear_v_adapter_list")]
    for parent, name in lists:
        for k in uses:
            mappings[f"{parent}.{name}.{k}.a_weight"] = [f"{parent}.{name}.{k}.0.weight"]
            mappings[f"{parent}.{name}.{k}.b_weight"] = [f"{parent}.{name}.{k}.1.weight"]


def checkpoint_mappings(config: Zamba2Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(len(config.schedule)):
        prefix = "model.layers." + str(i)
        _zamba2_mixer_mappings(mappings, prefix + ".mamba", config)
        mappings[prefix + ".input_layernorm.weight"] = [prefix + ".input_layernorm.weight"]
    # The shared block: each copy under its first user's name; every using layer's output projection.
    uses = [i for i in range(len(config.schedule)) if config.layer_block(i) in ["hybrid"]]
    copies = config.num_mem_blocks if config.tie_word_embeddings else len(uses)
    for use, i in enumerate(uses):
        prefix = "model.layers." + str(i)
        mappings[prefix + ".linear_weight"] = [prefix + ".linear.weight"]
        if use < copies:
            _zamba2_shared_block_mappings(mappings, prefix + ".shared_transformer", config, use, len(uses))
    mappings["model.final_layernorm.weight"] = ["model.final_layernorm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
