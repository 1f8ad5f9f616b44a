"""Typed readers of HF ``config.json`` values, used by the generated ``from_hf_config`` methods.

A reader returns ``None`` when none of its keys is present (or the value is null), so the generated code can apply
the spec's default; a present value of the wrong type raises :class:`ConfigError` naming the field and key.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

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


def _first(cfg: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, Any]:
    for key in keys:
        value = _lookup(cfg, key)
        if value is not _MISSING and value is not None:
            return key, value
    return keys[0], None


def _fail(field: str, key: str, value: Any, want: str) -> ConfigError:
    return ConfigError(f"config.json field '{key}' (spec field '{field}'): expected {want}, got {value!r}")


def read_int(cfg: Mapping[str, Any], field: str, keys: Sequence[str], minimum: int | None = None) -> int | None:
    """An integer (``64.0`` accepted); with ``minimum`` (e.g. 1 for counts and sizes), smaller values are refused."""
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
        raise _fail(field, key, v, "an integer")
    if minimum is not None and v < minimum:
        raise _fail(field, key, v, f"an integer >= {minimum}")
    return int(v)


def read_float(cfg: Mapping[str, Any], field: str, keys: Sequence[str]) -> float | None:
    key, v = _first(cfg, keys)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(field, key, v, "a number")
    if not math.isfinite(v):  # json.loads accepts NaN/Infinity; an eps or theta of NaN gives garbage silently
        raise _fail(field, key, v, "a finite number")
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
    if rope_type == "default":
        return None
    out["rope_type"] = rope_type
    return out


# Counts and sizes every architecture has, where 0 or a negative value is never meaningful. Checked on the raw
# config.json before the generated reader runs (a zero head count would divide by zero there) and on the built
# config (derived values such as head_dim = hidden_size // num_attention_heads).
CORE_POSITIVE_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings",
)


def check_core_fields(config: Any, where: str = "config.json") -> None:
    """ConfigError naming ``where`` and the field unless each present core field is a positive integer."""
    for name in CORE_POSITIVE_FIELDS:
        v = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if v is None:
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where}: field '{name}' = {v!r}: expected a positive integer")


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
