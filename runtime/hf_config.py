"""Typed readers of HF ``config.json`` values, used by the generated ``from_hf_config`` methods.

A reader returns ``None`` when none of its keys is present (or the value is null), so the generated code can apply
the spec's default; a present value of the wrong type raises :class:`ConfigError` naming the field and key.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .config_nesting import nested_unread_keys

_MISSING = object()


class ConfigError(ValueError):
    pass


def _lookup(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def config_has(cfg: Mapping[str, Any], key: str) -> bool:
    """``key`` (dotted = nested) is present in ``cfg``, null or not: a nullable field's explicit null is a value."""
    return _lookup(cfg, key) is not _MISSING


def _first(cfg: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, Any]:
    for key in keys:
        value = _lookup(cfg, key)
        if value is not _MISSING and value is not None:
            return key, value
    return keys[0], None


_MAX_SHOWN = 200  # characters of a bad value an error shows: a 10 MB string must not become a 10 MB "one line"


def shown(value: Any) -> str:
    """``repr(value)``, cut to a few hundred characters (a huge int is described by its digit count, not
    converted: ``repr`` of a 10**5000 would itself exceed Python's conversion limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + f"... ({len(text)} characters)"


def _fail(field: str, key: str, value: Any, want: str) -> ConfigError:
    return ConfigError(f"config.json field '{key}' (spec field '{field}'): expected {want}, got {shown(value)}")


# Any integer a config gives becomes a Python int that later meets torch (shapes, indices): past int64 it can only
# overflow there, with a traceback far from the field. 1e300 is a float that ``is_integer()``; it is refused here.
MAX_CONFIG_INT = 2**63 - 1


def read_int(cfg: Mapping[str, Any], field: str, keys: Sequence[str], minimum: int | None = None) -> int | None:
    """An integer (``64.0`` accepted); with ``minimum`` (e.g. 1 for counts and sizes), smaller values are refused."""
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
        raise _fail(field, key, v, "an integer")
    if abs(v) > MAX_CONFIG_INT:
        raise _fail(field, key, v, "an integer of magnitude at most 2**63 - 1")
    if minimum is not None and v < minimum:
        raise _fail(field, key, v, f"an integer >= {minimum}")
    return int(v)


# Spec fields whose value is only meaningful above zero, whatever the architecture: an epsilon is added under a
# square root (0 gives inf/NaN on an all-zero row, a negative one NaN), the RoPE base is raised to powers and its
# log divides (0 or a negative base gives NaN/inf frequencies), Gemma's query_pre_attn_scalar is square-rooted.
# Outside these domains the model runs and prints nonsense, so they are refused by name before anything is built.
POSITIVE_FLOAT_FIELDS = frozenset({"rms_norm_eps", "layer_norm_eps", "norm_eps", "rope_theta", "query_pre_attn_scalar"})


def read_float(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> float | None:
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(field, key, v, "a number")
    if isinstance(v, int) and abs(v) > MAX_CONFIG_INT:  # float(10**400) would raise OverflowError
        raise _fail(field, key, v, "a finite number")
    if not math.isfinite(v):  # json.loads accepts NaN/Infinity; an eps or theta of NaN gives garbage silently
        raise _fail(field, key, v, "a finite number")
    if field in POSITIVE_FLOAT_FIELDS and v <= 0:
        raise _fail(field, key, v, "a number > 0")
    return float(v)


def read_bool(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> bool | None:
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise _fail(field, key, v, "true or false")
    return v


def read_str(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> str | None:
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if not isinstance(v, str):
        raise _fail(field, key, v, "a string")
    return v


def read_int_list(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> list[int] | None:
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise _fail(field, key, v, "a list of integers")
    return list(v)


def read_str_list(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> list[str] | None:
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _fail(field, key, v, "a list of strings")
    return list(v)


def read_float_list(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> list[float] | None:
    """A list of numbers; +-Infinity is a legal bound (Mamba-2's ``time_step_limit = (0.0, inf)``: JSON's
    ``Infinity``, or transformers 5's ``{"__float__": "Infinity"}``), NaN is not."""
    key, v = _first(cfg, keys)
    if v is None:
        return None
    special = {"Infinity": math.inf, "-Infinity": -math.inf}
    items = [special.get(x.get("__float__"), x) if isinstance(x, Mapping) and len(x) == 1 else x
             for x in v] if isinstance(v, (list, tuple)) else None
    if items is None or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x) for x in items):
        raise _fail(field, key, v, "a list of numbers")
    return [float(x) for x in items]


def read_rope_scaling(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> dict[str, Any] | None:
    """``rope_scaling`` (transformers v4) or ``rope_parameters`` (v5), normalised to one dict.

    v5 writes ``rope_parameters = {"rope_type": "default", "rope_theta": ...}`` even without scaling; a "default"
    type is returned as ``None`` (no scaling). v4's legacy key ``type`` is accepted for ``rope_type``.
    """
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise _fail(field, key, v, "a mapping (rope_scaling / rope_parameters)")
    out = dict(v)
    rope_type = out.pop("rope_type", None) or out.pop("type", None) or "default"
    out.pop("type", None)
    if not isinstance(rope_type, str):
        raise _fail(field, f"{key}.rope_type", rope_type, "a string (default, linear, dynamic, llama3, yarn)")
    if rope_type == "default":
        return None
    _check_rope_values(out, rope_type, field, key)
    out["rope_type"] = rope_type
    return out


# The scaling parameters runtime/ops/rope.py and ops/mla.py compute with, by the domain that keeps the frequencies
# and the attention factor finite and meaningful: factors and wavelength bounds are divided by or logged (> 0),
# DeepSeek's mscale weights may be 0 (off) but not negative or non-finite.
_ROPE_POSITIVE = ("factor", "low_freq_factor", "high_freq_factor", "attention_factor", "beta_fast", "beta_slow")
_ROPE_NON_NEGATIVE = ("mscale", "mscale_all_dim")
# Keys each type cannot compute without (transformers' rope_config_validation requires the same ones).
_ROPE_REQUIRED = {
    "linear": ("factor",), "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def _check_rope_values(scaling: Mapping[str, Any], rope_type: str, field: str, key: str) -> None:
    """ConfigError naming ``<key>.<name>`` for a missing required or out-of-domain scaling parameter."""
    for name in _ROPE_REQUIRED.get(rope_type, ()):
        if scaling.get(name) is None:
            raise ConfigError(f"config.json field '{key}' (spec field '{field}'): rope_type {rope_type!r} needs "
                              f"'{name}', which is missing")

    def number(name: str, lowest: float, strict: bool) -> None:
        value = scaling.get(name)
        if value is None:
            return
        ok = (not isinstance(value, bool) and isinstance(value, (int, float))
              and (not isinstance(value, int) or abs(value) <= MAX_CONFIG_INT) and math.isfinite(value)
              and (value > lowest if strict else value >= lowest))
        if not ok:
            raise _fail(field, f"{key}.{name}", value, f"a finite number {'>' if strict else '>='} {lowest:g}")

    for name in _ROPE_POSITIVE:
        number(name, 0, strict=True)
    for name in _ROPE_NON_NEGATIVE:
        number(name, 0, strict=False)
    original = scaling.get("original_max_position_embeddings")
    if original is not None and (isinstance(original, bool) or not isinstance(original, (int, float))
                                 or not (isinstance(original, int) or original.is_integer())
                                 or not 1 <= original <= MAX_CONFIG_INT):
        raise _fail(field, f"{key}.original_max_position_embeddings", original, "a positive integer")
    if rope_type == "llama3" and scaling["low_freq_factor"] == scaling["high_freq_factor"]:
        # the smoothing ramp divides by (high - low): equal factors give NaN frequencies
        raise _fail(field, f"{key}.high_freq_factor", scaling["high_freq_factor"],
                    "a value different from low_freq_factor")


# Counts and sizes every architecture has, where 0 or a negative value is never meaningful. Checked on the raw
# config.json before the generated reader runs (a zero head count would divide by zero there) and on the built
# config (derived values such as head_dim = hidden_size // num_attention_heads).
CORE_POSITIVE_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings",
)


# No tensor dimension, head count or context length of a real model comes near 2**31 (torch indexes many kernels
# with int32); a value past it is an attack or a typo, and would be a multi-terabyte allocation or an overflow.
MAX_CORE_SIZE = 2**31 - 1


def check_core_fields(config: Any, where: str = "config.json") -> None:
    """ConfigError naming ``where`` and the field unless each present core field is a positive integer of at most
    :data:`MAX_CORE_SIZE`."""
    for name in CORE_POSITIVE_FIELDS:
        v = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if v is None:
            continue
        if isinstance(v, float) and v.is_integer() and abs(v) <= MAX_CONFIG_INT:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where}: field '{name}' = {shown(v)}: expected a positive integer")
        if v > MAX_CORE_SIZE:
            raise ConfigError(f"{where}: field '{name}' = {shown(v)}: expected a positive integer of at most "
                              f"{MAX_CORE_SIZE} (2**31 - 1)")


def check_wrapper_fields(config: Mapping[str, Any], where: str = "config.json") -> None:
    """ConfigError naming ``where`` and the field unless the fields read before any spec's reader runs have the
    types their readers assume: ``architectures`` a list of strings (the model registry hashes them),
    ``model_type`` a string, ``torch_dtype`` / ``dtype`` a string (looked up in the dtype table)."""
    arch = config.get("architectures")
    if arch is not None and (not isinstance(arch, list) or not all(isinstance(a, str) for a in arch)):
        raise ConfigError(f"{where}: field 'architectures' = {shown(arch)}: expected a list of class-name strings")
    for name in ("model_type", "torch_dtype", "dtype"):
        v = config.get(name)
        if v is not None and not isinstance(v, str):
            raise ConfigError(f"{where}: field '{name}' = {shown(v)}: expected a string")


def require(field: str, keys: Sequence[str], value: Any) -> Any:
    if value is None:
        raise ConfigError(f"config.json has no '{keys[0]}' (spec field '{field}'), and the spec gives no default")
    return value


def as_dict(hf_config: Any) -> Mapping[str, Any]:
    """Accept a dict (parsed config.json) or a transformers PretrainedConfig."""
    if isinstance(hf_config, Mapping):
        return hf_config
    if hasattr(hf_config, "to_dict"):
        return hf_config.to_dict()
    raise TypeError(f"expected a config dict or PretrainedConfig, got {type(hf_config).__name__}")


# ------------------------------------------------------------------------------------------- unread config.json keys
# Keys of config.json that never change what an inference model computes, for every architecture: the bookkeeping and
# generation defaults of transformers' PretrainedConfig, token ids (the engine reads eos_token_id itself), the dtype
# (the engine reads it), training-only knobs (dropout, router losses and jitter, initialisation), and wrappers the
# runtime handles before any spec sees the config (text_config is lifted by CheckpointDir, quantization_config is
# checked by runtime/loader/quantization.py). Anything else a spec neither reads nor lists under `config_ignore:` is
# reported: a field the generated code does not honour may change the model's output (Granite's multipliers did).
GENERIC_CONFIG_KEYS = frozenset({
    # PretrainedConfig bookkeeping (transformers/configuration_utils.py)
    "_name_or_path", "name_or_path", "_commit_hash", "architectures", "model_type", "transformers_version",
    "auto_map", "id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "tokenizer_class", "prefix",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss",
    "pruned_heads", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
    "cross_attention_hidden_size", "tie_encoder_decoder", "task_specific_params", "_attn_implementation",
    "attn_implementation", "_attn_implementation_autoset", "_experts_implementation", "base_model_tp_plan",
    "base_model_pp_plan", "base_model_ep_plan", "use_cache", "use_return_dict", "output_router_logits",
    # dtype: the engine's default compute dtype (runtime/engine/llm.py _resolve_dtype)
    "torch_dtype", "dtype",
    # token ids: EOS is read by CheckpointDir.eos_token_ids; the others only matter to tokenization / generation
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "unk_token_id",
    # generation defaults stored in old configs (generation_config.json's job; sampling is SamplingParams)
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    # training only: dropout is off at inference, initialisation and auxiliary losses do not touch the forward
    "initializer_range", "attention_dropout", "hidden_dropout", "dropout", "embd_pdrop", "resid_pdrop", "attn_pdrop",
    "classifier_dropout", "router_aux_loss_coef", "router_z_loss_coef", "router_jitter_noise", "gradient_checkpointing",
    # handled before the spec's reader runs
    "text_config", "quantization_config",
    # weight tying: every spec that can tie reads it (lm_head.tie); listed so a spec without an LM head split is quiet
    "tie_word_embeddings",
})


class ConfigKeysWarning(UserWarning):
    """config.json holds keys the model's spec neither reads nor declares irrelevant (``config_ignore:``)."""


def unread_config_keys(config: Mapping[str, Any], read: Sequence[str], ignored: Sequence[str] = ()) -> list[str]:
    """Top-level keys of ``config`` that are not read (a dotted read key such as ``rope_parameters.rope_theta``
    counts for its first segment), not in ``ignored`` and not in :data:`GENERIC_CONFIG_KEYS`, sorted."""
    known = set(GENERIC_CONFIG_KEYS) | {k.split(".", 1)[0] for k in read} | set(ignored)
    return sorted(k for k in config if k not in known)


def check_config_keys(config: Mapping[str, Any], config_class: Any, where: str, spec: str = "its spec",
                      strict: bool = False) -> list[str]:
    """Report the keys of ``config`` that ``config_class`` (a generated config class, whose ``CONFIG_KEYS_READ`` and
    ``CONFIG_KEYS_IGNORED`` list what its spec reads and ignores) does not account for: a :class:`ConfigKeysWarning`
    naming them, or with ``strict`` a :class:`ConfigError`. Returns the keys (empty when all are accounted for).

    A config class generated before these tuples existed exposes neither; nothing can be said about it, so nothing is
    reported."""
    import warnings

    read = getattr(config_class, "CONFIG_KEYS_READ", None)
    if read is None:
        return []
    ignored = getattr(config_class, "CONFIG_KEYS_IGNORED", ())
    nested, unimplemented = nested_unread_keys(config, read, ignored, GENERIC_CONFIG_KEYS)  # inside rope_parameters & co
    if unimplemented:
        raise ConfigError(
            f"{where}: {', '.join(unimplemented)}: {spec} reads this RoPE mapping but implements no such parameter for "
            f"its rope_type (the generated model would silently drop it); supported per rope_type: "
            f"runtime/config_nesting.py ROPE_PARAMETERS")
    unread = unread_config_keys(config, read, ignored) + nested
    if not unread:
        return []
    message = (
        f"{where}: {len(unread)} key(s) that {spec} neither reads nor ignores: {', '.join(unread)}; the generated "
        f"model does not honour them, so its output may differ from transformers' (read them in the spec's "
        f"`config:` or list them under `config_ignore:` if they do not change the forward pass)"
    )
    if strict:
        raise ConfigError(message + " [--strict-config]")
    warnings.warn(message, ConfigKeysWarning, stacklevel=3)
    return unread
