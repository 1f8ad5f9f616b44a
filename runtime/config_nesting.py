"""Unread keys *inside* config.json's nested mappings (issue 26: no silent wrong output).

The top-level check (runtime/hf_config.py ``unread_config_keys``) says whether a spec reads a key at all. A mapping
value can still hide a field the generated model does not honour: transformers 5 writes ``partial_rotary_factor``
inside ``rope_parameters``, HunYuan adds an NTK ``alpha`` to ``rope_type: dynamic``. So every mapping a spec reaches
is walked too:

* a sub-key the spec reads by a dotted key (``rope_parameters.rope_theta``) or lists under ``config_ignore:``
  (``rope_parameters.mrope_section``) is accounted for, and so is a whole subtree one of those names;
* a mapping the spec reads *whole* is a RoPE dict (``rope_scaling`` is the only mapping-valued field type): the
  keys runtime/ops/rope.py implements for its ``rope_type`` are accounted for, any other key is **unimplemented**
  -- a value the spec reads but the model would not honour -- and refused by name whatever ``strict`` says;
* a mapping reached only through dotted reads is walked the same way, one level down (Gemma 3's
  ``rope_parameters.{sliding_attention, full_attention}``);
* a mapping the spec never reads (and does not ignore) is reported by the top-level check as one key;
* inside a mapping reached through dotted reads, transformers' generic keys (``generic``: the bookkeeping every
  serialized sub-config carries, DBRX's ``attn_config.id2label`` / ``ffn_config.model_type``) are accounted for.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

# rope_type -> the parameters runtime/ops/rope.py reads for it (rope_type / legacy "type" name the kind itself).
ROPE_PARAMETERS: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "dynamic": frozenset({"factor"}),
    "llama3": frozenset({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}),
    "yarn": frozenset({"factor", "original_max_position_embeddings", "attention_factor", "mscale", "mscale_all_dim",
                       "beta_fast", "beta_slow", "truncate"}),
}
ROPE_TYPE_KEYS = frozenset({"rope_type", "type"})


def _covered(path: str, names: set[str]) -> bool:
    """``path`` or one of its parents is in ``names`` (an ignored subtree)."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in names for i in range(1, len(parts) + 1))


def _reaches_into(path: str, read: set[str]) -> bool:
    """Some read key lies strictly below ``path`` (it is read through dotted keys)."""
    return any(k.startswith(path + ".") for k in read)


def nested_unread_keys(config: Mapping[str, Any], read: Sequence[str], ignored: Sequence[str] = (),
                       generic: frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(unread, unimplemented) dotted keys inside the mappings of ``config`` that the spec reaches (see the module
    docstring); each list sorted. Top-level keys are the top-level check's job and never appear here."""
    read_set, ignored_set = set(read), set(ignored)
    unread: list[str] = []
    unimplemented: list[str] = []

    def walk(prefix: str, value: Mapping[str, Any]) -> None:
        whole = prefix in read_set
        rope_type = str(value.get("rope_type") or value.get("type") or "default") if whole else ""
        implemented = ROPE_PARAMETERS.get(rope_type, frozenset()) | ROPE_TYPE_KEYS
        for key, sub in value.items():
            path = f"{prefix}.{key}"
            if _covered(path, ignored_set):
                continue
            if path in read_set or _reaches_into(path, read_set):
                if isinstance(sub, Mapping):
                    walk(path, sub)
                continue
            if not whole and key not in generic:
                unread.append(path)
            elif key not in implemented and rope_type in ROPE_PARAMETERS:
                unimplemented.append(path)
            # (a whole-read dict of an unknown rope_type: runtime/ops/rope.py refuses the type itself, by name)

    for key, value in config.items():
        if isinstance(value, Mapping) and key not in ignored_set and (key in read_set or _reaches_into(key, read_set)):
            walk(key, value)
    return sorted(unread), sorted(unimplemented)
