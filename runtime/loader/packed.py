"""rocm-target loading (ATOM style): stream checkpoint tensors, route each to a parameter's ``weight_loader``.

Routing uses the generated tables of ``generated/rocm/<model>/weights.py``: renames, ignore patterns, the
``packed_modules_mapping`` (q/k/v -> qkv_proj, gate/up -> gate_up_proj) and tied parameters.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from .checkpoint import Checkpoint, CheckpointError
from .names import IgnoreRules, apply_renames, resolve_packed
from .report import Coverage


def _expected_slots(model: nn.Module, packed: Mapping[str, tuple[str, Any]], skip: set[str]) -> list[tuple[str, Any]]:
    shards_of: dict[str, list[Any]] = {}
    for fused, shard in packed.values():
        shards_of.setdefault(fused, []).append(shard)
    slots = []
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if name in skip or id(param) in seen:
            continue
        seen.add(id(param))
        module_name = name.split(".")[-2] if "." in name else ""
        if module_name in shards_of:
            slots += [(name, s) for s in shards_of[module_name]]
        else:
            slots.append((name, None))
    return slots


def load_packed_weights(
    model: nn.Module,
    checkpoint: Checkpoint,
    *,
    packed_modules_mapping: Mapping[str, tuple[str, Any]],
    ignored: tuple[str, ...],
    renames: tuple[tuple[str, str], ...],
    tied: Mapping[str, str],
) -> None:
    """Fill every parameter of ``model`` from ``checkpoint``; raise CheckpointError on any mismatch.

    ``tied`` maps a parameter that shares storage with another (``lm_head.weight`` -> ``model.embed_tokens.weight``)
    when the config ties them: it is filled through its twin, and a checkpoint copy of it is ignored.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    rules = IgnoreRules(ignored)
    coverage = Coverage(checkpoint.keys(), _expected_slots(model, packed_modules_mapping, set(tied)))
    for key in checkpoint.keys():
        name = apply_renames(key, renames)
        pattern = rules.match(name)
        if pattern is not None:
            coverage.ignore(key, f"checkpoint.ignore '{pattern}'")
            continue
        if name in tied:
            coverage.ignore(key, f"tied to {tied[name]}")
            continue
        param_name, shard = resolve_packed(name, packed_modules_mapping)
        param = params.get(param_name)
        if param is None:
            continue  # reported as unexpected by coverage
        tensor = checkpoint.get_tensor(key)
        if tensor.is_floating_point() != param.is_floating_point():
            raise CheckpointError(
                f"{checkpoint.file_of(key)}: tensor '{key}' has dtype {tensor.dtype}, "
                f"parameter '{param_name}' expects {param.dtype}"
            )
        loader = getattr(param, "weight_loader", None)
        try:
            if loader is None:
                if tuple(tensor.shape) != tuple(param.shape):
                    raise ValueError(f"checkpoint tensor has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}")
                param.data.copy_(tensor)
            else:
                loader(param, tensor, shard) if shard is not None else loader(param, tensor)
        except ValueError as e:
            raise CheckpointError(
                f"{checkpoint.file_of(key)}: tensor '{key}' (dtype {tensor.dtype}) -> parameter '{param_name}': {e}"
            ) from None
        coverage.fill(param_name, shard, key)
    coverage.check(str(checkpoint.files[0].parent))
