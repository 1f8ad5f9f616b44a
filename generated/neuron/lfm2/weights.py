# ==================================================================================================================
# GENERATED FROM specs/lfm2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/lfm2.yaml --target neuron
# source hash (spec + templates + generator): 08a06d2c1a1c3232
# ==================================================================================================================
"""Checkpoint mappings of Lfm2ForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from .config import Lfm2Config

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    (".self_attn.out_proj.", ".self_attn.o_proj."),
    (".feed_forward.w1.", ".feed_forward.gate_proj."),
    (".feed_forward.w3.", ".feed_forward.up_proj."),
    (".feed_forward.w2.", ".feed_forward.down_proj."),
)


def _lfm2_attention_mappings(mappings: dict[str, list[str]], module: str, config: Lfm2Config) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]
    for norm in ("q_layernorm", "k_layernorm"):
        mappings[f"{module}.{norm}.weight"] = [f"{module}.{norm}.weight"]


def _lfm2_short_conv_mappings(mappings: dict[str, list[str]], module: str, config: Lfm2Config) -> None:
    names = [("in_proj", "weight"), ("conv", "weight"), ("out_proj", "weight")]
    if config.conv_bias:
        names += [("in_proj", "bias"), ("conv", "bias"), ("out_proj", "bias")]
    for part, kind in names:
        mappings[f"{module}.{part}_{kind}"] = [f"{module}.{part}.{kind}"]


def _lfm2_mlp_mappings(mappings: dict[str, list[str]], module: str, config: Lfm2Config) -> None:
    mappings[module + ".gate_proj_weight"] = [module + ".gate_proj.weight"]
    mappings[module + ".up_proj_weight"] = [module + ".up_proj.weight"]
    mappings[module + ".down_proj_weight"] = [module + ".down_proj.weight"]


def checkpoint_mappings(config: Lfm2Config) -> dict[str, list[str]]:
    mappings: dict[str, list[str]] = {}
    mappings["model.embed_tokens_weight"] = ["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "model.layers." + str(i)
        block = config.layer_block(i)
        if block == "attention":
            _lfm2_attention_mappings(mappings, prefix + ".self_attn", config)
        else:
            _lfm2_short_conv_mappings(mappings, prefix + ".conv", config)
        _lfm2_mlp_mappings(mappings, prefix + ".feed_forward", config)
        for norm in ("operator_norm", "ffn_norm"):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["model.embedding_norm.weight"] = ["model.embedding_norm.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["model.embed_tokens.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return mappings
