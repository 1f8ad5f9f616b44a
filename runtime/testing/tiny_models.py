"""Tiny random transformers checkpoints of any architecture, for ``modelgen verify`` and the spec parity tests.

``tiny_config(architecture)`` builds the architecture's transformers config with small sizes chosen so that every
feature a spec usually reads is exercised: grouped-query attention (4 query heads over 2 KV heads), several layers
(4), every layer kind of the schedule (transformers' own defaults of ``layer_types`` / ``mlp_only_layers`` /
``first_k_dense_replace`` over 4 layers give hybrid, dense and sparse layers), sliding windows and sparse-attention
top-k smaller than the verify prompt (so they actually drop keys), MoE with more experts than the top-k, MLA with a
low-rank query. Only fields the config class accepts are passed (its ``__init__`` signature), so one table serves
every family; multimodal ``*ForConditionalGeneration`` wrappers get the same text sizes and a one-layer vision tower.

``make_tiny_checkpoint`` saves a random model with ``save_pretrained`` and returns it in fp32. Parameters that
transformers initialises to a constant (norm weights, biases, correction biases, attention sinks, ``dt_bias``) get
noise added, so a dropped bias or a norm applied as ``w`` instead of ``1 + w`` moves the logits visibly.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

# HF config field -> tiny value; applied where the config class takes the field. Why each value:
TINY_SIZES: dict[str, Any] = {
    "vocab_size": 160, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 4,  # several layers: hybrid schedules (3 linear + 1 full), dense-then-MoE, alternations
    "num_attention_heads": 4, "num_key_value_heads": 2,  # GQA (2 query heads per KV head)
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    # MoE: more experts than the top-k, a dense first layer / a dense layer in the middle where the family has one
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "num_experts": 8, "num_local_experts": 4,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
    "first_k_dense_replace": 1, "mlp_only_layers": [1],
    # MLA (DeepSeek): a low-rank query, decoupled RoPE key, value width different from the query's
    "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
    # Gated DeltaNet (Qwen3-Next / Qwen3.5)
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    # LFM2: short-conv layers around one full-attention layer (Lfm2Config derives layer_types from it; its default
    # makes every layer attention, which would leave the conv kind untested)
    "full_attn_idxs": [1],
    # MiniMax lightning attention: prefill blocks shorter than the verify prompt, so several blocks chain their state
    "block_size": 8,
    # windows and sparse top-k below the verify prompt's length (PROMPT_LENGTH), so keys are really dropped
    "sliding_window": 8, "index_n_heads": 8, "index_head_dim": 16, "index_topk": 16,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": False,
    # Llama 4: specs/llama4.yaml refuses chunked attention (requires:) for now, so its tiny model is unchunked (NoPE
    # layers, QK norm and temperature tuning still on); MoE on every 2nd layer (1 and 3), dense layers 0 and 2
    "interleave_moe_layer_step": 2, "attention_chunk_size": None,
    "attn_layer_indices": [1],  # Bamba: attention at layer 1, Mamba-2 mixers around it
    # Nemotron-H: a Mamba-2 mixer, an MoE layer, attention, an MLP (NemotronHConfig's own default order); its shared
    # expert's width (default 7688) tiny too
    "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"],
    "moe_shared_expert_intermediate_size": 48,
    # Mamba-2 mixers (Mamba2, Bamba, Nemotron-H spell them differently): 8 heads of 16 (= expand 2 * hidden 64) over 2
    # groups of B / C, a state of 16, chunks of 8 so the verify prompt spans several scan chunks
    "num_heads": 8, "mamba_n_heads": 8, "mamba_num_heads": 8, "mamba_d_head": 16, "mamba_head_dim": 16,
    "state_size": 16, "mamba_d_state": 16, "ssm_state_size": 16, "n_groups": 2, "mamba_n_groups": 2,
    "chunk_size": 8, "mamba_chunk_size": 8,
    "mamba_d_ssm": 128,  # Falcon-H1: the mixer's width, 8 heads of 16 (its default 1024 fits no tiny head count)
    # Jamba: its default attention period (8) puts no attention layer in 4 layers; 3 / 1 gives mamba, attention,
    # mamba, mamba, and experts every 2nd layer from 1 give an attention+MoE and a mamba+MoE layer
    "attn_layer_period": 3, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
}
# A one-layer vision tower for multimodal wrappers (only its shapes matter: the text model ignores it).
# num_heads (Qwen vision) and num_attention_heads (SigLIP, Gemma 3): each config takes the name it knows.
TINY_VISION: dict[str, Any] = dict(depth=1, num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_heads=2,
                                   num_attention_heads=2, patch_size=4, temporal_patch_size=1, spatial_merge_size=1)
PROMPT_LENGTH = 24
# Optional features a spec may read, all switched on in verify's second tiny config ("+features"): off in
# transformers' defaults, so a spec that ignores one (or applies it in the wrong place: OLMoE's clip_qkv before
# the QK norm) passes the first config and fails this one. Values chosen to bite in a tiny random model, whose
# q/k/v entries are ~0.16 (std 0.02 weights over 64 inputs), attention scores ~0.03 and logits ~0.16.
FEATURES: dict[str, Any] = {
    "clip_qkv": 0.1,  # below the q/k/v spread: many entries are clamped
    "attn_logit_softcapping": 0.02, "final_logit_softcapping": 0.1,  # near the scores' / logits' size: tanh curves
    "attention_bias": True, "mlp_bias": True, "qkv_bias": True, "use_qkv_bias": True, "use_qk_norm": True,
    "use_sliding_window": True,  # with TINY_SIZES' sliding_window below the prompt length
    "partial_rotary_factor": 0.5,
    "logit_scale": 0.5, "embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.3,
    "logits_scaling": 2.0,
    # MiniMax residual joins (residual_scale): every alpha / beta away from 1, each its own value
    "full_attn_alpha_factor": 0.7, "full_attn_beta_factor": 1.3, "linear_attn_alpha_factor": 1.2,
    "linear_attn_beta_factor": 0.6, "mlp_alpha_factor": 0.9, "mlp_beta_factor": 1.4,
    "mamba_proj_bias": True,  # Jamba: in_proj / out_proj biases of the Mamba mixers
    "attention_chunk_size": 8,  # Llama 4 chunked attention: chunks shorter than the verify prompt
    "alibi": True,  # Falcon's ALiBi position bias in place of RoPE
    # Falcon-H1: the gated norm and out_proj's bias on, every muP multiplier away from 1, each its own value
    "mamba_rms_norm": True, "projectors_bias": True, "attention_in_multiplier": 0.8, "attention_out_multiplier": 1.3,
    "ssm_in_multiplier": 1.2, "ssm_out_multiplier": 0.7, "key_multiplier": 1.5, "lm_head_multiplier": 0.6,
    "ssm_multipliers": [0.9, 1.1, 1.2, 0.8, 1.3], "mlp_multipliers": [1.2, 0.75],
}
# RoPE scaling (the spec's rope_scaling field): linear position interpolation, merged into the config's own
# rope_parameters so its rope_theta / mrope_section / partial factor stay as they were.
ROPE_SCALING = {"rope_type": "linear", "factor": 2.0}
# Nested config values transformers' own model needs to run at all, merged under what the caller sets (key by key):
# transformers 5.25's DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig does not declare, and
# clamps with clip_qkv None (torch.clamp refuses two Nones), so a tiny DBRX gets a theta and a clip far above its
# q/k/v values (no entry is clamped; the clip itself is tested with binding values in tests/test_parity_dbrx.py).
REFERENCE_NEEDS: dict[str, dict[str, dict[str, Any]]] = {
    "DbrxForCausalLM": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 1000.0}},
}
# Per-architecture tiny values where a shared TINY_SIZES key means something else to the family (applied before the
# caller's overrides). Zamba2: layers_block_type names hybrid layers (not Nemotron-H's kinds): hybrid layers 1, 2 and
# 4 over two shared-block copies (copy 0 at depths 1 and 4, so one copy serves two depths with two K/V caches); a
# small adapter rank and SSM state; 8 Mamba heads of 16 (= expand 2 * hidden 64).
ARCH_SIZES: dict[str, dict[str, Any]] = {
    "Zamba2ForCausalLM": dict(
        layers_block_type=["linear_attention", "hybrid", "hybrid", "linear_attention", "hybrid"], num_hidden_layers=5,
        num_mem_blocks=2, adapter_rank=8, mamba_d_state=16, n_mamba_heads=8, mamba_ngroups=2,
    ),
}
# Sizes every spec must take; the other TINY_SIZES entries are features a spec may refuse (``without``).
CORE_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings")


def _accepted(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(config_cls.__init__).parameters
    out = {k: v for k, v in values.items() if k in params}
    if "qk_rope_head_dim" in params:
        # MLA: transformers derives head_dim (= qk_rope_head_dim, the RoPE width) itself, and its attention repeats
        # K/V by heads // num_key_value_heads over latent-expanded heads, so K/V heads must equal the query heads.
        out.pop("head_dim", None)
        out.pop("num_key_value_heads", None)
    return out


# Text configs whose rotary embedding splits the frequencies by mrope_section even when the config has none
# (transformers' default [16, 24, 24] sums to 64 = head_dim / 2 at head_dim 128): Qwen2-VL. Qwen3-VL / Qwen3.5 cope
# with an absent one, so they are left as transformers writes them.
MROPE_REQUIRED = frozenset({"qwen2_vl_text"})


def _fit_mrope_sections(text_cls: type, text: dict[str, Any]) -> None:
    """Sections of a tiny head_dim (temporal, height, width summing to head_dim / 2) for :data:`MROPE_REQUIRED`
    configs, unless the caller gives ``rope_parameters``."""
    if getattr(text_cls, "model_type", None) not in MROPE_REQUIRED or "rope_parameters" in text:
        return
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    third = head_dim // 2 // 3
    text["rope_parameters"] = {"rope_type": "default", "mrope_section": [head_dim // 2 - 2 * third, third, third]}


def config_class(architecture: str) -> tuple[type, type]:
    """(model class, config class) of a transformers architecture name, or LookupError naming it."""
    import transformers

    model_cls = getattr(transformers, architecture, None)
    if model_cls is None:
        raise LookupError(f"transformers {transformers.__version__} has no architecture {architecture!r}")
    return model_cls, model_cls.config_class


def _apply_aliases(config_cls: type, kwargs: dict[str, Any], sizes: dict[str, Any],
                   aliases: dict[str, str]) -> None:
    """Set each aliased config key (dotted = nested: DBRX's ``ffn_config.ffn_hidden_size``) to its tiny size, where
    the config class takes the key's top level and the table's own name did not already set it."""
    params = inspect.signature(config_cls.__init__).parameters
    for key, size in aliases.items():
        parts = key.split(".")
        if size not in sizes or parts[0] not in params or (len(parts) == 1 and key in kwargs):
            continue
        node = kwargs
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # the key's parent is a value, not a mapping: no place for the size
                break
        else:
            node.setdefault(parts[-1], sizes[size])


def tiny_config(architecture: str, without: tuple[str, ...] = (), aliases: dict[str, str] | None = None,
                **overrides: Any):
    """The architecture's transformers config at tiny sizes (``overrides``: extra or replacement config kwargs; for a
    multimodal wrapper they apply to its ``text_config``; ``without``: tiny values left at transformers' default, for
    a feature the spec refuses, e.g. Mixtral's ``sliding_window``; ``aliases``: config key -> :data:`TINY_SIZES`
    name, for a family that spells a size its own way, e.g. ``{"d_model": "hidden_size"}``, so that its model is
    tiny too instead of transformers' default size)."""
    _, cfg_cls = config_class(architecture)
    sizes = {k: v for k, v in TINY_SIZES.items() if k not in without}
    sub = getattr(cfg_cls, "sub_configs", None) or {}
    if "text_config" in sub:
        text = _accepted(sub["text_config"], {**sizes, **overrides})
        _apply_aliases(sub["text_config"], text, sizes, aliases or {})
        text.update({k: v for k, v in overrides.items() if k not in text})
        _fit_mrope_sections(sub["text_config"], text)
        kwargs: dict[str, Any] = {"text_config": text}
        if "vision_config" in sub:
            vision = dict(TINY_VISION, out_hidden_size=text.get("hidden_size", TINY_SIZES["hidden_size"]))
            kwargs["vision_config"] = _accepted(sub["vision_config"], vision)
        return cfg_cls(**_accepted(cfg_cls, kwargs), **({"tie_word_embeddings": False}
                                                         if "tie_word_embeddings" not in overrides else {}))
    kwargs = _accepted(cfg_cls, sizes)
    _apply_aliases(cfg_cls, kwargs, sizes, aliases or {})
    kwargs.update(ARCH_SIZES.get(architecture, {}))
    kwargs.update(overrides)
    for key, needed in REFERENCE_NEEDS.get(architecture, {}).items():
        node = kwargs.setdefault(key, {})
        if isinstance(node, dict):
            kwargs[key] = {**needed, **node}
    return cfg_cls(**kwargs)


def tiny_features(architecture: str, names: set[str], without: tuple[str, ...] = (),
                  aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """The :data:`FEATURES` among ``names`` (config keys a spec reads; ``"rope_scaling"``: it reads a RoPE scaling)
    that the architecture's (text) config class takes, as ``tiny_config`` overrides."""
    _, cfg_cls = config_class(architecture)
    sub = getattr(cfg_cls, "sub_configs", None) or {}
    text_cls = sub.get("text_config", cfg_cls)
    params = inspect.signature(text_cls.__init__).parameters
    out = {k: v for k, v in FEATURES.items() if k in names and k in params}
    if "rope_scaling" in names and "rope_parameters" in params:
        base = tiny_config(architecture, without, aliases).get_text_config().to_dict().get("rope_parameters")
        # one table (not Gemma 3's per-layer-type pair) of plain RoPE (a family whose default is already a
        # scaling, GPT-OSS's yarn, is tested with that one)
        if isinstance(base, dict) and base.get("rope_type") == "default":
            out["rope_parameters"] = {**base, **ROPE_SCALING}
    return out


def _perturb(model: torch.nn.Module, scale: float = 0.2) -> None:
    """Noise on every tensor transformers initialises to one constant (norm weights, biases, sinks, dt_bias,
    correction biases): a model whose forward ignores one of them then differs visibly from transformers'."""
    with torch.no_grad():
        tensors = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers()
                                                     if "correction_bias" in n]
        for _, t in tensors:
            if t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all()):
                t.add_(torch.randn_like(t) * scale)
            elif t.is_floating_point() and t.numel() == 1:
                t.add_(torch.randn_like(t) * scale)


def make_tiny_checkpoint(path: str | Path, architecture: str, seed: int = 0, fused_experts: bool = False,
                         without: tuple[str, ...] = (), aliases: dict[str, str] | None = None, **overrides: Any):
    """Save a tiny random ``architecture`` model to ``path`` (``fused_experts``: transformers v5's fused expert
    tensors instead of per-expert ones); returns the fp32 transformers model in eval mode."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" on every tiny save
    model_cls, _ = config_class(architecture)
    config = tiny_config(architecture, without, aliases, **overrides)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    _perturb(model)
    model.save_pretrained(path, save_original_format=not fused_experts)
    return model


def tiny_prompt(vocab_size: int = TINY_SIZES["vocab_size"], length: int = PROMPT_LENGTH, seed: int = 7) -> list[int]:
    """A fixed prompt of random ids above the special tokens (0-2)."""
    g = torch.Generator().manual_seed(seed)
    return [int(t) for t in torch.randint(3, vocab_size, (length,), generator=g)]
