"""The shape of a model, from its ``config.json`` and from a compiled spec, so that ``modelgen new`` picks its base
by structure (layer kinds, MLP kind, norms, MoE, MLA, parallel residual) rather than by ``model_type`` alone.

A config does not name its structure; it is inferred from the keys families use for it (``kv_lora_rank`` -> MLA,
an expert count -> MoE, ``layer_norm_eps`` -> LayerNorm, ``hidden_act: gelu`` -> a non-gated MLP). Each inference
is a guess and carries the key it came from, so the draft's TODO can say why it thinks so. A spec's structure is
read off its IR (``ModelIR.kinds``, its norm classes, its blocks' ``parallel``): that part is exact.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Config keys of state-space mixers (Mamba-1/-2 and the hybrids built on them: Jamba, Bamba, Falcon-H1,
# Nemotron-H, Zamba2): the `mamba2` and `mamba` layer kinds implement them.
SSM_KEYS = ("ssm_state_size", "state_size", "conv_kernel", "mamba_d_state", "mamba_d_conv", "mamba_expand",
            "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_chunk_size", "time_step_rank",
            "time_step_min", "time_step_max", "time_step_floor", "time_step_limit", "ssm_cfg")
SSM_PREFIXES = ("mamba_", "time_step_", "ssm_")
# Keys only a Mamba-2 mixer has (heads of head_dim over n_groups of B/C, the SSD scan's chunk): transformers'
# Mamba2Config, BambaConfig, NemotronHConfig, FalconH1Config, Zamba2Config. A state-space config without any is Mamba-1
# (MambaConfig, JambaConfig: time_step_rank, d_state over every channel).
MAMBA2_KEYS = ("n_groups", "mamba_n_groups", "mamba_n_heads", "mamba_num_heads", "mamba_d_head", "mamba_head_dim",
               "chunk_size", "mamba_chunk_size")
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# Config keys that switch one feature between them: their TODOs share one line in a draft (one decision each).
FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    "sliding window": ("sliding_window", "use_sliding_window", "max_window_layers", "sliding_window_pattern",
                       "layer_types"),
    "NoPE layers (no rotary embedding)": ("no_rope_layers", "no_rope_layer_interval", "nope_layer_interval"),
    "muP multipliers": ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"),
    "mixture of experts": EXPERT_COUNT_KEYS + ("num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                                              "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef",
                                              "output_router_logits", "moe_topk", "num_shared_experts"),
    "projection biases": ("attention_bias", "mlp_bias", "use_bias", "qkv_bias", "use_qkv_bias"),
}
# A spec field -> other config keys transformers uses for the same value, bound by `new` when the config has none
# of the field's own keys: the expert width is intermediate_size where no dense MLP has it (Mixtral, OLMoE,
# Granite-MoE); a norm's epsilon is spelled per norm kind (a LayerNorm-vs-RMSNorm difference is a structure TODO).
HF_ALIASES: dict[str, tuple[str, ...]] = {
    "moe_intermediate_size": ("intermediate_size",),
    "rms_norm_eps": ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"),
    "layer_norm_eps": ("rms_norm_eps", "layer_norm_epsilon", "norm_epsilon"),
}
GATED_ACTS = {"silu", "swish", "swiglu"}
UNGATED_ACTS = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "relu", "relu2", "quick_gelu"}
# What each kind of difference costs a candidate base (added to draft.score_candidates' config-key score, whose
# range is about 0-30 without a served architecture): a missing or extra layer kind is a different model;
# a norm or residual layout is one spec field.
KIND_COST, MLP_COST, NORM_COST, PARALLEL_COST = 10.0, 8.0, 4.0, 4.0


@dataclass
class Structure:
    kinds: set[str]  # layer kinds: gqa, mla, moe, gated_deltanet, gated, ungated, ssm
    norm: str | None  # "RMSNorm" | "LayerNorm"; None: not known
    parallel: bool | None  # attention and MLP on the same input; None: not known
    why: dict[str, str] = field(default_factory=dict)  # feature -> the config key (and value) it was guessed from


def _present(config: dict[str, Any], key: str) -> bool:
    return config.get(key) is not None


def _get(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def ssm_keys(config: dict[str, Any]) -> list[str]:
    """The config's keys that describe a state-space mixer (empty for a transformer)."""
    return sorted(k for k in config if _present(config, k) and (k in SSM_KEYS or k.startswith(SSM_PREFIXES)))


def _activation(config: dict[str, Any]) -> tuple[str, str] | None:
    for key in ("hidden_act", "hidden_activation", "activation_function", "ffn_config.ffn_act_fn.name"):
        value = _get(config, key)
        if isinstance(value, str):
            return key, value
    return None


def config_structure(config: dict[str, Any]) -> Structure:
    """The structure ``config`` suggests (each feature a guess, its source in ``why``)."""
    kinds, why = {"gqa"}, {}
    model_type = str(config.get("model_type") or "").lower()
    if _present(config, "kv_lora_rank"):
        kinds = {"mla"}
        why["mla"] = "kv_lora_rank"
    layer_types = config.get("layer_types") if isinstance(config.get("layer_types"), list) else []
    if _present(config, "linear_num_value_heads") or "linear_attention" in layer_types:
        kinds.add("gated_deltanet")
        why["gated_deltanet"] = "linear_num_value_heads" if _present(config, "linear_num_value_heads") \
            else "layer_types"
    # MiniMax's lightning attention writes "linear_attention" layer types too, with a prefill block_size and none of
    # Gated DeltaNet's linear_* sizes
    if why.get("gated_deltanet") == "layer_types" and _present(config, "block_size"):
        kinds.discard("gated_deltanet")
        kinds.add("lightning_attention")
        why["lightning_attention"] = why.pop("gated_deltanet") + " + block_size"
    ssm = ssm_keys(config)
    if ssm:
        kind = "mamba2" if any(_present(config, k) for k in MAMBA2_KEYS) else "mamba"
        kinds.add(kind)
        why[kind] = ", ".join(ssm[:4])
    experts = next(((k, _get(config, k)) for k in EXPERT_COUNT_KEYS + ("ffn_config.moe_num_experts",)
                    if isinstance(_get(config, k), int) and _get(config, k) > 1), None)
    if experts:
        kinds.add("moe")
        why["moe"] = f"{experts[0]} = {experts[1]}"
    act = _activation(config)
    # A MoE model's dense MLP (if any) is not told apart from its experts here; the MLP kind is guessed for dense
    # models only. Gemma's GELU is gated (gate_proj * gelu), so the family overrides the activation.
    if act and not experts:
        key, value = act
        if value in GATED_ACTS or "gemma" in model_type:
            kinds.add("gated")
            why["gated"] = f"{key} = {value}"
        elif value in UNGATED_ACTS:
            kinds.add("ungated")
            why["ungated"] = f"{key} = {value}"
    elif not experts:
        kinds.add("gated")
    norm = None
    if _present(config, "rms_norm_eps") or config.get("rms_norm") is True:
        norm = "RMSNorm"
        why["norm"] = "rms_norm_eps" if _present(config, "rms_norm_eps") else "rms_norm"
    else:
        eps = next((k for k in ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon") if _present(config, k)), None)
        if eps:
            norm = "LayerNorm"
            why["norm"] = eps
    parallel = next(((k, config[k]) for k in ("use_parallel_residual", "parallel_attn") if k in config), None)
    if parallel:
        why["parallel"] = f"{parallel[0]} = {parallel[1]}"
    return Structure(kinds, norm, bool(parallel[1]) if parallel else None, why)


def spec_structure(ir) -> Structure:
    """The structure a compiled spec generates (exact: read off its IR)."""
    norms = {n for n in ir.norm_classes if n in ("RMSNorm", "LayerNorm")}
    # parallel: True when every block is, False when none is, None when the config decides (StableLM's
    # use_parallel_residual): such a base fits either residual layout.
    parallel = True if all(b.parallel.always for b in ir.blocks) else \
        False if all(b.parallel.never for b in ir.blocks) else None
    return Structure(set(ir.kinds), norms.pop() if len(norms) == 1 else None, parallel)


def differences(want: Structure, have: Structure) -> list[tuple[float, str]]:
    """(cost, one line) for each way a base's structure ``have`` differs from the config's ``want``."""
    out = []
    mlp = {"gated", "ungated"}
    for kind in sorted((want.kinds ^ have.kinds) - mlp):
        if kind in want.kinds:
            out.append((KIND_COST, f"the config has a {kind} layer ({want.why.get(kind, 'guessed')}); the base has none"))
        else:
            out.append((KIND_COST, f"the base has a {kind} layer the config does not suggest"))
    want_mlp, have_mlp = want.kinds & mlp, have.kinds & mlp
    if want_mlp and not want_mlp & have_mlp:
        kind = want_mlp.pop()
        out.append((MLP_COST, f"the config suggests a {kind} MLP ({want.why.get(kind, 'guessed')}); the base's MLP is "
                              + (", ".join(sorted(have_mlp)) or "its experts only")))
    if want.norm and have.norm and want.norm != have.norm:
        out.append((NORM_COST, f"the config suggests {want.norm} ({want.why['norm']}); the base uses {have.norm}"))
    if want.parallel is not None and have.parallel is not None and want.parallel != have.parallel:
        out.append((PARALLEL_COST, f"the config has {want.why['parallel']}; the base's residual is "
                                   + ("parallel" if have.parallel else "serial")))
    return out


# Config keys whose use `new` writes when transformers' modeling file of the family shows that use (a regex over its
# text): key -> (pattern, the spec's field type, the top-level spec entries using it). Read from the reference,
# so no TODO; absent the pattern, the key stays a TODO.
REFERENCE_USES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # CohereForCausalLM / Cohere2ForCausalLM: logits = logits * self.logit_scale
    "logit_scale": (r"logits\s*=\s*logits\s*\*\s*self\.logit_scale", "float",
                    {"lm_head": {"divide_by": "1.0 / logit_scale"}}),
}


def modeling_source(model_type: str) -> tuple[str, str] | None:
    """(text, display path) of the installed transformers' ``modeling_<model_type>.py``, or None. The file is read
    as text, never imported (a config's model_type must not pick code to run)."""
    import importlib.util
    import re

    if not re.fullmatch(r"[a-z][a-z0-9_]*", model_type):
        return None
    found = importlib.util.find_spec("transformers")
    if found is None or found.origin is None:
        return None
    path = Path(found.origin).parent / "models" / model_type / f"modeling_{model_type}.py"
    try:
        return path.read_text(encoding="utf-8"), f"transformers/models/{model_type}/modeling_{model_type}.py"
    except OSError:
        return None


def reference_uses(model_type: str, keys: set[str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """The :data:`REFERENCE_USES` among ``keys`` that the family's modeling file shows: key -> (type, entries, the
    file)."""
    import re

    source = modeling_source(model_type)
    if source is None:
        return {}
    text, where = source
    return {k: (ftype, entries, where) for k, (pattern, ftype, entries) in REFERENCE_USES.items()
            if k in keys and re.search(pattern, text)}


def modeling_rope_style(model_type: str) -> tuple[str, str] | None:
    """(RoPE style, where it was read) from the installed transformers' ``modeling_<model_type>.py``:
    ``rotate_half`` slicing ``x[..., 0::2]`` / ``x[..., 1::2]`` rotates pairs (2i, 2i+1), ``pairwise``; slicing at
    ``x.shape[-1] // 2`` rotates halves, ``rotate_half``. None when the file or the function is not there."""
    import re

    source = modeling_source(model_type)
    if source is None:
        return None
    text, path = source
    at = text.find("def rotate_half(")
    if at < 0:
        return None
    body = text[at:at + 600].split("\n\n")[0]
    where = f"{path} rotate_half"
    if re.search(r"x\[\.\.\., *0?::2\]", body) and re.search(r"x\[\.\.\., *1::2\]", body):
        return "pairwise", where
    if "x.shape[-1] // 2" in body:
        return "rotate_half", where
    return None
