"""Quantized checkpoints: read ``quantization_config``, refuse what is not supported, run post-load hooks.

A checkpoint produced by a quantizer (AWQ, GPTQ, FP8 block-scale, MXFP4, bitsandbytes, compressed-tensors) declares it
in ``config.json`` → ``quantization_config.quant_method`` (for multimodal checkpoints possibly under ``text_config``).
Without this module such a checkpoint fails deep in loading with a coverage dump of ``qweight``/``weight_scale_inv``
tensors; with it, the user gets one line naming the method and what is supported, before any weight is read.

Supported methods register here as their formats land (FP8 block scales with the DeepSeek specs, MXFP4 with GPT-OSS):
each maps ``quant_method`` to a parser of its config. The model side of a format is a layer whose parameters include
the scales (loaded like any other tensor) and which may define ``process_weights_after_loading()`` — ATOM's hook for
repacking / dequantizing once all shards are in; :func:`process_weights_after_loading` calls it on every module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torch import nn

from .checkpoint import CheckpointError

# Tensor-name suffixes that only quantized checkpoints carry; used to explain a coverage failure when a checkpoint is
# quantized but says nothing in config.json (e.g. hand-converted weights).
QUANTIZED_TENSOR_SUFFIXES = (
    ".weight_scale_inv", ".weight_scale", ".input_scale", ".qweight", ".qzeros", ".scales", ".g_idx",
    "_blocks", "_scales", ".SCB", ".weight_format",
)


class QuantizationError(CheckpointError):
    """The checkpoint's quantization method is not supported (or its config is malformed)."""


@dataclass(frozen=True)
class QuantConfig:
    method: str
    raw: Mapping[str, Any] = field(default_factory=dict)


# quant_method -> parser(raw quantization_config) -> QuantConfig. Empty until a format's layers exist.
SUPPORTED_METHODS: dict[str, Callable[[Mapping[str, Any]], QuantConfig]] = {}


def _quantization_section(hf_config: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(json path, value) of the quantization config, top level first, then ``text_config``."""
    if "quantization_config" in hf_config:
        return "quantization_config", hf_config["quantization_config"]
    text = hf_config.get("text_config")
    if isinstance(text, Mapping) and "quantization_config" in text:
        return "text_config.quantization_config", text["quantization_config"]
    return None


def check_quantization(hf_config: Mapping[str, Any], source: str = "config.json") -> QuantConfig | None:
    """None for an unquantized checkpoint; the parsed config for a supported method; else :class:`QuantizationError`."""
    found = _quantization_section(hf_config)
    if found is None or found[1] is None:
        return None
    where, qc = found
    if not isinstance(qc, Mapping):
        raise QuantizationError(f"{source}: {where} must be an object, got {type(qc).__name__}")
    method = qc.get("quant_method")
    if not isinstance(method, str) or not method:
        raise QuantizationError(f"{source}: {where}.quant_method is missing or not a string (got {method!r})")
    parser = SUPPORTED_METHODS.get(method)
    if parser is None:
        supported = ", ".join(sorted(SUPPORTED_METHODS)) or "none yet"
        raise QuantizationError(
            f"{source}: {where}.quant_method {method!r} is not supported (supported: {supported}); "
            f"use an unquantized bf16/fp16/fp32 checkpoint of this model"
        )
    return parser(qc)


def quantized_tensor_hint(unexpected: list[str]) -> str | None:
    """A one-line explanation when unmatched checkpoint tensors look like quantization scales/packed weights."""
    hits = [k for k in unexpected if k.endswith(QUANTIZED_TENSOR_SUFFIXES)]
    if not hits:
        return None
    return (f"{len(hits)} unexpected tensor(s) look quantized (e.g. '{hits[0]}') but config.json declares no supported "
            f"quantization_config; this model only loads unquantized weights")


def process_weights_after_loading(model: nn.Module) -> None:
    """Call every module's ``process_weights_after_loading()`` once all tensors are in (ATOM's post-load hook)."""
    for module in model.modules():
        hook = getattr(module, "process_weights_after_loading", None)
        if callable(hook) and module is not model:
            hook()
