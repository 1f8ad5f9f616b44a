"""A checkpoint directory and everything read from it: ``config.json``, ``generation_config.json``, tokenizer files
and the safetensors weights.

One owner for the directory, so each file is read in one place and each error names the file and field:

* the directory may be given as a Hugging Face Hub id (``org/name``): its cached snapshot, downloaded when not
  cached (:mod:`~modelgen.runtime.hub`).
* ``config.json`` is read once: :attr:`CheckpointDir.raw_config` as stored, :attr:`CheckpointDir.hf_config` as the
  generated text model reads it (a ``*ForConditionalGeneration`` checkpoint nests the language model's fields under
  ``text_config``; they are lifted to the top, winning over the wrapper's, while ``architectures`` stays the
  wrapper's, which is what the model registry looks up).
* every file is opened only if it is a regular file, JSON with byte and depth bounds (``runtime/loader/files.py``);
  ``architectures`` and the dtype fields are type-checked, and the layer count and sizes are checked against the
  safetensors headers (``runtime/loader/header_check.py``) when the directory is opened, before anything is built.
* ``quantization_config`` is checked when the directory is opened (``runtime/loader/quantization.py``): a quantized
  checkpoint of an unsupported method is refused by name before any model is built or weight read.
* :meth:`eos_token_ids` reads ``generation_config.json`` first, then ``config.json``.
* :meth:`tokenizer` reads ``tokenizer.json`` (+ ``tokenizer_config.json``, ``chat_template.jinja``), None without one.
* :meth:`open_weights` opens the safetensors files (:class:`~modelgen.runtime.loader.checkpoint.Checkpoint`), seen
  through the quantization format's view when there is one (FP8 block scales and MXFP4 blocks read as dequantized
  tensors in the model dtype, ``quantization.wrap_checkpoint``), so the model's loader reads plain tensors.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .hf_config import ConfigError, check_wrapper_fields, shown
from .loader.checkpoint import Checkpoint, CheckpointError, read_json_if_exists
from .loader.header_check import check_config_against_headers
from .loader.quantization import QuantConfig, check_quantization, wrap_checkpoint

if TYPE_CHECKING:
    from .tokenizer import Tokenizer


def flatten_text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The text model's view of a config: ``text_config``'s fields over the top level's (multimodal wrappers such
    as Qwen3.5 ``*ForConditionalGeneration``), ``architectures`` kept from the top level."""
    text_config = hf_config.get("text_config")
    if not isinstance(text_config, dict):
        return dict(hf_config)
    return {**hf_config, **text_config, "architectures": hf_config.get("architectures")}


class CheckpointDir:
    """An existing checkpoint directory holding ``config.json`` (CheckpointError otherwise, naming the path)."""

    def __init__(self, path: str | Path):
        self.path = check_checkpoint_dir(path)
        self.config_path = self.path / "config.json"
        raw = read_json_if_exists(self.config_path)
        if raw is None:
            raise CheckpointError(f"{self.path}: checkpoint directory has no config.json")
        self.raw_config: dict[str, Any] = raw
        # The fields read before any spec's typed reader (the registry's architectures, the dtype): a dict or a
        # number there is one line naming the field, not a TypeError inside a lookup table.
        check_wrapper_fields(raw, str(self.config_path))
        if isinstance(raw.get("text_config"), dict):
            check_wrapper_fields(raw["text_config"], f"{self.config_path} (text_config)")
        # Before anything else reads the config: a quantized checkpoint fails here with its quant_method named,
        # not later as a wall of unexpected qweight/scale tensors.
        self.quantization: QuantConfig | None = check_quantization(raw, str(self.config_path))
        self.hf_config: dict[str, Any] = flatten_text_config(raw)
        self._check_against_headers()

    def _check_against_headers(self) -> None:
        """Layer count and sizes against the safetensors headers (runtime/loader/header_check.py), here, before
        any caller builds a layer. Weights that cannot be opened (none yet, a broken shard, a shard outside the
        directory) are not this check's to report: the loader refuses them, naming the file, when it opens them."""
        try:
            headers = Checkpoint(self.path, headers_only=True, check_finite="off")
        except CheckpointError:
            return
        check_config_against_headers(self.hf_config, headers, str(self.config_path))

    @property
    def architectures(self) -> list[str] | None:
        return self.raw_config.get("architectures")

    def eos_token_ids(self) -> set[int]:
        """EOS ids of ``generation_config.json`` (first) or ``config.json``: an integer or a list of integers."""
        ids: set[int] = set()
        for name in ("generation_config.json", "config.json"):
            cfg = self.raw_config if name == "config.json" else read_json_if_exists(self.path / name) or {}
            eos = cfg.get("eos_token_id")
            values = eos if isinstance(eos, list) else [] if eos is None else [eos]
            for e in values:
                if isinstance(e, bool) or not isinstance(e, int) or e < 0:
                    raise ConfigError(
                        f"{self.path / name}: field 'eos_token_id' = {shown(eos)}: expected a non-negative integer "
                        f"or a list of them"
                    )
                ids.add(e)
            if ids:
                break
        return ids

    def tokenizer(self) -> "Tokenizer | None":
        """The checkpoint's tokenizer, or None when it has no ``tokenizer.json``."""
        from .tokenizer import Tokenizer

        return Tokenizer.from_checkpoint(self.path)

    def open_weights(self, dtype: torch.dtype, *, allow_external_shards: bool = False,
                     check_finite: bool | str = True) -> Checkpoint:
        """The safetensors weights as the model's loader reads them (a context manager; see :class:`Checkpoint` for
        layouts and confinement): quantized tensors dequantized to ``dtype`` by the format's view."""
        checkpoint = Checkpoint(self.path, allow_external_shards=allow_external_shards, check_finite=check_finite)
        return wrap_checkpoint(checkpoint, self.quantization, dtype)

    def __repr__(self) -> str:
        return f"CheckpointDir({str(self.path)!r})"


def check_checkpoint_dir(path: str | Path) -> Path:
    """``path`` as a Path; CheckpointError unless it is an existing directory. A string shaped like a Hugging Face
    Hub id (``org/name``) that is not a local path is resolved to its snapshot in the hub's cache, downloaded when
    not cached and online (runtime/hub.py)."""
    from .hub import resolve_checkpoint

    path = resolve_checkpoint(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory (expected a checkpoint directory holding config.json and "
                              f"*.safetensors)")
    return path
