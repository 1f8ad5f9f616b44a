"""rocm-target loading (ATOM style): stream checkpoint tensors, route each to a parameter's ``weight_loader``.

Routing uses the generated tables of ``generated/rocm/<model>/weights.py``: renames, ignore patterns, the
``packed_modules_mapping`` (q/k/v -> qkv_proj, gate/up -> gate_up_proj), the expert mappings (per-expert names with
``{e}`` and transformers v5 fused names) and tied parameters.

Per-expert tensors go through :class:`~modelgen.runtime.loader.experts.ExpertStager`: with more than one loader thread
(``MODELGEN_LOADER_NUM_THREADS``, default 16) they are read on a thread pool and copied once per stacked parameter;
with one thread each expert is copied through the module's ``weight_loader`` as it is read.

When the model's parameters are on a CUDA device, the other tensors are read in file order by
:class:`~modelgen.runtime.loader.device_reader.DeviceReader` (parallel reads into pinned buffers, async host-to-device copies,
bounded read-ahead), so the ``weight_loader``s copy device to device.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from .checkpoint import Checkpoint, CheckpointError
from .experts import ExpertStager, default_num_threads
from .names import ExtraLayers, IgnoreRules, apply_renames, resolve_packed
from .quantization import process_weights_after_loading
from .report import Coverage

EXPERTS = "experts"  # coverage slot of a stacked expert parameter


def _expected_slots(
    model: nn.Module, modules: Mapping[str, nn.Module], packed: Mapping[str, tuple[str, Any]], skip: set[str]
) -> list[tuple[str, Any]]:
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
        if getattr(param, "is_expert_param", False):
            slots.append((name, EXPERTS))
            module = modules.get(name.rsplit(".", 1)[0])
            if getattr(module, "num_shared_experts", 0):  # fused shared-expert slots, filled from their own tensors
                slots += [(name, s) for s in (("shared_w1", "shared_w3") if name.endswith("w13_weight") else ("shared_w2",))]
        elif module_name in shards_of:
            slots += [(name, s) for s in shards_of[module_name]]
        else:
            slots.append((name, None))
    return slots


def _expert_rules(mapping: Sequence[tuple[str, str, str]]) -> list[tuple[re.Pattern, str, str]]:
    """``("experts.w13_weight", "experts.{e}.gate_proj.weight", "w1")`` -> (regex over full keys, param suffix, shard)."""
    rules = []
    for param, pattern, shard in mapping:
        body = re.escape(pattern).replace(r"\{e\}", r"(?P<e>\d+)")
        rules.append((re.compile(rf"^(?P<block>.+)\.{body}$"), param, shard))
    return rules


class _ExpertLoads:
    """Per-expert tensors of every stacked parameter, staged until each parameter is complete."""

    def __init__(self, params: dict[str, nn.Parameter], modules: dict[str, nn.Module], num_threads: int):
        self.params, self.modules = params, modules
        self.num_threads = num_threads
        self.executor = ThreadPoolExecutor(num_threads, thread_name_prefix="modelgen-load") if num_threads > 1 else None
        self.stagers: dict[str, ExpertStager] = {}

    def stager(self, param_name: str) -> ExpertStager:
        if param_name not in self.stagers:
            module = self.modules[param_name.rsplit(".", 1)[0]]
            param = self.params[param_name]
            shards = ("w1", "w3") if param_name.endswith("w13_weight") else ("w2",)
            offset = module.expert_offset
            self.stagers[param_name] = ExpertStager(
                module.num_local_experts, shards,
                lambda stacked, m=module, p=param: m.load_stacked(p, stacked),
                self.num_threads, name=param_name, executor=self.executor,
                per_expert_loader=lambda e, s, t, m=module, p=param: m.weight_loader(p, t, s, e + offset),
            )
        return self.stagers[param_name]

    def finish(self) -> list[str]:
        try:
            for stager in self.stagers.values():
                stager.finish()
        finally:
            if self.executor is not None:
                self.executor.shutdown(wait=True)
        return list(self.stagers)


def load_packed_weights(
    model: nn.Module,
    checkpoint: Checkpoint,
    *,
    packed_modules_mapping: Mapping[str, tuple[str, Any]],
    ignored: tuple[str, ...],
    renames: tuple[tuple[str, str], ...],
    tied: Mapping[str, str],
    expert_mapping: Sequence[tuple[str, str, str]] = (),
    fused_expert_mapping: Sequence[tuple[str, str, str]] = (),
    shared_expert_mapping: Sequence[tuple[str, str, str]] = (),
    num_threads: int | None = None,
) -> None:
    """Fill every parameter of ``model`` from ``checkpoint``; raise CheckpointError on any mismatch.

    ``tied`` maps a parameter that shares storage with another (``lm_head.weight`` -> ``model.embed_tokens.weight``)
    when the config ties them: it is filled through its twin, and a checkpoint copy of it is ignored.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = dict(model.named_modules())
    rules = IgnoreRules(ignored)
    extra_layers = ExtraLayers.of(model)
    coverage = Coverage(checkpoint.keys(), _expected_slots(model, modules, packed_modules_mapping, set(tied)))
    per_expert = _expert_rules(expert_mapping)
    fused_experts = {pattern: (param, shard) for param, pattern, shard in fused_expert_mapping}
    # Shared experts fused into the expert stack: one tensor per shard, split into slots by the module's loader.
    fused_experts.update({pattern: (param, shard) for param, pattern, shard in shared_expert_mapping})
    experts = _ExpertLoads(params, modules, default_num_threads() if num_threads is None else num_threads)

    def fail(key: str, param_name: str, err: Exception) -> CheckpointError:
        return CheckpointError(
            f"{checkpoint.file_of(key)}: tensor '{key}' (shape {tuple(checkpoint.shape(key))}, dtype "
            f"{checkpoint.dtype(key)}) -> parameter '{param_name}': {err}"
        )

    def fetched(key: str) -> bool:  # the routing below, without side effects: does the loop read this tensor?
        name = apply_renames(key, renames)
        if rules.match(name) is not None or extra_layers.match(name) is not None or name in tied \
                or _match_expert(name, per_expert, params) is not None:
            return False
        param_name, _ = _match_fused_expert(name, fused_experts, params) or resolve_packed(name, packed_modules_mapping)
        return param_name in params

    reader = _device_reader(model, checkpoint, fetched)
    keys = reader.order_all if reader is not None else checkpoint.keys()
    fetch = reader.fetch if reader is not None else checkpoint.get_tensor
    try:
        for key in keys:
            name = apply_renames(key, renames)
            pattern = rules.match(name)
            if pattern is not None:
                coverage.ignore(key, f"checkpoint.ignore '{pattern}'")
                continue
            skipped = extra_layers.match(name)
            if skipped is not None:
                coverage.ignore(key, skipped)
                continue
            if name in tied:
                coverage.ignore(key, f"tied to {tied[name]}")
                continue
            expert_hit = _match_expert(name, per_expert, params)
            if expert_hit is not None:
                param_name, shard, expert = expert_hit
                module = modules[param_name.rsplit(".", 1)[0]]
                local = module.local_index(expert)
                coverage.unused.discard(key)
                if local is not None:
                    experts.stager(param_name).add(local, shard, lambda k=key: checkpoint.get_tensor(k))
                continue
            param_name, shard = _match_fused_expert(name, fused_experts, params) or resolve_packed(name, packed_modules_mapping)
            param = params.get(param_name)
            if param is None:
                continue  # reported as unexpected by coverage
            tensor = fetch(key)
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
                elif getattr(param, "is_expert_param", False):
                    loader(param, tensor, shard)  # fused tensor of every expert, or a shared expert's slots
                    shard = shard if shard.startswith("shared_") else EXPERTS
                else:
                    loader(param, tensor, shard) if shard is not None else loader(param, tensor)
            except ValueError as e:
                raise fail(key, param_name, e) from None
            coverage.fill(param_name, shard, key)
        for param_name in experts.finish():
            coverage.fill(param_name, EXPERTS, f"per-expert tensors of {param_name}")
    except ValueError as e:  # a staged per-expert copy with a wrong shape
        raise CheckpointError(str(e)) from None
    finally:
        if reader is not None:
            reader.close()
    coverage.check(str(checkpoint.files[0].parent))
    process_weights_after_loading(model)


class _ReaderRoute:
    """Keys in file order and a fetch that reads ahead to the GPU (falls back per key to the mmap reader)."""

    def __init__(self, checkpoint: Checkpoint, device: torch.device, num_threads: int, fetched):
        from .device_reader import DeviceReader, file_order

        self.checkpoint = checkpoint
        self.order_all = file_order(checkpoint, checkpoint.keys())
        wanted = [k for k in self.order_all if fetched(k)]
        self.reader = DeviceReader(checkpoint, wanted, device, num_threads=num_threads)
        self.fast = set(self.reader.order)

    def fetch(self, key: str) -> torch.Tensor:
        return self.reader.get(key) if key in self.fast else self.checkpoint.get_tensor(key)

    def close(self) -> None:
        self.reader.close()


def _device_reader(model: nn.Module, checkpoint: Checkpoint, fetched):
    """A GPU read-ahead route when the model's parameters live on a CUDA device (``MODELGEN_GPU_LOADER=0`` disables)."""
    import os

    probe = next(model.parameters(), None)
    if probe is None or probe.device.type != "cuda" or os.environ.get("MODELGEN_GPU_LOADER", "1") == "0":
        return None
    return _ReaderRoute(checkpoint, probe.device, min(16, max(1, default_num_threads())), fetched)


def _match_expert(name: str, rules, params) -> tuple[str, str, int] | None:
    for rx, param_suffix, shard in rules:
        m = rx.match(name)
        if m:
            param_name = f"{m['block']}.{param_suffix}"
            if param_name in params:
                return param_name, shard, int(m["e"])
    return None


def _match_fused_expert(name: str, fused: dict[str, tuple[str, str]], params) -> tuple[str, str] | None:
    for pattern, (param_suffix, shard) in fused.items():
        if name.endswith("." + pattern):
            param_name = name[: -len(pattern)] + param_suffix
            if param_name in params:
                return param_name, shard
    return None
