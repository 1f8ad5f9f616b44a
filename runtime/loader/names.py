"""Checkpoint-name rewriting, free of model and tensor state so it is unit-tested on its own (ATOM weight_names.py).

* ``apply_renames``: substring renames (``weight_scale_inv`` -> ``weight_scale``), applied to every checkpoint key.
* ``IgnoreRules``: glob-like patterns (``*`` = one dotted segment or part of one, ``**`` = any run of segments) of keys
  dropped on purpose.
* ``resolve_packed``: HF module name -> (fused parameter, shard id) via ``packed_modules_mapping``.
* ``expert_regex``: a per-expert checkpoint name with ``{e}`` -> a regex capturing the MoE block and the expert.
* ``ExtraLayers``: checkpoint keys of decoder layers beyond the model's ``num_hidden_layers`` (MTP / draft layers).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping


def apply_renames(key: str, renames: Iterable[tuple[str, str]]) -> str:
    """Substring renames, applied in order (``weight_scale_inv`` -> ``weight_scale``, ``.block_sparse_moe.`` -> ``.mlp.``)."""
    for old, new in renames:
        if old in key:
            key = key.replace(old, new)
    return key


class IgnoreRules:
    def __init__(self, patterns: Iterable[str]):
        self.patterns = tuple(patterns)
        self._regexes = [re.compile("^" + _glob(p) + "$") for p in self.patterns]

    def match(self, key: str) -> str | None:
        """The pattern that ignores ``key``, or None."""
        for pattern, rx in zip(self.patterns, self._regexes):
            if rx.match(key):
                return pattern
        return None


def _glob(pattern: str) -> str:
    """``model.visual.**`` matches every tensor under ``model.visual`` (vision towers, MTP heads); ``*`` stays within
    one dotted segment so ``layers.*.rotary_emb`` never swallows a whole subtree by accident."""
    parts = pattern.split("**")
    return ".+".join(re.escape(p).replace(r"\*", r"[^.]*") for p in parts)


def resolve_packed(key: str, packed: Mapping[str, tuple[str, object]]) -> tuple[str, object | None]:
    """``model.layers.0.self_attn.k_proj.weight`` -> (``model.layers.0.self_attn.qkv_proj.weight``, ``"k"``).

    Matches whole dotted segments, so ``q_proj`` never matches inside ``q_a_proj``.
    """
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part in packed:
            fused, shard = packed[part]
            return ".".join(parts[:i] + [fused] + parts[i + 1 :]), shard
    return key, None


def expert_regex(pattern: str) -> re.Pattern:
    """``experts.{e}.gate_proj.weight`` -> a regex over full keys capturing the MoE block and the expert index."""
    body = re.escape(pattern).replace(r"\{e\}", r"(?P<e>\d+)")
    return re.compile(rf"^(?P<block>.+)\.{body}$")


class ExtraLayers:
    """Keys of checkpoint layers at index >= the model's layer count, which normal loading skips, and (pipeline
    parallelism) the keys of modules another stage holds.

    Released GLM-4.5/4.6 and DeepSeek-V3 checkpoints carry their multi-token-prediction layer as
    ``model.layers.{num_hidden_layers}.*`` (ATOM: "only loaded when spec_decode=True"); the main model has no module for
    it. ``layer_lists`` maps each layer list's dotted name (``model.layers``) to its length, read off the built model,
    so the rule needs no spec knowledge and a truncated model (fewer ``num_hidden_layers``) skips the rest too.
    ``other_stage``: dotted module prefixes (``model.layers.3.``, ``lm_head.``) of a pipeline stage's placeholders
    (``runtime/parallel/pipeline.py``): their tensors are another stage's to read.
    """

    def __init__(self, layer_lists: Mapping[str, int], other_stage: Iterable[str] = ()):
        self.layer_lists = dict(layer_lists)
        alternatives = "|".join(re.escape(n) for n in sorted(self.layer_lists, key=len, reverse=True))
        self._rx = re.compile(rf"^(?P<list>{alternatives})\.(?P<i>\d+)\.") if alternatives else None
        self.other_stage = tuple(other_stage)

    def match(self, key: str) -> str | None:
        """Why ``key`` is skipped (a reason string), or None when it belongs to the model."""
        if self.other_stage and key.startswith(self.other_stage):
            return "held by another pipeline stage"
        m = self._rx.match(key) if self._rx is not None else None
        if m is None:
            return None
        count = self.layer_lists[m["list"]]
        if int(m["i"]) < count:
            return None
        return f"layer {m['i']} >= num_hidden_layers ({count}): MTP/draft layer, loaded only for speculative decoding"

    @classmethod
    def of(cls, model) -> "ExtraLayers":
        from torch import nn

        other_stage = ()
        if getattr(model, "pp_stage", None) is not None:
            from ..parallel.pipeline import missing_prefixes

            other_stage = missing_prefixes(model)
        return cls({name: len(m) for name, m in model.named_modules()
                    if isinstance(m, nn.ModuleList) and name.split(".")[-1] == "layers"}, other_stage)
