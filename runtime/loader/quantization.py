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

import torch
from torch import nn

from ..layers.fp8 import FP8_DTYPES, dequantize_block_fp8, scale_shape
from .checkpoint import CheckpointError
from .dequant_view import DequantView
from .mxfp4 import Mxfp4Config, Mxfp4DequantCheckpoint, parse_mxfp4

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


@dataclass(frozen=True)
class Fp8BlockConfig(QuantConfig):
    """``quant_method: fp8`` with ``weight_block_size [bo, bi]`` (DeepSeek-V3, Qwen3-FP8): see runtime/layers/fp8.py."""

    block: tuple[int, int] = (128, 128)


def parse_fp8(qc: Mapping[str, Any], source: str = "config.json") -> Fp8BlockConfig:
    """The ``fp8`` method's config: block-scaled weights, dynamic activations (as DeepSeek-V3 and Qwen3-FP8 ship)."""
    where = f"{source}: quantization_config"
    block = qc.get("weight_block_size")
    if not (isinstance(block, (list, tuple)) and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise QuantizationError(f"{where}.weight_block_size must be two positive integers such as [128, 128] "
                                f"(per-tensor FP8 is not supported), got {block!r}")
    fmt = qc.get("fmt", "e4m3")
    if fmt not in ("e4m3", "float8_e4m3fn"):
        raise QuantizationError(f"{where}.fmt {fmt!r} is not supported (expected 'e4m3')")
    scheme = qc.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        # Weights are dequantized at load and activations stay in the model dtype; a static scheme's input_scale
        # tensors would have no consumer.
        raise QuantizationError(f"{where}.activation_scheme {scheme!r} is not supported (expected 'dynamic')")
    return Fp8BlockConfig(method="fp8", raw=dict(qc), block=(block[0], block[1]))


# quant_method -> parser(raw quantization_config) -> QuantConfig. Each format is dequantized at load by a checkpoint
# view (wrap_checkpoint, which CheckpointDir.open_weights applies): FP8 block scales (DeepSeek-V3 / GLM-5 releases,
# tests/test_fp8_block.py) and MXFP4 experts (GPT-OSS releases, runtime/loader/mxfp4.py, tests/test_mxfp4.py).
SUPPORTED_METHODS: dict[str, Callable[[Mapping[str, Any]], Any]] = {"fp8": parse_fp8, "mxfp4": parse_mxfp4}


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


# ---------------------------------------------------------------------------------------------- FP8 at read time
class Fp8DequantCheckpoint(DequantView):
    """A :class:`~modelgen.runtime.loader.checkpoint.Checkpoint` seen through FP8 block dequantization: every FP8
    tensor ``X`` reads as ``dequant(X, X_scale_inv)`` in ``dtype``, and the ``X_scale_inv`` tensors it consumed are not
    listed, so both loaders (packed and mapped) and every spec load FP8 checkpoints unchanged. Scales are checked
    against the headers when the view is made: a missing or mis-shaped ``weight_scale_inv`` is named up front.
    """

    def __init__(self, inner: Any, config: Fp8BlockConfig, dtype: torch.dtype):
        self.block = config.block
        keys = inner.keys()
        present = set(keys)
        self._scale_of: dict[str, str] = {}
        for key in keys:
            if inner.dtype(key) not in FP8_DTYPES:
                continue
            scale = key + "_scale_inv"  # X.weight -> X.weight_scale_inv (also fused experts' X -> X_scale_inv)
            if scale not in present:
                raise CheckpointError(f"{inner.file_of(key)}: FP8 tensor '{key}' has no '{scale}' (quantization_config "
                                      f"fp8 with weight_block_size {list(self.block)} needs one scale per block)")
            want, got = scale_shape(tuple(inner.shape(key)), self.block), tuple(inner.shape(scale))
            if got != want:
                raise CheckpointError(f"{inner.file_of(scale)}: '{scale}' has shape {got}, expected {want} for "
                                      f"'{key}' of shape {tuple(inner.shape(key))} in {list(self.block)} blocks")
            self._scale_of[key] = scale
        consumed = set(self._scale_of.values())
        super().__init__(inner, dtype, [k for k in keys if k not in consumed])

    def _computes(self, name: str) -> bool:
        return name in self._scale_of

    def _dequantize(self, name: str) -> torch.Tensor:
        scale = self._inner.get_tensor(self._scale_of[name])
        return dequantize_block_fp8(self._inner.get_tensor(name), scale, self.block, self.out_dtype)


def wrap_checkpoint(checkpoint: Any, quantization: QuantConfig | None, dtype: torch.dtype) -> Any:
    """The checkpoint as the model's loader should read it: FP8 block-scaled and MXFP4 (runtime/loader/mxfp4.py)
    tensors dequantized to ``dtype``; an unquantized checkpoint as it is."""
    if isinstance(quantization, Fp8BlockConfig):
        return Fp8DequantCheckpoint(checkpoint, quantization, dtype)
    if isinstance(quantization, Mxfp4Config):
        return Mxfp4DequantCheckpoint(checkpoint, dtype)
    return checkpoint
