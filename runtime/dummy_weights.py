"""Dummy weights from the config alone (``LLM(..., load_format="dummy")``, ``modelgen run --load-dummy``): for
benchmarks and smoke tests without a checkpoint, as ATOM's/vLLM's ``load_dummy``.

:class:`DummyCheckpoint` answers the checkpoint protocol the loaders read (``keys``, ``shape``, ``dtype``,
``get_tensor``, ``get_slice``, ``files``...) for the tensors a ``save_pretrained`` checkpoint of the architecture
would hold. Their names and shapes come from transformers' own model class, instantiated on the ``meta`` device
(no memory, no weights). Each tensor's values are a function of its name and the seed only, generated on the
engine's device when the loader reads it, and the model's normal loaders shard them — so TP = 2 holds exactly the
slices of TP = 1's weights and the two runs are comparable token for token.

Values follow transformers' initialisation closely enough to keep activations finite and logits non-degenerate:
normal(0, ``initializer_range``) for matrices and embeddings, ones for 1-D norm weights, zeros for other 1-D
tensors (biases, score-correction biases, sinks); ``zeros=True`` makes everything zero but the norms.

Without transformers (or for an architecture it does not know) :func:`init_parameters` fills the model's own
parameters in place instead: per rank, not sliced from one full tensor, so TP runs are not comparable then.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import torch

LOAD_FORMATS = ("auto", "dummy", "dummy_zeros")


def check_load_format(value: object) -> str:
    if value not in LOAD_FORMATS:
        raise ValueError(f"load_format {value!r}: expected one of {', '.join(LOAD_FORMATS)}")
    return value  # type: ignore[return-value]


def hf_tensor_layout(hf_config: dict) -> dict[str, tuple[tuple[int, ...], bool]]:
    """``name -> (shape, is_float)`` of every tensor ``save_pretrained`` would write for ``hf_config`` (tied
    parameters once, persistent buffers included). Raises LookupError when transformers cannot build the model."""
    try:
        import transformers
    except ImportError:
        raise LookupError("transformers is not installed") from None
    cfg = {k: v for k, v in hf_config.items() if k not in ("quantization_config", "auto_map")}
    model_type = cfg.pop("model_type", None)
    archs = cfg.get("architectures") or []
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
        cls = next((getattr(transformers, a) for a in archs if hasattr(transformers, a)), None)
        with torch.device("meta"):
            model = cls._from_config(config) if cls is not None else \
                transformers.AutoModelForCausalLM.from_config(config)
    except Exception as e:  # an unknown model_type, a config transformers refuses
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise LookupError(f"transformers cannot build {archs or model_type}: {first}") from None
    seen: set[int] = set()
    out: dict[str, tuple[tuple[int, ...], bool]] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:  # tied: save_pretrained writes the first name only
            continue
        seen.add(id(t))
        out[name] = (tuple(t.shape), t.is_floating_point())
    return out


def _fill(name: str, shape: tuple[int, ...], is_float: bool, dtype: torch.dtype, device, seed: int, std: float,
          zeros: bool) -> torch.Tensor:
    if not is_float:
        return torch.zeros(shape, dtype=torch.int64, device=device)
    if len(shape) == 1:
        fill = 1.0 if name.endswith("norm.weight") else 0.0  # input_layernorm, q_norm, model.norm, ...
        return torch.full(shape, fill, dtype=dtype, device=device)
    if zeros:
        return torch.zeros(shape, dtype=dtype, device=device)
    g = torch.Generator(device=device)
    g.manual_seed((zlib.crc32(name.encode()) ^ (seed * 0x9E3779B1)) & 0xFFFFFFFFFFFF)
    # float32 draws, then the model dtype: the same values whatever dtype the run uses
    return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std).to(dtype)


class _Slice:
    """A lazy-slice look-alike (safetensors ``get_slice``) over a generated tensor."""

    def __init__(self, make):
        self._make = make
        self._tensor = None

    def _full(self) -> torch.Tensor:
        if self._tensor is None:
            self._tensor = self._make()
        return self._tensor

    def get_shape(self) -> list[int]:
        return list(self._full().shape)

    def get_dtype(self) -> str:
        return str(self._full().dtype).removeprefix("torch.")

    def __getitem__(self, index) -> torch.Tensor:
        return self._full()[index]


class DummyCheckpoint:
    """A checkpoint of generated tensors (see module docstring); a context manager like ``Checkpoint``."""

    raw_reads = False  # no file bytes: the GPU read-ahead path must not be used
    check_finite = "off"

    def __init__(self, path: str | Path, hf_config: dict, dtype: torch.dtype, device, *, seed: int = 0,
                 zeros: bool = False):
        self.path = Path(path)
        self.files = [self.path / "config.json"]
        self._layout = hf_tensor_layout(hf_config)
        self._dtype, self._device, self._seed, self._zeros = dtype, torch.device(device), seed, zeros
        std = hf_config.get("initializer_range", 0.02)
        self._std = float(std) if isinstance(std, (int, float)) and not isinstance(std, bool) else 0.02

    def keys(self) -> list[str]:
        return list(self._layout)

    def __iter__(self):
        return iter(self._layout)

    def __len__(self) -> int:
        return len(self._layout)

    def __contains__(self, name: object) -> bool:
        return name in self._layout

    def file_of(self, name: str) -> Path:
        return self.files[0]

    def shape(self, name: str) -> tuple[int, ...]:
        return self._layout[name][0]

    def dtype(self, name: str) -> torch.dtype:
        return self._dtype if self._layout[name][1] else torch.int64

    def metadata(self, file=None) -> dict[str, str]:
        return {"format": "pt", "modelgen": "dummy"}

    def get_tensor(self, name: str) -> torch.Tensor:
        shape, is_float = self._layout[name]
        return _fill(name, shape, is_float, self._dtype, self._device, self._seed, self._std, self._zeros)

    def get_slice(self, name: str) -> _Slice:
        return _Slice(lambda: self.get_tensor(name))

    def close(self) -> None:
        pass

    def __enter__(self) -> "DummyCheckpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DummyCheckpoint({str(self.path)!r}, {len(self._layout)} tensors)"


@torch.no_grad()
def init_parameters(model: torch.nn.Module, *, seed: int = 0, zeros: bool = False, std: float = 0.02) -> None:
    """The fallback: every floating parameter of ``model`` filled in place by the same rules (per rank)."""
    for name, p in model.named_parameters():
        if p.is_floating_point():
            p.data.copy_(_fill(name, tuple(p.shape), True, p.dtype, p.device, seed, std, zeros))
        else:
            p.data.zero_()
    from .loader.quantization import process_weights_after_loading

    process_weights_after_loading(model)


class _InPlace:
    """The fallback "checkpoint" without a tensor layout: ``Target.load`` sees ``fill_in_place`` and calls it on the
    model instead of the model's loader."""

    raw_reads = False

    def __init__(self, path: Path, reason: str, zeros: bool, std: float):
        self.files = [path / "config.json"]
        self.reason, self._zeros, self._std = reason, zeros, std

    def keys(self) -> list[str]:
        return []

    def fill_in_place(self, model: torch.nn.Module) -> None:
        init_parameters(model, zeros=self._zeros, std=self._std)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def dummy_checkpoint(checkpoint_dir, dtype: torch.dtype, device, load_format: str, seed: int = 0):
    """What ``LLM`` loads for ``load_format`` "dummy" (normal draws) / "dummy_zeros": a :class:`DummyCheckpoint`
    (TP-consistent), or — when transformers cannot lay the tensors out — an in-place fill of the model (logged)."""
    zeros = check_load_format(load_format) == "dummy_zeros"
    hf_config = checkpoint_dir.raw_config if hasattr(checkpoint_dir, "raw_config") else checkpoint_dir.hf_config
    try:
        return DummyCheckpoint(checkpoint_dir.path, hf_config, dtype, device, seed=seed, zeros=zeros)
    except LookupError as e:
        import logging

        logging.getLogger(__name__).warning("dummy weights filled per parameter (%s): tensor-parallel ranks are "
                                            "not slices of one model", e)
        std = hf_config.get("initializer_range", 0.02)
        return _InPlace(Path(checkpoint_dir.path), str(e), zeros, float(std) if isinstance(std, float) else 0.02)
