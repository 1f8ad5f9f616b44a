"""Spec inheritance: a spec that reads as its delta over another (as transformers' ``modular_qwen3.py`` over Llama).

Semantics (resolved in the YAML layer, so schema and lowering see one plain document)::

    extends: llama.yaml          # top-level: a relative path to the base spec, beside this one (no '/', '..' escapes)

* **Mappings merge recursively**: a key the child gives is merged into the base's value at that key; a key it does not
  give is inherited unchanged. Merged mappings keep the base's key order; keys new in the child follow, in its order
  (config field order is the order of the generated config class, so an override stays where the base declared it).
* **Scalars and lists replace** the base's value whole (``architectures: [...]``, ``ignore: [...]``).
* ``key: !remove`` deletes an inherited key (e.g. a config field the model does not read). Removing a key the base
  does not have is an error (it would hide a typo).
* ``key: !replace {...}`` replaces an inherited mapping instead of merging into it (an MLP that becomes an MoE: none of
  the dense MLP's keys should survive). The base must have the key.
* ``extends: blocks.decoder`` *inside* a mapping starts that mapping from the base spec's mapping at that dotted path
  (instead of the base's value at the same path), then merges the mapping's own keys over it: Qwen3-MoE's ``dense``
  and ``sparse`` blocks are both Qwen3's ``decoder`` block, the sparse one with another MLP.
* The identity keys ``name``, ``class_prefix``, ``description`` and ``hf`` are never inherited: every spec names its
  own model, classes and HF architectures (two packages with one name would overwrite each other).
* ``config_ignore`` is never inherited either: it says which config.json keys do not change *this family's* forward
  pass, and a key meaningless to the base can mean something to a new family that extends it (Qwen3 ignores
  ``sliding_window`` because ``use_sliding_window`` gates it; a family without that gate must not). Each spec lists
  its own; a base key the child does not restate is then an unread key, warned about at run (an error with
  ``--strict-config``) and reported by ``modelgen verify``, never silently ignored. ``config_ignore: !remove`` is an
  error (there is nothing inherited to remove).
* Chains are allowed (qwen3_moe -> qwen3 -> llama), up to :data:`MAX_EXTENDS_DEPTH` specs; a cycle is an error at the
  ``extends`` that closes it. The source hash of a generated module covers the text of every spec in the chain.

Every node of the result keeps the position of the file that set it (see
:class:`~modelgen.codegen.source_map.SourceMap`): an error on an inherited value names the base spec's line, on an
overridden or added one the child's. ``!remove``, ``!replace`` and an inner ``extends`` in a spec without a top-level
``extends`` are errors.
"""
from __future__ import annotations

from typing import Any

from .errors import SpecError, SpecIssue
from .source_map import Path_, SourceMap

REMOVE_TAG = "!remove"
REPLACE_TAG = "!replace"
IDENTITY_KEYS = ("name", "class_prefix", "description", "hf")
NOT_INHERITED = IDENTITY_KEYS + ("config_ignore",)  # see the module docstring: one family's knowledge each
MAX_EXTENDS_DEPTH = 10  # specs in one chain; Qwen3.5 -> Qwen3.5-MoE -> Qwen3-Next -> Qwen3-MoE -> Qwen3 -> Llama is 6


class _Remove:
    """The value of a ``key: !remove`` entry until the merge drops the key."""

    _instance: "_Remove | None" = None

    def __new__(cls) -> "_Remove":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return REMOVE_TAG


REMOVE = _Remove()


class _Merger:
    def __init__(self, base: dict[str, Any] | None, base_smap: SourceMap | None, child_smap: SourceMap,
                 replace: set[Path_], max_nodes: int):
        self.base = base
        self.base_smap = base_smap
        self.child = child_smap
        self.replace = replace
        self.max_nodes = max_nodes
        self.out = SourceMap(child_smap.file)
        self.out.sources = list(child_smap.sources) + (list(base_smap.sources) if base_smap else [])
        self.issues: list[SpecIssue] = []
        self.nodes = 0

    def error(self, path: Path_, message: str, at_key: bool = False) -> None:
        self.issues.append(self.child.issue(path, message, at_key=at_key))

    def _count(self, path: Path_) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise SpecError([self.child.issue(path, f"spec expands to more than {self.max_nodes} values "
                                                    "(after extends)")])

    # -- inherited values: positions stay in the base file
    def inherit(self, value: Any, smap: SourceMap, src: Path_, dst: Path_) -> Any:
        self._count(dst)
        self.out.copy_node(smap, src, dst)
        if isinstance(value, dict):
            return {k: self.inherit(v, smap, src + (k,), dst + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.inherit(v, smap, src + (i,), dst + (i,)) for i, v in enumerate(value)]
        return value

    # -- the child's values, merged over the base's at the same path (or at an inner `extends`)
    def merge(self, base: Any, base_at: Path_ | None, value: Any, path: Path_) -> Any:
        self._count(path)
        self.out.copy_node(self.child, path, path)
        if value is REMOVE:
            self.error(path, f"'{REMOVE_TAG}' must be the value of a mapping key that the base spec has")
            return None
        if isinstance(value, list):
            return [self.merge(None, None, v, path + (i,)) for i, v in enumerate(value)]
        if not isinstance(value, dict):
            return value
        if path and "extends" in value:
            base, base_at = self.lookup(value["extends"], path + ("extends",))
            value = {k: v for k, v in value.items() if k != "extends"}
        elif path in self.replace:
            if self.base is None:
                self.error(path, f"'{REPLACE_TAG}' needs a spec that extends another (top-level `extends:`)")
            elif base is None:
                self.error(path, f"'{REPLACE_TAG}': the base spec has no value here to replace")
            base, base_at = None, None
        if not isinstance(base, dict):
            base, base_at = {}, None
        out: dict[Any, Any] = {}
        for key, inherited in base.items():
            if key not in value:
                assert base_at is not None and self.base_smap is not None
                out[key] = self.inherit(inherited, self.base_smap, base_at + (key,), path + (key,))
            elif value[key] is not REMOVE:
                out[key] = self.merge(inherited, base_at + (key,) if base_at is not None else None, value[key],
                                      path + (key,))
        for key, own in value.items():
            if key in base:
                continue
            if own is REMOVE:
                where = "needs a spec that extends another (top-level `extends:`)" if self.base is None else (
                    f"'{key}' is never inherited (each spec lists its own), so there is nothing to remove"
                    if not path and key in NOT_INHERITED else f"the base spec has no '{key}' here to remove")
                self.error(path + (key,), f"'{REMOVE_TAG}' {where}", at_key=True)
                continue
            out[key] = self.merge(None, None, own, path + (key,))
        return out

    def lookup(self, target: Any, at: Path_) -> tuple[Any, Path_ | None]:
        """The base spec's mapping at a dotted path (an inner ``extends: blocks.decoder``)."""
        if self.base is None:
            self.error(at, "an inner `extends:` needs a spec that extends another (top-level `extends:`)")
            return None, None
        if not isinstance(target, str) or not target:
            self.error(at, "expected a dotted path into the base spec, e.g. blocks.decoder")
            return None, None
        node: Any = self.base
        path: Path_ = ()
        for part in target.split("."):
            key: Any = part
            if isinstance(node, dict) and part not in node and part.lstrip("-").isdigit() and int(part) in node:
                key = int(part)  # integer keys (shard ids)
            if not isinstance(node, dict) or key not in node:
                known = ", ".join(str(k) for k in node) if isinstance(node, dict) else "none"
                there = ".".join(map(str, path)) or "the top"
                self.error(at, f"the base spec has no '{target}' (no '{part}' at {there}; keys there: {known})")
                return None, None
            node, path = node[key], path + (key,)
        if not isinstance(node, dict):
            self.error(at, f"the base spec's '{target}' is a {type(node).__name__}, not a mapping")
            return None, None
        return node, path


def resolve_extends(base: dict[str, Any] | None, base_smap: SourceMap | None, data: dict[str, Any],
                    smap: SourceMap, replace: set[Path_], max_nodes: int
                    ) -> tuple[dict[str, Any], SourceMap]:
    """Merge ``data`` (one file, its ``extends`` key included) over ``base`` (already resolved, or None)."""
    child = {k: v for k, v in data.items() if k != "extends"}
    merger = _Merger(base, base_smap, smap, replace, max_nodes)
    base_view = None if base is None else {k: v for k, v in base.items() if k not in NOT_INHERITED}
    merged = merger.merge(base_view, () if base is not None else None, child, ())
    if merger.issues:
        raise SpecError(merger.issues)
    return merged, merger.out
