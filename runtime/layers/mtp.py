"""What the generated multi-token-prediction (MTP) draft heads share: the MTP layer's config view, the draft's
checkpoint view and its named errors.

An MTP head (DeepSeek-V3 / GLM-4.5 ``model.layers.{num_hidden_layers}.*``; Qwen3-Next / Qwen3.5 ``mtp.*``) computes,
for the token at position ``i``, ``post_norm(block(eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)])))`` where ``h_i`` is
the target model's final (normed) hidden state at ``i`` and ``block`` one decoder layer of the target's kind; its
logits go through the target's LM head (transformers' ``MtpModel``, modeling_layers.py, which shares the embedding
and the head with the main model as the DeepSeek-V3 report describes). The generated ``mtp.py`` of a model package
holds the classes; this module holds the parts that know nothing of a particular model.

The main loader never loads these tensors (``ExtraLayers`` / ``checkpoint.ignore``); the draft loads them through
:class:`DraftCheckpoint`, which shows the draft loader only the MTP keys and fails with :class:`MissingDraftWeights`,
naming the missing tensors, when the checkpoint has none or lacks some.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..checkpoint_error import CheckpointError


class MissingDraftWeights(CheckpointError):
    """The checkpoint lacks the MTP tensors a draft head needs (speculative decoding cannot use its own MTP layers)."""


def mtp_layer_config(config: Any, block: str, layer_idx: int) -> Any:
    """``config`` seen by the MTP decoder layer at checkpoint index ``layer_idx``: ``layer_block`` returns the spec's
    ``mtp.block`` (the main model's block rule would index ``layer_types`` out of range, or pick a GDN / dense block:
    MTP layers are full-attention, MoE where the model has experts — transformers' ``get_mtp_config``) and
    ``num_hidden_layers`` covers ``layer_idx`` (the neuron mappings loop over it)."""
    view = copy.copy(config)  # frozen dataclass: shallow copy, then set through object.__setattr__
    object.__setattr__(view, "layer_block", lambda i: block)
    object.__setattr__(view, "num_hidden_layers", max(int(config.num_hidden_layers), layer_idx + 1))
    return view


def layer_mappings(
    mappings_fn: Callable[[Any, set[str]], Mapping[str, Sequence[str]]], config: Any, block: str, layer_idx: int,
    available: Iterable[str], prefix: str,
) -> dict[str, list[str]]:
    """Neuron parameter -> checkpoint keys of the MTP decoder layer, from the target's generated ``checkpoint_mappings``
    (the one place that knows each block's parameter names): its ``model.layers.{layer_idx}.`` entries, moved under
    ``prefix`` (the draft's module path, which is also the checkpoint's: ``mtp.layers.0.`` or ``model.layers.61.``)."""
    src = f"model.layers.{layer_idx}."
    moved = {src + k[len(prefix):] for k in available if k.startswith(prefix)}
    out: dict[str, list[str]] = {}
    for param, keys in mappings_fn(mtp_layer_config(config, block, layer_idx), moved).items():
        if param.startswith(src):
            out[prefix + param[len(src):]] = [prefix + k[len(src):] for k in keys]
    return out


class DraftCheckpoint:
    """A checkpoint restricted to the keys under ``prefixes`` (the draft's own tensors), minus ``shared`` key suffixes
    (copies of the target's embedding / LM head, which the draft reads from the target).

    Everything else (``files``, ``shape``, ``dtype``, ``get_slice``...) forwards to the inner checkpoint, so either
    target's loader runs unchanged and stays strict: a draft parameter without its tensor is a
    :class:`MissingDraftWeights` naming it (see :func:`check_complete`).
    """

    raw_reads = True

    def __init__(self, inner: Any, prefixes: Sequence[str], shared: Sequence[str] = (), what: str = "MTP head"):
        self._inner = inner
        self.prefixes = tuple(prefixes)
        self.what = what
        self.shared_keys = [k for k in inner.keys() if k.startswith(self.prefixes) and k.endswith(tuple(shared))] \
            if shared else []
        skip = set(self.shared_keys)
        self._keys = [k for k in inner.keys() if k.startswith(self.prefixes) and k not in skip]
        self._key_set = set(self._keys)
        if not self._keys:
            raise MissingDraftWeights(
                f"{_where(inner)}: no {what} tensors ({' or '.join(p + '*' for p in self.prefixes)}): this checkpoint "
                f"has no multi-token-prediction layers, so it cannot draft for speculative decoding"
            )
        self.raw_reads = getattr(inner, "raw_reads", True)

    def keys(self) -> list[str]:
        return list(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, name: object) -> bool:
        return name in self._key_set

    def __getattr__(self, attr: str):  # files, file_of, shape, dtype, get_slice, get_tensor, metadata, ...
        return getattr(self._inner, attr)

    def check_complete(self, expected: Iterable[str]) -> None:
        """Every key in ``expected`` present, else one :class:`MissingDraftWeights` naming the missing ones."""
        missing = [k for k in expected if k not in self._key_set]
        if missing:
            shown = ", ".join(missing[:6]) + (f" (+{len(missing) - 6} more)" if len(missing) > 6 else "")
            raise MissingDraftWeights(f"{_where(self._inner)}: {self.what} tensor(s) missing: {shown}")


def _where(checkpoint: Any) -> str:
    files = getattr(checkpoint, "files", None)
    return str(files[0].parent) if files else "checkpoint"


def load_draft(load: Callable[[Any], None], view: DraftCheckpoint) -> None:
    """Run a target loader over the draft view; its strict coverage errors become :class:`MissingDraftWeights` /
    :class:`CheckpointError` naming the draft (a missing MTP tensor is the checkpoint's fault, not the main model's)."""
    try:
        load(view)
    except MissingDraftWeights:
        raise
    except CheckpointError as e:
        text = str(e)
        cls = MissingDraftWeights if "missing" in text.lower() else CheckpointError
        raise cls(f"{view.what}: {text}") from None
