# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/dbrx.yaml --target neuron
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""Checkpoint mappings of DbrxForCausalLM (neuron): parameter name -> checkpoint key(s), as the Neuron guide's
``load_weights`` builds them. A list of several keys feeds a parameter's loader in that order."""
from __future__ import annotations

from modelgen.runtime.loader.split import CheckpointSplit, split_mappings

from .config import DbrxConfig


def _Wqkv_sizes(config: DbrxConfig) -> tuple[int, ...]:
    """Extent of each part along dim 0 of a stored `Wqkv` tensor, in storage order."""
    return (
        config.hidden_size,  # q_proj
        config.num_key_value_heads * (config.hidden_size // config.num_attention_heads),  # k_proj
        config.num_key_value_heads * (config.hidden_size // config.num_attention_heads),  # v_proj
    )


# Checkpoint modules stored already fused (spec checkpoint.split, the reverse of a fusion): each tensor of the module
# is read as its parts, which then load as if the checkpoint stored them separately (runtime/loader/split.py).
CHECKPOINT_SPLITS = (
    CheckpointSplit("Wqkv", 0, ("q_proj", "k_proj", "v_proj"), _Wqkv_sizes),
)

# Checkpoint keys dropped on purpose ("*" matches one dotted segment).
IGNORED_KEYS = ()

# Substring renames (old, new) applied to every checkpoint key before the mappings are looked up.
RENAMES = (
    ("transformer.blocks.", "transformer.layers."),
    (".norm_attn_norm.attn.", ".attn."),
    (".norm_attn_norm.norm_1.", ".norm_1."),
    (".norm_attn_norm.norm_2.", ".norm_2."),
    (".attn.out_proj.", ".attn.o_proj."),
    (".ffn.router.layer.", ".ffn.router."),
)


def _dbrx_attention_mappings(mappings: dict[str, list[str]], module: str, config: DbrxConfig) -> None:
    mappings[module + ".qkv_proj_weight"] = [
        module + ".q_proj.weight", module + ".k_proj.weight", module + ".v_proj.weight",
    ]
    mappings[module + ".o_proj_weight"] = [module + ".o_proj.weight"]


def _dbrx_sparse_moe_block_mappings(
    mappings: dict[str, list[str]], module: str, config: DbrxConfig, available: set[str]
) -> None:
    """Router, routed experts of one MoE block.

    Experts load from fused tensors (experts on a tensor dim), the only layout the family's checkpoints have.
    """
    mappings[module + ".router_weight"] = [module + ".router.weight"]
    # The family stores its experts fused only (no per-expert names).
    mappings[module + ".experts_w13_weight"] = [
        module + ".experts.mlp.w1", module + ".experts.mlp.v1"
    ]
    mappings[module + ".experts_w2_weight"] = [module + ".experts.mlp.w2"]


def checkpoint_mappings(config: DbrxConfig, available: set[str]) -> dict[str, list[str]]:
    """``available``: the checkpoint's keys after RENAMES (chooses fused vs per-expert expert tensors)."""
    mappings: dict[str, list[str]] = {}
    mappings["transformer.wte_weight"] = ["transformer.wte.weight"]
    for i in range(config.num_hidden_layers):
        prefix = "transformer.layers." + str(i)
        _dbrx_attention_mappings(mappings, prefix + ".attn", config)
        _dbrx_sparse_moe_block_mappings(mappings, prefix + ".ffn", config, available)
        for norm in ("norm_1", "norm_2"):
            mappings[f"{prefix}.{norm}.weight"] = [f"{prefix}.{norm}.weight"]
    mappings["transformer.norm_f.weight"] = ["transformer.norm_f.weight"]
    # Tied embeddings: the LM head maps to the embedding tensor and is loaded a second time, never aliased (an
    # alias made before loading would point at a stale tensor once parameters are replaced).
    if config.tie_word_embeddings:
        mappings["lm_head_weight"] = ["transformer.wte.weight"]
    else:
        mappings["lm_head_weight"] = ["lm_head.weight"]
    return split_mappings(mappings, CHECKPOINT_SPLITS)  # keys of split parts read slices of the stored tensor
