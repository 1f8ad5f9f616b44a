"""Find the generated model package for an HF architecture (``config.json`` ``architectures``) and a target.

Each target package (``generated/<target>/__init__.py``) holds ``MODELS``, a literal index from architecture to model
package written by codegen, so finding a model imports that one package and nothing else: importing a generated
package runs its code, and a model nobody asked for has no business running.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ..targets import check_target


def model_index(target: str) -> dict[str, str]:
    """Architecture -> model package name, for every spec built for ``target`` (imports no model package)."""
    return dict(importlib.import_module(f"modelgen.generated.{check_target(target)}").MODELS)


def _import_model(arch: str, name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise LookupError(f"{arch}: package {name} is indexed but not built; run `modelgen build --all`") from None


def _full_attention(hf_config: dict) -> bool:
    """No sliding window, or one at least as long as any position (never binding)."""
    window = hf_config.get("sliding_window")
    limit = hf_config.get("max_position_embeddings")
    return window is None or (isinstance(limit, int) and isinstance(window, int) and window >= limit)


# Checkpoints that reuse another architecture's modeling under their own name (vLLM's registry maps them alike),
# served by that architecture's spec only when no spec of their own is generated and their config stays within what
# the other spec computes: name -> (architecture served, condition on config.json, the condition in words).
ALIASES = {
    "MistralForCausalLM": ("LlamaForCausalLM", _full_attention, "sliding_window is null (full attention)"),
}


def find_model(architectures: list[str] | None, target: str, hf_config: dict | None = None) -> ModuleType:
    """The generated package serving the first of ``architectures`` that has one (a spec of its own first, then an
    :data:`ALIASES` entry whose condition ``hf_config`` meets)."""
    index = model_index(target)
    for arch in architectures or []:
        if arch in index:
            name = f"modelgen.generated.{target}.{index[arch]}"
            module = _import_model(arch, name)
            if arch not in module.ARCHITECTURES:
                raise LookupError(f"{arch}: {name} serves {module.ARCHITECTURES}; rebuild with `modelgen build --all`")
            return module
    for arch in architectures or []:
        served, condition, words = ALIASES.get(arch, (None, None, None))
        if served is None or served not in index:
            continue
        if hf_config is not None and not condition(hf_config):
            raise LookupError(f"{arch}: no generated spec of its own, and the {served} spec serves it only when "
                              f"{words} (config.json has sliding_window {hf_config.get('sliding_window')!r}); add a "
                              f"spec under specs/")
        return _import_model(arch, f"modelgen.generated.{target}.{index[served]}")
    raise LookupError(
        f"no generated {target} model for architectures {architectures}; generated: {sorted(index)} "
        f"(add a spec under specs/ and run `modelgen build`)"
    )
