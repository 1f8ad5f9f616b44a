"""Checkpoint tensors stored already fused, read as their parts: the spec's ``checkpoint.split`` (the reverse of
``checkpoint.fuse``).

Phi-3 checkpoints hold ``self_attn.qkv_proj.weight`` (q rows, then k, then v) and ``mlp.gate_up_proj.weight`` (gate
rows, then up). A :class:`CheckpointSplit` names the stored module, the axis and the part modules in storage order;
its ``sizes(config)`` (generated from the spec's expressions) gives each part's extent along the axis. Every
checkpoint tensor of the module (``.weight``, ``.bias``, ...) is then read as the tensors ``<part>.<suffix>`` would be
if the checkpoint stored them separately, so the rest of loading is unchanged:

* rocm (:mod:`~modelgen.runtime.loader.packed`): the model's ``packed_modules_mapping`` maps the stored module to a
  :class:`CheckpointSplit` instead of a shard id; the loader reads the tensor once, and hands each part (a view, no
  copy) to the route its part name has (``q_proj`` -> ``qkv_proj`` shard ``"q"``), whose ``weight_loader`` takes this
  rank's rows of it as for an unfused checkpoint. Coverage counts each part's slot.
* neuron (:mod:`~modelgen.runtime.loader.mapped`): :func:`split_mappings` replaces every mapped key that names a part
  with a :class:`SplitPart` (a ``str``: the part's key, carrying the stored key and its range); the loader reads it
  through a lazy slice restricted to the part, so a rank's closure loader reads only its own rows of each part.
  The stored tensor counts as used once every part of it was mapped.

An interleaved split (``groups``: GPT-NeoX's ``query_key_value`` rows ``[heads, 3, head_dim]``, Falcon-40B's ``[kv_heads,
q_per_kv + 2, head_dim]``) repeats the parts in each of ``groups(config)`` groups along the axis; the sizes are per
group, and :meth:`CheckpointSplit.take` gathers a part's rows from every group (a copy, not a view).

A stored tensor whose extent along the axis is not the sum of the sizes is refused with one line naming the file,
the tensor, its shape and the expected sizes (a config/checkpoint mismatch, e.g. the wrong num_key_value_heads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from .checkpoint import CheckpointError


@dataclass(frozen=True)
class CheckpointSplit:
    """``module`` (a checkpoint module name, e.g. ``qkv_proj``) is stored as ``parts`` concatenated along ``axis``."""

    module: str
    axis: int
    parts: tuple[str, ...]
    sizes: Callable[[Any], Sequence[int]]  # config -> one extent per part (the spec's expressions)
    groups: Callable[[Any], int] | None = None  # config -> interleaved groups the parts repeat in; None: one

    def num_groups(self, config: Any) -> int:
        return 1 if self.groups is None else int(self.groups(config))

    def stored_in(self, key: str) -> bool:
        """``key`` is a tensor of the stored module (matched on whole dotted segments, as packed names are)."""
        return self.module in key.split(".")[:-1]

    def part_key(self, key: str, part: str) -> str:
        """``model.layers.0.self_attn.qkv_proj.weight`` -> ``model.layers.0.self_attn.q_proj.weight``."""
        segments = key.split(".")
        i = len(segments) - 2 - segments[:-1][::-1].index(self.module)
        return ".".join(segments[:i] + [part] + segments[i + 1 :])

    def ranges(self, config: Any, key: str, shape: Sequence[int], file: Any) -> list[tuple[str, int, int]]:
        """``(part, start, stop)`` along the axis for the stored tensor ``key`` of ``shape``; CheckpointError naming
        the file, tensor, shape and expected sizes when they do not add up."""
        sizes = [int(s) for s in self.sizes(config)]
        if len(sizes) != len(self.parts):
            raise CheckpointError(f"checkpoint.split '{self.module}': {len(sizes)} sizes for parts {self.parts}")
        groups = self.num_groups(config)
        total = sum(sizes) * groups
        expected = " + ".join(f"{p} {n}" for p, n in zip(self.parts, sizes))
        if groups != 1:
            expected = f"{groups} groups x ({expected})"
        if self.axis >= len(shape) or shape[self.axis] != total:
            got = f"dim {self.axis} is {shape[self.axis]}" if self.axis < len(shape) else f"it has no dim {self.axis}"
            raise CheckpointError(
                f"{file}: tensor '{key}' has shape {tuple(shape)}; checkpoint.split '{self.module}' expects dim "
                f"{self.axis} = {total} ({expected}, from config.json), but {got}"
            )
        out, start = [], 0
        for part, n in zip(self.parts, sizes):
            out.append((part, start, start + n))
            start += n
        return out

    def take(self, config: Any, tensor: Any, start: int, stop: int) -> Any:
        """The part at ``start:stop`` (a range :meth:`ranges` gave) of the stored ``tensor``: a narrowed view, or for
        an interleaved split that range of every group, concatenated in group order."""
        groups = self.num_groups(config)
        if groups == 1:
            return tensor.narrow(self.axis, start, stop - start)
        grouped = tensor.unflatten(self.axis, (groups, -1))
        return grouped.narrow(self.axis + 1, start, stop - start).flatten(self.axis, self.axis + 1)


def split_of(key: str, splits: Iterable[CheckpointSplit]) -> CheckpointSplit | None:
    return next((s for s in splits if s.stored_in(key)), None)


class SplitPart(str):
    """A mapped checkpoint key that is a part of a stored fused tensor: the string is the part's own key (what the
    mapping and error messages show); ``source`` is the stored tensor's key, ``split`` the rule."""

    source: str
    split: CheckpointSplit
    part: str

    def __new__(cls, key: str, source: str, split: CheckpointSplit, part: str) -> "SplitPart":
        self = super().__new__(cls, key)
        self.source, self.split, self.part = source, split, part
        return self


def stored_key(key: str) -> str:
    """The checkpoint key a mapped key reads: the stored tensor for a :class:`SplitPart`, else the key itself."""
    return key.source if isinstance(key, SplitPart) else key


def split_mappings(mappings: Mapping[str, Sequence[str]], splits: Sequence[CheckpointSplit]) -> dict[str, list[str]]:
    """Neuron mappings with every key that names a part of a split module (``...q_proj.weight``) replaced by a
    :class:`SplitPart` of the stored tensor (``...qkv_proj.weight``)."""
    by_part = {part: s for s in splits for part in s.parts}

    def rewrite(key: str) -> str:
        segments = key.split(".")
        for i in range(len(segments) - 2, -1, -1):
            s = by_part.get(segments[i])
            if s is not None:
                source = ".".join(segments[:i] + [s.module] + segments[i + 1 :])
                return SplitPart(key, source, s, segments[i])
        return key

    return {param: [rewrite(k) for k in keys] for param, keys in mappings.items()}


class SplitReader:
    """The neuron loader's side: lazy slices of parts, and which stored tensors were consumed whole."""

    def __init__(self, checkpoint: Any, config: Any):
        self.checkpoint, self.config = checkpoint, config
        self._used: dict[str, tuple[CheckpointSplit, set[str]]] = {}  # stored key -> (rule, parts mapped so far)

    def slice(self, part: SplitPart, stored: str) -> Any:
        """A lazy slice of ``stored`` (the checkpoint's own name of ``part.source``) restricted to the part."""
        from ..neuron.weight_loader import SliceView

        ck = self.checkpoint
        ranges = part.split.ranges(self.config, stored, ck.shape(stored), ck.file_of(stored))
        start, stop = next((a, b) for p, a, b in ranges if p == part.part)
        self._used.setdefault(stored, (part.split, set()))[1].add(part.part)
        if part.split.num_groups(self.config) != 1:
            return _InterleavedPart(ck.get_slice(stored), part.split, self.config, start, stop)
        return SliceView(ck.get_slice(stored), part.split.axis, start, stop - 1)

    def fully_used(self) -> list[str]:
        """Stored keys every part of which was mapped (they count as used; a partly used one stays unexpected)."""
        return [k for k, (rule, parts) in self._used.items() if set(rule.parts) <= parts]


class _InterleavedPart:
    """A part of an interleaved split as a lazy slice (``get_shape`` / ``[...]``): indexing reads the stored tensor
    whole, gathers the part's rows from every group (:meth:`CheckpointSplit.take`) and indexes that."""

    def __init__(self, inner: Any, split: CheckpointSplit, config: Any, start: int, stop: int):
        self.inner, self.split, self.config, self.start, self.stop = inner, split, config, start, stop

    def get_shape(self) -> list[int]:
        shape = list(self.inner.get_shape())
        shape[self.split.axis] = (self.stop - self.start) * self.split.num_groups(self.config)
        return shape

    def __getitem__(self, index: Any) -> Any:
        whole = self.inner[tuple(slice(None) for _ in self.inner.get_shape())]
        return self.split.take(self.config, whole, self.start, self.stop)[index]
