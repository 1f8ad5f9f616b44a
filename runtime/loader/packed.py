"""rocm-target loading (ATOM style): stream checkpoint tensors, route each to a parameter's ``weight_loader``.

Routing reads the model's tables (the loader protocol, ``runtime/loader/protocol.py``): renames, ignore patterns,
``packed_modules_mapping`` (q/k/v -> qkv_proj, gate/up -> gate_up_proj), ``get_expert_mapping()`` (per-expert names
with ``{e}``, transformers v5 fused names, shared-expert slots) and tied parameters. The loader knows no layer's
internal names: which stacked parameter an expert tensor fills, with which shard ids, and which extra coverage slots
a shared expert adds are all rows of those tables; shard ids are passed through to the parameters' loaders.

A stacked expert parameter's module provides ``num_local_experts``, ``expert_offset``, ``local_index(expert)`` and
``load_stacked(param, {shard: [L, ...]})`` (``runtime/layers/moe/layer.py`` FusedMoE). Per-expert tensors go through
:class:`~modelgen.runtime.loader.experts.ExpertStager`: with more than one loader thread
(``MODELGEN_LOADER_NUM_THREADS``, default 16) they are read on a thread pool and copied once per stacked parameter;
with one thread each expert is copied through the parameter's ``weight_loader`` as it is read.

When the model's parameters are on a CUDA device, the other tensors are read in file order by
:class:`~modelgen.runtime.loader.device_reader.DeviceReader` (parallel reads into pinned buffers, async host-to-device copies,
bounded read-ahead), so the ``weight_loader``s copy device to device.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Mapping

import torch
from torch import nn

from .checkpoint import Checkpoint, CheckpointError
from .experts import ExpertStager, default_num_threads
from .names import ExtraLayers, IgnoreRules, apply_renames, expert_regex, resolve_packed
from .protocol import ExpertMapping, PackedTables
from .quantization import process_weights_after_loading
from .report import Coverage
from .split import CheckpointSplit

EXPERTS = "experts"  # coverage slot of a stacked expert parameter (every routed expert, staged or fused)


@dataclass(frozen=True)
class _Route:
    """Where one checkpoint key goes, decided once (the device reader's key list and the load loop both read it)."""

    param: str | None = None  # parameter name; None: skipped on purpose (``why``)
    shard: Any = None  # shard id handed to the parameter's loader (None: ``loader(param, tensor)``)
    slot: Any = None  # coverage slot the tensor fills
    expert: int | None = None  # per-expert tensor: global expert index (staged, never fetched directly)
    why: str | None = None  # reason the key is ignored
    split: CheckpointSplit | None = None  # a module stored fused (checkpoint.split): read once, loaded by ``parts``
    parts: tuple["_Route | None", ...] = ()  # the route of each part's own key, in ``split.parts`` order

    @property
    def fetched(self) -> bool:
        return self.param is not None and self.expert is None


class _Router:
    """Checkpoint key -> :class:`_Route` (or None: no parameter takes it, reported as unexpected by coverage)."""

    def __init__(self, model: nn.Module, params: Mapping[str, nn.Parameter], tables: PackedTables):
        self.params, self.tables = params, tables
        self.rules = IgnoreRules(tables.ignored)
        self.extra_layers = ExtraLayers.of(model)
        self.tied = tables.tied
        ex = tables.experts
        self.per_expert = [(expert_regex(pattern), param, shard) for param, pattern, shard in ex.per_expert]
        # Whole-tensor expert rows: a fused tensor fills the EXPERTS slot, a shared-expert tensor its own slot.
        self.whole = [(pattern, param, shard, "w3" if shard == "w3" else EXPERTS) for param, pattern, shard in ex.fused]
        self.whole += [(pattern, param, shard, shard) for param, pattern, shard in ex.shared]

    def route(self, key: str) -> _Route | None:
        name = apply_renames(key, self.tables.renames)
        pattern = self.rules.match(name)
        if pattern is not None:
            return _Route(why=f"checkpoint.ignore '{pattern}'")
        skipped = self.extra_layers.match(name)
        if skipped is not None:
            return _Route(why=skipped)
        if name in self.tied:
            return _Route(why=f"tied to {self.tied[name]}")
        for rx, param_suffix, shard in self.per_expert:
            m = rx.match(name)
            if m and f"{m['block']}.{param_suffix}" in self.params:
                return _Route(f"{m['block']}.{param_suffix}", shard, EXPERTS, expert=int(m["e"]))
        for pattern, param_suffix, shard, slot in self.whole:
            if name.endswith("." + pattern) and name[: -len(pattern)] + param_suffix in self.params:
                return _Route(name[: -len(pattern)] + param_suffix, shard, slot)
        param_name, shard = resolve_packed(name, self.tables.packed_modules_mapping)
        if isinstance(shard, CheckpointSplit):  # each part loads as if the checkpoint stored it on its own
            parts = tuple(self.route(shard.part_key(name, part)) for part in shard.parts)
            return _Route(name, split=shard, parts=parts)
        return _Route(param_name, shard, shard) if param_name in self.params else None


def _stacked_of(params: Mapping[str, nn.Parameter], experts: ExpertMapping) -> dict[str, str]:
    """Full name of every stacked expert parameter -> its name relative to the MoE block (the tables' key)."""
    suffixes = experts.stacked_params()
    return {name: s for name in params for s in suffixes if name == s or name.endswith("." + s)}


def _expected_slots(
    model: nn.Module, tables: PackedTables, stacked: Mapping[str, str], skip: set[str]
) -> list[tuple[str, Any]]:
    shards_of: dict[str, list[Any]] = {}
    for fused, shard in tables.packed_modules_mapping.values():
        if not isinstance(shard, CheckpointSplit):  # a stored-fused module fills its parts' slots, none of its own
            shards_of.setdefault(fused, []).append(shard)
    slots = []
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if name in skip or id(param) in seen:
            continue
        seen.add(id(param))
        module_name = name.split(".")[-2] if "." in name else ""
        if name in stacked:  # routed experts, plus one slot per shared-expert tensor the tables route here
            slots.append((name, EXPERTS))
            slots += [(name, s) for s in tables.experts.shared_slots(stacked[name])]
            slots += [(name, s) for s in tables.experts.fused_up_slots(stacked[name])]
        elif module_name in shards_of:
            slots += [(name, s) for s in shards_of[module_name]]
        else:
            slots.append((name, None))
    return slots


class _ExpertLoads:
    """Per-expert tensors of every stacked parameter, staged until each parameter is complete."""

    def __init__(self, params: Mapping[str, nn.Parameter], modules: Mapping[str, nn.Module],
                 stacked: Mapping[str, str], experts: ExpertMapping, num_threads: int):
        self.params, self.modules, self.stacked, self.experts = params, modules, stacked, experts
        self.num_threads = num_threads
        self.executor = ThreadPoolExecutor(num_threads, thread_name_prefix="modelgen-load") if num_threads > 1 else None
        self.stagers: dict[str, ExpertStager] = {}

    def module_of(self, param_name: str) -> nn.Module:
        return self.modules[param_name.rsplit(".", 1)[0]]

    def stager(self, param_name: str) -> ExpertStager:
        if param_name not in self.stagers:
            module = self.module_of(param_name)
            param = self.params[param_name]
            offset = module.expert_offset
            self.stagers[param_name] = ExpertStager(
                module.num_local_experts, self.experts.per_expert_shards(self.stacked[param_name]),
                lambda stacked, m=module, p=param: m.load_stacked(p, stacked),
                self.num_threads, name=param_name, executor=self.executor,
                per_expert_loader=lambda e, s, t, p=param: p.weight_loader(p, t, s, e + offset),
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
    model: nn.Module, checkpoint: Checkpoint, *, num_threads: int | None = None, **overrides: Any
) -> None:
    """Fill every parameter of ``model`` from ``checkpoint`` through the model's tables; raise CheckpointError on
    any mismatch (strict: nothing missing, nothing unused unless ignored).

    ``overrides`` replace tables by :class:`PackedTables` field name (``packed_modules_mapping``, ``ignored``,
    ``renames``, ``tied``, ``experts``), for hand-built models in tests. A ``tied`` pair is honoured only when both
    names are one tensor in the model (``lm_head.weight is model.embed_tokens.weight``): the parameter is filled
    through its twin and a checkpoint copy of it is ignored; untied, it needs its own tensor.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = dict(model.named_modules())
    tables = PackedTables.of(model, **overrides)
    tied = {a: b for a, b in tables.tied.items() if a in params and b in params and params[a] is params[b]}
    tables = replace(tables, tied=tied)
    stacked = _stacked_of(params, tables.experts)
    coverage = Coverage(checkpoint.keys(), _expected_slots(model, tables, stacked, set(tied)))
    router = _Router(model, params, tables)
    routes = {key: router.route(key) for key in checkpoint.keys()}
    experts = _ExpertLoads(params, modules, stacked, tables.experts,
                           default_num_threads() if num_threads is None else num_threads)

    def fail(key: str, param_name: str, err: Exception) -> CheckpointError:
        return CheckpointError(
            f"{checkpoint.file_of(key)}: tensor '{key}' (shape {tuple(checkpoint.shape(key))}, dtype "
            f"{checkpoint.dtype(key)}) -> parameter '{param_name}': {err}"
        )

    def load(key: str, route: _Route, tensor: torch.Tensor, label: str) -> None:
        """Copy ``tensor`` (checkpoint ``key``, or a part of it named by ``label``) through the route's loader."""
        param_name, shard = route.param, route.shard
        param = params[param_name]
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
            elif shard is not None:
                loader(param, tensor, shard)
            else:
                loader(param, tensor)
        except ValueError as e:
            raise fail(key, param_name, e) from None
        coverage.fill(param_name, route.slot, label)

    reader = _device_reader(model, checkpoint, [k for k, r in routes.items() if r is not None and r.fetched])
    keys = reader.order_all if reader is not None else checkpoint.keys()
    fetch = reader.fetch if reader is not None else checkpoint.get_tensor
    try:
        for key in keys:
            route = routes[key]
            if route is None:
                continue  # reported as unexpected by coverage
            if route.why is not None:
                coverage.ignore(key, route.why)
                continue
            param_name, shard = route.param, route.shard
            if route.expert is not None:
                local = experts.module_of(param_name).local_index(route.expert)
                coverage.unused.discard(key)
                if local is not None:  # another rank's expert otherwise
                    experts.stager(param_name).add(local, shard, lambda k=key: checkpoint.get_tensor(k))
                continue
            tensor = fetch(key)
            if route.split is not None:
                split = route.split
                ranges = split.ranges(getattr(model, "config", None), key, tuple(tensor.shape), checkpoint.file_of(key))
                for (part, start, stop), part_route in zip(ranges, route.parts):
                    if part_route is not None and part_route.why is not None:
                        continue  # the part's own key is ignored on purpose
                    if part_route is None or not part_route.fetched or part_route.split is not None:
                        raise CheckpointError(
                            f"{checkpoint.file_of(key)}: tensor '{key}': part '{part}' ({start}:{stop} along dim "
                            f"{split.axis}, checkpoint.split '{split.module}') is used by no parameter"
                        )
                    load(key, part_route, split.take(getattr(model, "config", None), tensor, start, stop),
                         f"{key} [{start}:{stop}] ({part})")
                coverage.unused.discard(key)
                continue
            load(key, route, tensor, key)
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

    def __init__(self, checkpoint: Checkpoint, device: torch.device, num_threads: int, fetched: list[str]):
        from .device_reader import DeviceReader, file_order

        self.checkpoint = checkpoint
        self.order_all = file_order(checkpoint, checkpoint.keys())
        wanted = set(fetched)
        self.reader = DeviceReader(checkpoint, [k for k in self.order_all if k in wanted], device, num_threads=num_threads)
        self.fast = set(self.reader.order)

    def fetch(self, key: str) -> torch.Tensor:
        return self.reader.get(key) if key in self.fast else self.checkpoint.get_tensor(key)

    def close(self) -> None:
        self.reader.close()


def _device_reader(model: nn.Module, checkpoint: Checkpoint, fetched: list[str]):
    """A GPU read-ahead route when the model's parameters live on a CUDA device."""
    probe = next(model.parameters(), None)
    if probe is None or probe.device.type != "cuda":
        return None
    if not getattr(checkpoint, "raw_reads", True):  # a dequantizing view (FP8, MXFP4): its tensors are not file bytes
        return None
    return _ReaderRoute(checkpoint, probe.device, min(16, max(1, default_num_threads())), fetched)
