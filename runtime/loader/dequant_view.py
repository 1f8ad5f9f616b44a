"""A checkpoint seen through a dequantization: the base of the FP8 block-scale and MXFP4 views.

A view lists the tensor names the model expects (``keys()``: the inner checkpoint's names minus the consumed scale /
block tensors, plus any new names), reads the quantized ones dequantized to ``out_dtype`` (``get_tensor``) and
forwards everything else (files, shapes, metadata, close) to the inner :class:`~modelgen.runtime.loader.checkpoint.
Checkpoint`. Subclasses say which names they compute (``_computes``) and how (``_dequantize``).
"""
from __future__ import annotations

from typing import Any

import torch


class _DequantSlice:
    """A lazy slice of a dequantized tensor: indexing dequantizes the tensor, then indexes (neuron's closure loaders)."""

    def __init__(self, view: "DequantView", name: str):
        self.view, self.name = view, name

    def get_shape(self) -> list[int]:
        return list(self.view.shape(self.name))

    def __getitem__(self, index) -> torch.Tensor:
        return self.view.get_tensor(self.name)[index]


class DequantView:
    raw_reads = False  # tensors are computed, not file bytes: the GPU read-ahead (raw file bytes) must not be used
    # Where dequantization runs: None = the host; a CUDA device (set by quantization.keep_quantized_weights when the
    # model lives there) = the quantized bytes are copied over and expanded there, so the host never builds the
    # float32 intermediates of a large checkpoint (DeepSeek-V3: 671B parameters).
    compute_device: torch.device | None = None

    def _to_compute(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dev = self.compute_device
        return tensors if dev is None else tuple(t.to(dev) for t in tensors)

    def __init__(self, inner: Any, dtype: torch.dtype, keys: list[str]):
        self._inner, self.out_dtype, self._keys = inner, dtype, keys
        self._key_set = set(keys)

    # -- what a subclass provides
    def _computes(self, name: str) -> bool:
        raise NotImplementedError

    def _dequantize(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    # -- the Checkpoint interface the loaders use
    def keys(self) -> list[str]:
        return list(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, name: object) -> bool:
        return name in self._key_set

    def dtype(self, name: str) -> torch.dtype:
        return self.out_dtype if self._computes(name) else self._inner.dtype(name)

    def get_tensor(self, name: str) -> torch.Tensor:
        return self._dequantize(name) if self._computes(name) else self._inner.get_tensor(name)

    def get_slice(self, name: str):
        return _DequantSlice(self, name) if self._computes(name) else self._inner.get_slice(name)

    def __getattr__(self, attr: str):  # files, file_of, shape, metadata, close, check_finite, ...
        return getattr(self._inner, attr)

    def __enter__(self) -> "DequantView":
        return self

    def __exit__(self, *exc) -> None:
        self._inner.close()
