"""Names a spec may not give to what it names: each would silently replace something the generated code relies on.

A spec's identifiers become Python names in two places, and each has its own owners:
  * **config fields** (``config:``, ``derived:``) are fields of the generated ``<Prefix>Config`` dataclass and locals
    of its ``from_hf_config``: a field called ``from_hf_config`` or ``CONFIG_KEYS_READ`` replaces the class's own
    member, one called ``len`` or ``int`` shadows the builtin in the expressions that follow it, one called ``cfg``
    the dict being read;
  * **module names** (norms, attention and MLP modules, the embedding, the LM head, the backbone prefix, sub-modules
    of a block kind) are attributes of ``nn.Module`` subclasses: ``forward``, ``training`` or ``_parameters`` would
    replace torch's own, ``compute_logits`` or ``load_weights`` a method the engine calls.
Both used to build and then crash (or misbehave) at run time; codegen/lower.py refuses them at build with a located
error naming the clash. :data:`NN_MODULE_ATTRIBUTES` is written out (the compiler does not import torch);
``tests/test_spec_identifiers.py`` checks it still covers ``dir(torch.nn.Module())``.
"""
from __future__ import annotations

import builtins

PYTHON_BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_"))

# Names the generated config module binds itself (imports, the class's own members, the neuron base class's).
CONFIG_CLASS_NAMES = frozenset({
    "cfg", "cls", "self", "hf_config", "i", "as_dict", "require", "ConfigError", "Any", "ClassVar", "dataclass",
    "field", "ARCHITECTURES", "CONFIG_KEYS_READ", "CONFIG_KEYS_IGNORED", "from_hf_config", "from_configs",
    "layer_block", "neuron_config", "NeuronModelConfig", "NeuronConfig", "config_has",
})

# Public attributes of torch.nn.Module (torch 2.x); private ones are covered by the leading-underscore rule.
NN_MODULE_ATTRIBUTES = frozenset({
    "T_destination", "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children", "compile", "cpu",
    "cuda", "double", "dump_patches", "eval", "extra_repr", "float", "forward", "get_buffer", "get_extra_state",
    "get_parameter", "get_submodule", "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers",
    "named_children", "named_modules", "named_parameters", "parameters", "register_backward_hook",
    "register_buffer", "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
    "register_full_backward_pre_hook", "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
    "register_module", "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook",
    "requires_grad_", "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train",
    "training", "type", "xpu", "zero_grad",
    "smart_apply",  # set on nn.Module by transformers 5 (modeling_utils) when it first initialises a model
})

# Members the generated model classes define or the engine / loaders read on them (templates/*/model.py.j2,
# factory.py.j2, draft/mtp.py.j2; runtime/engine, runtime/loader).
GENERATED_MODULE_MEMBERS = frozenset({
    "config", "layers", "layer_idx", "layer_block", "block", "kv_spec", "get_kv_spec", "bind_kv_cache",
    "compute_logits", "load_weights", "embed_input_ids", "get_attention", "get_mlp", "get_expert_mapping",
    "forward_decode", "forward_prefill", "make_empty_intermediate_tensors", "set_aux_hidden_state_layers",
    "get_eagle3_aux_hidden_state_layers", "bind_hidden_states", "checkpoint_mappings", "checkpoint_prefix",
    "logits_processor", "packed_modules_mapping", "from_configs", "from_hf_config", "rope_table", "rope_cos_sin",
    "get_mamba_state_copy_func", "get_mamba_state_dtype_from_config", "get_mamba_state_shape_from_config",
    "CONFIG_CLASS", "MODEL_CLASS", "FACTORY_CLASS", "DRAFT_CLASS", "PACKED_MODULES_MAPPING",
})

# Names generated modules import (tests/test_spec_identifiers.py keeps the list equal to generated/'s imports): a
# class the spec's ``class_prefix`` makes (``<Prefix>Config``, ``<Prefix>Model``, a block kind's ``<Prefix>MoE``, ...)
# must not shadow one ("NeuronModel" would define NeuronModelConfig over the base class it derives from).
GENERATED_IMPORTS = frozenset({
    "Activation", "Any", "Attention", "AttentionMetadata", "Checkpoint", "CheckpointSplit", "ClassVar",
    "ColumnParallelLinear", "ConfigError", "DSAIndexer", "DraftCheckpoint", "ExpertMapping", "FusedMoE",
    "FusedMoEFactory", "GatedDeltaNet", "GeluAndMul", "GeluTanhAndMul", "GemmaRMSNorm", "HybridGatedDeltaNetModel",
    "HybridShortConvModel", "IntermediateTensors", "Iterable", "KVSpec", "LatentCacheSpec", "LayerNorm",
    "LayerSpec", "LogitsProcessor", "MLAAttention", "MLAttention", "MergedColumnParallelLinear", "NF",
    "NeuronConfig", "NeuronModelConfig", "PPMissingLayer", "PagedAttention", "ParallelLMHead", "PerHeadNorm",
    "QKVParallelLinear", "RMSNorm", "ReplicatedLinear", "RowParallelLinear", "ShardedProjectionRMSNorm",
    "ShortConv", "SiluAndMul", "StateSpec", "SupportsPP", "TopKRouter", "VllmConfig", "VocabParallelEmbedding",
    "WeightTables",
    "HybridLightningModel", "LightningAttention",  # the lightning_attention kind (MiniMax)
    "StackedHeadLayerNorm",  # Command R+'s [heads, head_dim] QK LayerNorm (gqa qk_norm.scope stacked)
    "MambaMixer", "HybridMambaModel", "AttentionFreeMambaModel",
    "AttentionFreeMamba2Model", "HybridMamba2Model", "Mamba2", "MambaMixer2",
    "ChunkedLocalAttention", "alibi_slopes", "rank_alibi_slopes",  # gqa chunk_size / alibi (Llama 4, Falcon)
    "LoRA", "PagedKV", "SharedPagedAttention", "refuse_split_modes",  # the shared_block kind (Zamba2)
    "moe_routing_function", "check_weight_on_input",  # vllm MoE routing modes (runtime/layers/moe/vllm.py)
})


# (names, why a spec may not use one) in the order they are checked; a leading underscore is refused first.
_CONFIG_RULES = (
    (CONFIG_CLASS_NAMES, "it is a name the generated config class uses itself"),
    (PYTHON_BUILTINS, "it is a Python builtin, which the generated from_hf_config would shadow"),
)
_MODULE_RULES = (
    (NN_MODULE_ATTRIBUTES, "it is an attribute of torch.nn.Module"),
    (GENERATED_MODULE_MEMBERS, "it is a member the generated model classes define or the engine calls"),
    (PYTHON_BUILTINS, "it is a Python builtin"),
)


def _clash(name: str, private: str, rules: tuple[tuple[frozenset[str], str], ...]) -> str | None:
    if name.startswith("_"):
        return f"names starting with '_' are private to {private}"
    return next((why for names, why in rules if name in names), None)


def config_name_clash(name: str) -> str | None:
    """Why ``name`` cannot be a config field, or None."""
    return _clash(name, "the generated config class", _CONFIG_RULES)


def module_name_clash(name: str) -> str | None:
    """Why ``name`` cannot be a module (an attribute of a generated ``nn.Module``), or None."""
    return _clash(name, "nn.Module and the generated classes (e.g. _parameters)", _MODULE_RULES)
