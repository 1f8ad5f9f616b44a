"""MXFP4 checkpoints (``quantization_config.quant_method: mxfp4``, every released GPT-OSS checkpoint): dequantized to
the model dtype at load, through a checkpoint view, so neither loader nor any spec changes.

Format (transformers ``integrations/mxfp4.py``, from OpenAI's gpt-oss repository): a quantized tensor ``X`` (the MoE
experts' ``gate_up_proj`` and ``down_proj``) is stored as two tensors,

* ``X_blocks`` uint8 ``[E, R, G, 16]``: 32 FP4 (E2M1) values per group, two per byte, the low nibble first (even
  element) and the high nibble second (odd element); a nibble indexes ``FP4_VALUES`` (bit 3 is the sign);
* ``X_scales`` uint8 ``[E, R, G]``: one E8M0 exponent per 32-value group, biased by 127 (value = fp4 * 2**(s - 127)).

The 32-value groups run along the input dim, so dequantizing gives ``[E, R, 32 G]`` (``R`` output rows) and
transformers returns it transposed, ``[E, 32 G, R]``: exactly the unquantized checkpoint's ``gate_up_proj [E, H, 2I]``
/ ``down_proj [E, I, H]``. :class:`Mxfp4DequantCheckpoint` therefore presents ``X`` in that layout and the spec's
expert layout (``interleaved_transposed``) takes it from there.

Registration: ``runtime/loader/quantization.py`` lists :func:`parse_mxfp4` and routes :class:`Mxfp4Config` to
:class:`Mxfp4DequantCheckpoint` in ``wrap_checkpoint``; this module imports nothing from quantization.py (no cycle).
The codec itself (``dequantize_mxfp4``, ``quantize_mxfp4``) is ``runtime/ops/mxfp4.py``, below the MoE layer that
also unpacks kept MXFP4 experts with it; :func:`keep_mxfp4_experts` (``quantized_weights="keep"``) is here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from ..ops.mxfp4 import BLOCKS_SUFFIX, GROUP, SCALES_SUFFIX, dequantize_mxfp4
from .checkpoint import CheckpointError
from .dequant_view import DequantView

@dataclass(frozen=True)
class Mxfp4Config:
    """``quant_method: mxfp4`` (the same fields as quantization.QuantConfig)."""

    method: str = "mxfp4"
    raw: Mapping[str, Any] = field(default_factory=dict)


def parse_mxfp4(qc: Mapping[str, Any]) -> Mxfp4Config:
    """The ``quantization_config`` parser for ``SUPPORTED_METHODS``: nothing to choose (one group size, one scale
    format); ``modules_to_not_convert`` names modules stored unquantized, which load as they are."""
    skip = qc.get("modules_to_not_convert", [])
    if skip is not None and not (isinstance(skip, list) and all(isinstance(s, str) for s in skip)):
        raise CheckpointError(f"quantization_config.modules_to_not_convert must be a list of names, got {skip!r}")
    return Mxfp4Config(raw=dict(qc))


class Mxfp4DequantCheckpoint(DequantView):
    """A :class:`~modelgen.runtime.loader.checkpoint.Checkpoint` seen through MXFP4 dequantization: every pair
    ``X_blocks`` / ``X_scales`` reads as one tensor ``X`` in ``dtype`` (layout above), and the pair is not listed.
    Pairs are checked against the headers when the view is made: a lone ``_blocks`` / ``_scales`` or mismatched shapes
    are named up front, before any weight is read."""

    def __init__(self, inner: Any, dtype: torch.dtype):
        keys = inner.keys()
        present = set(keys)
        self._pairs: dict[str, tuple[str, str]] = {}
        for key in keys:
            if not key.endswith(BLOCKS_SUFFIX):
                continue
            name = key[: -len(BLOCKS_SUFFIX)]
            scales = name + SCALES_SUFFIX
            if scales not in present:
                raise CheckpointError(f"{inner.file_of(key)}: MXFP4 tensor '{key}' has no '{scales}' (one E8M0 scale "
                                      f"per {GROUP} values)")
            b, s = tuple(inner.shape(key)), tuple(inner.shape(scales))
            if len(b) != 4 or b[:-1] != s or b[-1] != GROUP // 2 or inner.dtype(key) != torch.uint8 \
                    or inner.dtype(scales) != torch.uint8:
                raise CheckpointError(
                    f"{inner.file_of(key)}: MXFP4 '{key}' {b} {inner.dtype(key)} / '{scales}' {s} "
                    f"{inner.dtype(scales)} do not pair: expected uint8 [E, R, G, {GROUP // 2}] and uint8 [E, R, G]")
            if name in present:
                raise CheckpointError(f"{inner.file_of(key)}: '{name}' is stored both plain and as MXFP4 blocks")
            self._pairs[name] = (key, scales)
        lone = [k for k in keys if k.endswith(SCALES_SUFFIX) and k[: -len(SCALES_SUFFIX)] not in self._pairs]
        if lone:
            raise CheckpointError(f"{inner.file_of(lone[0])}: MXFP4 scales '{lone[0]}' have no "
                                  f"'{lone[0][: -len(SCALES_SUFFIX)]}{BLOCKS_SUFFIX}'")
        consumed = {k for pair in self._pairs.values() for k in pair}
        order = {k: i for i, k in enumerate(keys)}
        computed = sorted(self._pairs, key=lambda n: order[self._pairs[n][0]])
        super().__init__(inner, dtype, [k for k in keys if k not in consumed] + computed)

    _kept: frozenset = frozenset()

    def _computes(self, name: str) -> bool:
        return name in self._pairs and name not in self._kept

    def keep(self, names: set[str]) -> None:
        """List these tensors as their stored ``X_blocks`` / ``X_scales`` again instead of ``X`` dequantized: for
        layers that keep MXFP4 experts (``runtime/layers/moe/mxfp4.py``), switched before loading."""
        self._kept = frozenset(self._kept | (set(names) & set(self._pairs)))
        keys = []
        for k in self._keys:
            keys += list(self._pairs[k]) if k in self._kept else [k]
        self._keys, self._key_set = keys, set(keys)

    def _dequantize(self, name: str) -> torch.Tensor:
        blocks, scales = self._pairs[name]
        return dequantize_mxfp4(*self._to_compute(self._inner.get_tensor(blocks), self._inner.get_tensor(scales)),
                                self.out_dtype)

    def pairs(self) -> dict[str, tuple[str, str]]:
        """Dequantized name ``X`` -> (``X_blocks``, ``X_scales``)."""
        return dict(self._pairs)

    def file_of(self, name: str):
        return self._inner.file_of(self._pairs[name][0] if name in self._pairs else name)

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self._pairs:
            return tuple(self._inner.shape(name))
        E, R, G, B = self._inner.shape(self._pairs[name][0])
        return (E, G * 2 * B, R)


def dequantize_checkpoint_dir(src: str, dst: str, dtype: torch.dtype = torch.bfloat16) -> list[str]:
    """Offline conversion: an MXFP4 checkpoint directory -> a plain one in ``dtype`` (one safetensors file; the
    config without ``quantization_config``; generation config, tokenizer and chat template files copied). Returns
    the names of the tensors that were dequantized. Unquantized tensors keep their dtype."""
    import json
    import pathlib
    import shutil

    from safetensors.torch import save_file

    from .checkpoint import Checkpoint, CheckpointError, read_json_if_exists

    src_p, dst_p = pathlib.Path(src), pathlib.Path(dst)
    dst_p.mkdir(parents=True, exist_ok=True)
    with Checkpoint(src_p) as inner:
        view = Mxfp4DequantCheckpoint(inner, dtype)
        tensors = {k: view.get_tensor(k).contiguous() for k in view.keys()}
        converted = sorted(view._pairs)
    save_file(tensors, str(dst_p / "model.safetensors"), metadata={"format": "pt"})
    config = read_json_if_exists(src_p / "config.json")  # regular file, bounded (runtime/loader/files.py)
    if config is None:
        raise CheckpointError(f"{src_p}: checkpoint directory has no config.json")
    config.pop("quantization_config", None)
    (dst_p / "config.json").write_text(json.dumps(config, indent=2))
    for extra in src_p.iterdir():
        if extra.is_file() and extra.suffix != ".safetensors" and extra.name not in ("config.json",) \
                and not extra.name.endswith(".safetensors.index.json"):
            shutil.copy2(extra, dst_p / extra.name)
    return converted


def keep_mxfp4_experts(model: torch.nn.Module, checkpoint: Any) -> set[str]:
    """Switch every FusedMoE whose ``gate_up_proj`` and ``down_proj`` the MXFP4 ``checkpoint`` view stores quantized
    (module name + part, through the model's renames) and make the view hand those tensors over as stored; returns
    the dequantized names now kept (``...experts.gate_up_proj``)."""
    # only a kept MXFP4 checkpoint needs the MoE layer's MXFP4 method (and its Triton kernels' module)
    from ..layers.moe.mxfp4 import PARTS, keep_mxfp4
    from .names import apply_renames
    from .protocol import PackedTables

    renames = PackedTables.of(model).renames
    modules = dict(model.named_modules())
    by_layer: dict[str, dict[str, str]] = {}
    for name in checkpoint.pairs():
        module_name, _, part = apply_renames(name, renames).rpartition(".")
        if part in PARTS:
            by_layer.setdefault(module_name, {})[part] = name
    kept: set[str] = set()
    for module_name, parts in by_layer.items():
        if len(parts) == len(PARTS) and keep_mxfp4(modules.get(module_name)):
            kept |= set(parts.values())
    checkpoint.keep(kept)
    return kept
