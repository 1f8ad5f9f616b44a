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

from modelgen import settings

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
        self._kept: set[str] = set()
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
        return name in self._scale_of and name not in self._kept

    def _dequantize(self, name: str) -> torch.Tensor:
        weight, scale = self._to_compute(self._inner.get_tensor(name), self._inner.get_tensor(self._scale_of[name]))
        if weight.dim() == 2:
            return dequantize_block_fp8(weight, scale, self.block, self.out_dtype)
        # stacked experts [E, out, in]: one expert at a time (the float32 intermediate of one, not of all)
        flat_w, flat_s = weight.reshape(-1, *weight.shape[-2:]), scale.reshape(-1, *scale.shape[-2:])
        out = torch.empty(flat_w.shape, dtype=self.out_dtype, device=weight.device)
        for i in range(flat_w.shape[0]):
            out[i] = dequantize_block_fp8(flat_w[i], flat_s[i], self.block, self.out_dtype)
        return out.view(weight.shape)

    def fp8_keys(self) -> list[str]:
        """The FP8 tensors of the checkpoint (each with its ``_scale_inv``)."""
        return list(self._scale_of)

    def keep(self, names: set[str]) -> None:
        """Read these FP8 tensors as stored (float8) and list their ``_scale_inv`` again, right after each: for
        layers that keep FP8 weights (``LinearBase.keep_fp8``), switched before loading."""
        self._kept |= set(names) & set(self._scale_of)
        keys = [k for k in self._keys if not k.endswith("_scale_inv") or k[: -len("_scale_inv")] not in self._kept]
        out = []
        for k in keys:
            out.append(k)
            if k in self._kept:
                out.append(self._scale_of[k])
        self._keys, self._key_set = out, set(out)


def wrap_checkpoint(checkpoint: Any, quantization: QuantConfig | None, dtype: torch.dtype) -> Any:
    """The checkpoint as the model's loader should read it: FP8 block-scaled and MXFP4 (runtime/loader/mxfp4.py)
    tensors dequantized to ``dtype``; an unquantized checkpoint as it is."""
    if isinstance(quantization, Fp8BlockConfig):
        return Fp8DequantCheckpoint(checkpoint, quantization, dtype)
    if isinstance(quantization, Mxfp4Config):
        return Mxfp4DequantCheckpoint(checkpoint, dtype)
    return checkpoint


# ------------------------------------------------------------------------------- quantized weights kept on the GPU
QUANTIZED_WEIGHTS_ENV = "MODELGEN_QUANTIZED_WEIGHTS"
QUANTIZED_WEIGHTS_MODES = ("auto", "keep", "dequantize")
# What "auto" means per format on the GPU path (rocm target, Triton kernels), from A/Bs of both modes in one run on the
# H200 (bench/deepseek.py --quant fp8, bench/gpt_oss.py --quant mxfp4; bench/NOTES-quant.md):
# * FP8 kept: DeepSeek-V3 shape (2 layers) 782 / 9,508 tok/s at batch 1 / 32 against 703 / 6,610 dequantized (since
#   the one-row FP8 GEMV, runtime/ops/gpu/fp8.py; before it 681 vs 719 at batch 1) -- and half the weight memory;
# * MXFP4 kept: gpt-oss-20b shape (4 layers) 745 / 6,205 against 1,240 / 13,509 dequantized to bf16 (the bf16 Triton
#   MoE is the faster kernel), so MXFP4 is dequantized unless asked.
AUTO_KEEP = {"fp8": True, "mxfp4": False}


def quantized_weights_mode(mode: str | None = None) -> str:
    """``LLM(quantized_weights=...)``, else ``MODELGEN_QUANTIZED_WEIGHTS``, else ``auto``; validated."""
    value = mode if mode is not None else settings.get(QUANTIZED_WEIGHTS_ENV)
    if value not in QUANTIZED_WEIGHTS_MODES:
        source = "quantized_weights" if mode is not None else QUANTIZED_WEIGHTS_ENV
        raise ValueError(f"{source} {value!r}: expected one of {', '.join(QUANTIZED_WEIGHTS_MODES)}")
    return value


def _linear_targets(model: nn.Module, keys: list[str]) -> dict[str, list[str]]:
    """Linear layer name -> the checkpoint keys its ``weight`` is loaded from (through the model's renames and
    ``packed_modules_mapping``, as the rocm loader routes them). Layers whose weight is read as a matrix by their
    parent (MLA's ``kv_b_proj``, split into the absorbed W_UK / W_UV) or stored fused and split at load
    (``checkpoint.split``) are left out: they stay dequantized."""
    from ..layers.kind import layer_kinds
    from ..layers.linear import LinearBase
    from .names import apply_renames, resolve_packed
    from .protocol import PackedTables
    from .split import CheckpointSplit

    tables = PackedTables.of(model)
    modules = dict(model.named_modules())
    read_as_matrix = {id(linear) for layer in layer_kinds(model) for linear in layer.linears_read_as_matrix()}
    out: dict[str, list[str]] = {}
    for key in keys:
        if not key.endswith(".weight"):
            continue
        param, shard = resolve_packed(apply_renames(key, tables.renames), tables.packed_modules_mapping)
        if isinstance(shard, CheckpointSplit):
            continue
        module = modules.get(param[: -len(".weight")])
        if isinstance(module, LinearBase) and id(module) not in read_as_matrix:
            out.setdefault(param[: -len(".weight")], []).append(key)
    return out


def keep_quantized_weights(model: nn.Module, checkpoint: Any, *, target: str, device: torch.device,
                           mode: str | None = None) -> dict[str, Any]:
    """Before loading: on the GPU path, switch the layers that can run on their checkpoint's quantized format and
    make ``checkpoint`` (the view ``wrap_checkpoint`` made) hand them the stored tensors instead of dequantized ones.

    * FP8 block scales: linear layers whose every checkpoint weight is FP8 keep ``weight`` in float8 +
      ``weight_scale_inv`` (``LinearBase.keep_fp8``) and run ``runtime/ops/gpu/fp8.py``'s GEMM; MoE layers whose
      experts are FP8 re-encode them to the checkpoint's FP8 codes after loading and run
      ``runtime/layers/moe/kernels_fp8.py`` (``runtime/layers/moe/fp8.py``).
    * MXFP4: the fused MoE experts keep ``*_blocks`` / ``*_scales`` (``runtime/layers/moe/mxfp4.py``) and run the
      MXFP4 MoE kernels of ``runtime/layers/moe/kernels_mxfp4.py``.

    The GPU path is the rocm target with Triton kernels enabled for ``device`` (a CUDA GPU, or Triton's interpreter
    with ``MODELGEN_TRITON_ON_CPU=1``). Everywhere else, and with mode ``dequantize``, nothing changes: the torch path
    dequantizes at load. Returns what was decided (for reports and benchmarks)."""
    from ..ops import gpu

    mode = quantized_weights_mode(mode)
    fmt = "fp8" if isinstance(checkpoint, Fp8DequantCheckpoint) else \
        "mxfp4" if isinstance(checkpoint, Mxfp4DequantCheckpoint) else None
    report: dict[str, Any] = {"format": fmt, "mode": mode, "kept": 0, "dequantized": 0}
    if fmt is None:
        return report
    if device.type == "cuda":
        checkpoint.compute_device = device
    gpu_path = target == "rocm" and gpu.enabled(torch.empty(0, device=device))
    keep = mode == "keep" or (mode == "auto" and AUTO_KEEP[fmt])
    if not (gpu_path and keep):
        report["dequantized"] = len(checkpoint.fp8_keys() if fmt == "fp8" else checkpoint.pairs())
        report["why_dequantized"] = "not the GPU path (rocm target, Triton kernels)" if not gpu_path else f"mode {mode}"
        return report
    if fmt == "fp8":
        fp8 = set(checkpoint.fp8_keys())
        kept: set[str] = set()
        modules = dict(model.named_modules())
        for name, keys in _linear_targets(model, list(checkpoint.keys())).items():
            if all(k in fp8 for k in keys) and modules[name].keep_fp8(checkpoint.block, checkpoint._inner.dtype(keys[0])):
                kept |= set(keys)
        checkpoint.keep(kept)
        from ..layers.moe.fp8 import keep_fp8_experts

        # experts load dequantized and are re-encoded in FP8 after loading (runtime/layers/moe/fp8.py)
        report.update(kept=len(kept), dequantized=len(fp8 - kept), moe_layers_fp8=keep_fp8_experts(model, checkpoint))
    else:
        from .mxfp4 import keep_mxfp4_experts

        kept = keep_mxfp4_experts(model, checkpoint)
        report.update(kept=len(kept), dequantized=len(checkpoint.pairs()) - len(kept))
    return report
