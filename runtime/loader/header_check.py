"""A config's layer count and sizes checked against a checkpoint's safetensors headers, before any layer is built.

Building a model costs per layer -- on the meta device (``modelgen coverage``) as much as for real -- so a
``config.json`` claiming ``num_hidden_layers: 1000000000`` next to a 2-layer checkpoint would build for hours before
the loader could say the tensors are missing. The headers (parsed without reading data,
:class:`~modelgen.runtime.loader.checkpoint.Checkpoint`) already say how many layers the checkpoint holds and how
large its tensors are; what no checkpoint could hold is refused here, naming the field:

* ``num_hidden_layers`` above the layers the tensor names number (``...layers.<i>.``, the layout of every HF
  decoder; extra layers such as DeepSeek's MTP layer at index ``num_hidden_layers`` are fine), or above the number
  of tensors at all (every layer has at least one weight) when no name is numbered that way;
* a size or head count (``vocab_size``, ``hidden_size``, ``intermediate_size``, head counts, ``head_dim``) larger
  than every dimension of every tensor: each of them is the length of some weight's axis (the embedding, a norm, a
  projection), so a value no axis reaches cannot describe this checkpoint.

These are bounds, not the full check: the strict coverage report (``modelgen coverage``, the loader's own checks)
still compares every parameter with its tensor, now over a model of bounded size.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from ..hf_config import ConfigError, shown

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")

# Config fields that are the length of some tensor axis in every architecture that has them.
SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "head_dim")


def _raw(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


def _value(config: Any, name: str) -> int | None:
    """An integer field's value (``1e9`` as the integer it is); None for anything else, whose type is the typed
    readers' to refuse."""
    v = _raw(config, name)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def layers_in(names: Iterable[str]) -> int | None:
    """1 + the largest ``layers.<i>`` index among tensor ``names``; None when no name is numbered that way."""
    top = -1
    for name in names:
        for m in _LAYER_INDEX.finditer(name):
            top = max(top, int(m.group(1)))
    return top + 1 if top >= 0 else None


def check_config_against_headers(config: Any, checkpoint: Any, where: str = "config.json") -> None:
    """ConfigError naming ``where`` and the field when ``config`` (a config.json dict or a generated config) asks
    for more layers, or larger sizes, than ``checkpoint`` (anything with ``keys()`` and ``shape(name)``: a
    Checkpoint, a quantization view) can hold. Reads headers only; time is linear in the number of tensors."""
    names = list(checkpoint.keys())
    layers = _value(config, "num_hidden_layers")
    if layers is not None:
        held, given = layers_in(names), shown(_raw(config, "num_hidden_layers"))
        if held is not None and layers > held:
            raise ConfigError(
                f"{where}: field 'num_hidden_layers' = {given}: the checkpoint's tensors number only {held} "
                f"layer(s) (layers.0 .. layers.{held - 1}); expected at most {held}"
            )
        if held is None and layers > len(names):
            raise ConfigError(
                f"{where}: field 'num_hidden_layers' = {given}: the checkpoint holds only {len(names)} tensor(s), "
                f"fewer than one per layer; expected at most {len(names)}"
            )
    largest = max((d for n in names for d in checkpoint.shape(n)), default=0)
    for field in SIZE_FIELDS:
        v = _value(config, field)
        if v is not None and v > largest:
            raise ConfigError(
                f"{where}: field '{field}' = {shown(_raw(config, field))}: larger than every dimension of the "
                f"checkpoint's tensors (the largest is {largest}); expected the length of a weight axis"
            )
