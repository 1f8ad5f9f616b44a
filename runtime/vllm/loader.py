"""``load_weights(weights)`` of the generated vllm models: vLLM's (name, tensor) stream, routed by the generated
tables, with modelgen's strict coverage.

vLLM's own loaders (``AutoWeightsLoader``) skip a checkpoint tensor no parameter takes; here that is an error naming
the tensor, as it is on modelgen's other targets: a checkpoint name the spec does not map is the bug this catches.
The routing rules are the rocm loader's (``runtime/loader/names.py``: renames, ignore patterns, whole-segment packed
names, layers past ``num_hidden_layers``; ``runtime/loader/split.py``: modules stored fused), and the coverage
report is the same (``runtime/loader/report.py``). What differs is the call into each parameter, which follows
vLLM's ``weight_loader`` conventions:

* fused linears (``QKVParallelLinear``, ``MergedColumnParallelLinear``): ``loader(param, tensor, shard_id)``;
* routed experts (vLLM's ``RoutedExperts``): ``loader(param, tensor, weight_name, shard_id, expert_id,
  return_success=True)``, one expert at a time (``w1`` gate, ``w3`` up, ``w2`` down); an expert another
  expert-parallel rank holds returns False and is no error;
* everything else: ``loader(param, tensor)`` (vLLM's ``default_weight_loader`` when the parameter has none).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch import nn

from ..loader.checkpoint import CheckpointError
from ..loader.names import ExtraLayers, IgnoreRules, apply_renames, expert_regex, resolve_packed
from ..loader.report import Coverage
from ..loader.split import CheckpointSplit

EXPERTS = "experts"  # coverage slot of a stacked expert parameter: every routed expert of every shard

# vLLM's Attention layers carry KV-cache / attention quantization scales (built whenever a quantization config is
# set) that default to 1.0 and that only checkpoints calibrated for an FP8 KV cache hold: loaded when present, never
# missing.
OPTIONAL_SUFFIXES = (".attn.k_scale", ".attn.v_scale", ".attn.q_scale", ".attn.prob_scale")

# One expert-table row: (stacked parameter relative to the MoE block, checkpoint name relative to it, shard id).
ExpertRow = tuple[str, str, str]


@dataclass(frozen=True)
class WeightTables:
    """The generated weights.py tables of one model (``per_expert`` / ``fused`` / ``shared``: the MoE tables)."""

    stacked_params_mapping: Mapping[str, tuple[str, Any]]
    ignored: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()
    tied: Mapping[str, str] = field(default_factory=dict)
    per_expert: Sequence[ExpertRow] = ()
    fused: Sequence[ExpertRow] = ()
    shared: Sequence[ExpertRow] = ()


def _split_fused_experts(tensor: torch.Tensor, shard: str, layout: str,
                         num_experts: int | None = None) -> list[tuple[str, torch.Tensor]]:
    """A transformers v5 fused expert tensor ``[E, ...]`` -> (vLLM shard id, ``[E, rows, cols]`` in vLLM's
    ``[out, in]`` layout) per shard. ``stacked``: gate_up ``[E, 2I, H]`` (gate rows, then up), down ``[E, H, I]``;
    ``interleaved_transposed`` (GPT-OSS): gate_up ``[E, H, 2I]`` with gate/up columns alternating, down ``[E, I, H]``.
    Biases (``*_bias`` shards): gate_up ``[E, 2I]`` split the same way, down ``[E, H]`` as is. ``flat`` (DBRX): one
    tensor per shard (w1 gate, w3 up, w2 down), each ``[E * I, H]`` (``experts_from_flat``). ``transposed`` (Llama 4):
    gate_up ``[E, H, 2I]`` (gate columns, then up), down ``[E, I, H]``."""
    if layout == "flat":
        from ..layers.moe.ops import experts_from_flat

        return [(shard, experts_from_flat(tensor, shard, num_experts))]
    if shard in ("w1", "w3"):  # one projection of every expert (a non-gated expert's up: w1), [E, I, H]
        return [(shard, tensor)]
    bias = shard.endswith("_bias")
    if layout in ("interleaved_transposed", "transposed") and not bias:
        tensor = tensor.transpose(1, 2)
    if shard.startswith("w2"):
        return [("w2", tensor)]
    if layout == "interleaved_transposed":
        return [("w1", tensor[:, 0::2]), ("w3", tensor[:, 1::2])]
    gate, up = tensor.chunk(2, dim=1)
    return [("w1", gate), ("w3", up)]


class _Loader:
    def __init__(self, model: nn.Module, tables: WeightTables, where: str):
        from vllm.model_executor.models.utils import PPMissingLayer

        self.model, self.tables, self.where = model, tables, where
        self.params = dict(model.named_parameters(remove_duplicate=False))
        self.tied = {a: b for a, b in tables.tied.items()
                     if a in self.params and b in self.params and self.params[a] is self.params[b]}
        self.rules = IgnoreRules(tables.ignored)
        missing = [f"{name}." for name, m in model.named_modules() if isinstance(m, PPMissingLayer)]
        lists = {name: len(m) for name, m in model.named_modules()
                 if isinstance(m, nn.ModuleList) and name.split(".")[-1] == "layers"}
        self.extra_layers = ExtraLayers(lists, missing)
        self.per_expert = [(expert_regex(p), param, shard) for param, p, shard in tables.per_expert]
        self.fused = [(p, param, shard) for param, p, shard in tables.fused]
        self.layout = getattr(model, "fused_expert_layout", "stacked")
        suffixes = {row[0] for row in (*tables.per_expert, *tables.fused)}
        self.stacked = {n for n in self.params for s in suffixes if n == s or n.endswith("." + s)}
        self.expert_ids: dict[tuple[str, str], set[int]] = {}
        self.loaded: set[str] = set()
        self.coverage = Coverage([], self._expected())

    def _expected(self) -> list[tuple[str, Any]]:
        shards_of: dict[str, list[Any]] = {}
        for fused, shard in self.tables.stacked_params_mapping.values():
            if not isinstance(shard, CheckpointSplit):
                shards_of.setdefault(fused, []).append(shard)
        slots, seen = [], set()
        for name, param in self.params.items():
            if name in self.tied or id(param) in seen or name.endswith(OPTIONAL_SUFFIXES):
                continue
            seen.add(id(param))
            module_name = name.split(".")[-2] if "." in name else ""
            if name in self.stacked:
                slots.append((name, EXPERTS))
            elif module_name in shards_of:
                slots += [(name, s) for s in shards_of[module_name]]
            else:
                slots.append((name, None))
        return slots

    # ------------------------------------------------------------------------------------------------- one tensor
    def take(self, key: str, tensor: torch.Tensor) -> None:
        self.coverage.unused.add(key)
        name = apply_renames(key, self.tables.renames)
        why = self._skip_reason(name)
        if why is not None:
            self.coverage.ignore(key, why)
            return
        if not self._route(key, name, tensor) and name != key:
            # The specs rename for modelgen's engine (``weight_scale_inv`` -> ``weight_scale``); vLLM's quantized
            # layers keep the checkpoint's own names (Fp8LinearMethod's ``weight_scale_inv``).
            self._route(key, key, tensor)
        # else: left in coverage.unused, reported as unexpected

    def _route(self, key: str, name: str, tensor: torch.Tensor) -> bool:
        """Load ``tensor`` (checkpoint ``key``) by its (renamed) ``name``; False when no parameter takes it."""
        for rx, suffix, shard in self.per_expert:
            m = rx.match(name)
            if m and f"{m['block']}.{suffix}" in self.params:
                self._expert(key, tensor, f"{m['block']}.{suffix}", shard, int(m["e"]))
                return True
        for pattern, suffix, shard in self.fused:
            if name.endswith("." + pattern) and name[: -len(pattern)] + suffix in self.params:
                param_name = name[: -len(pattern)] + suffix
                experts = getattr(self.model.get_submodule(param_name.rsplit(".", 1)[0]), "global_num_experts", None)
                for vllm_shard, part in _split_fused_experts(tensor, shard, self.layout, experts):
                    for e in range(part.shape[0]):
                        self._expert(key, part[e], param_name, vllm_shard, e)
                return True
        param_name, shard = resolve_packed(name, self.tables.stacked_params_mapping)
        if isinstance(shard, CheckpointSplit):
            self._split(key, name, tensor, shard)
            return True
        if param_name in self.params:
            self._load(key, tensor, param_name, shard, key)
            return True
        return False

    def _skip_reason(self, name: str) -> str | None:
        pattern = self.rules.match(name)
        if pattern is not None:
            return f"checkpoint.ignore '{pattern}'"
        skipped = self.extra_layers.match(name)
        if skipped is not None:
            return skipped
        if name in self.tied:
            return f"tied to {self.tied[name]}"
        return None

    def _split(self, key: str, name: str, tensor: torch.Tensor, split: CheckpointSplit) -> None:
        ranges = split.ranges(getattr(self.model, "config", None), key, tuple(tensor.shape), self.where)
        for part, start, stop in ranges:
            part_name = split.part_key(name, part)
            if self._skip_reason(part_name) is not None:
                continue
            param_name, shard = resolve_packed(part_name, self.tables.stacked_params_mapping)
            if param_name not in self.params or isinstance(shard, CheckpointSplit):
                raise CheckpointError(
                    f"{self.where}: tensor '{key}': part '{part}' ({start}:{stop} along dim {split.axis}, "
                    f"checkpoint.split '{split.module}') is used by no parameter")
            self._load(key, split.take(getattr(self.model, "config", None), tensor, start, stop), param_name, shard,
                       f"{key} [{start}:{stop}] ({part})")
        self.coverage.unused.discard(key)

    def _fail(self, key: str, tensor: torch.Tensor, param_name: str, why: Any) -> CheckpointError:
        return CheckpointError(f"{self.where}: tensor '{key}' (shape {tuple(tensor.shape)}, dtype {tensor.dtype}) -> "
                               f"parameter '{param_name}' (shape {tuple(self.params[param_name].shape)}, dtype "
                               f"{self.params[param_name].dtype}): {why}")

    def _load(self, key: str, tensor: torch.Tensor, param_name: str, shard: Any, label: str) -> None:
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        param = self.params[param_name]
        if tensor.is_floating_point() != param.is_floating_point():
            raise self._fail(key, tensor, param_name, "floating-point and integer tensors do not mix")
        loader = getattr(param, "weight_loader", default_weight_loader)
        try:
            if shard is None:
                if loader is default_weight_loader and tuple(tensor.shape) != tuple(param.shape):
                    raise ValueError("shapes differ")
                loader(param, tensor)
            else:
                loader(param, tensor, shard)
        except (AssertionError, ValueError, RuntimeError) as e:
            raise self._fail(key, tensor, param_name, e or "shapes differ") from None
        self.coverage.fill(param_name, shard, label)
        self.loaded.add(param_name)

    def _expert(self, key: str, tensor: torch.Tensor, param_name: str, shard: str, expert: int) -> None:
        param = self.params[param_name]
        try:
            param.weight_loader(param, tensor, param_name, shard_id=shard, expert_id=expert, return_success=True)
        except (AssertionError, ValueError, RuntimeError) as e:
            raise self._fail(key, tensor, param_name, f"expert {expert} shard {shard}: {e or 'shapes differ'}") from None
        self.expert_ids.setdefault((param_name, shard), set()).add(expert)
        self.coverage.unused.discard(key)

    # --------------------------------------------------------------------------------------------------- the end
    def finish(self) -> set[str]:
        for param_name in sorted(self.stacked):
            got = {shard: ids for (p, shard), ids in self.expert_ids.items() if p == param_name}
            if not got:
                continue  # reported as missing by coverage
            total = getattr(self.model.get_submodule(param_name.rsplit(".", 1)[0]), "global_num_experts", None)
            total = total or max(max(ids) for ids in got.values()) + 1
            for shard, ids in sorted(got.items()):
                lacking = sorted(set(range(total)) - ids)
                if lacking:
                    raise CheckpointError(f"{self.where}: parameter '{param_name}' shard {shard!r}: no checkpoint "
                                          f"tensor for expert(s) {lacking[:20]} of {total}")
            self.coverage.fill(param_name, EXPERTS, f"per-expert tensors of {param_name}")
            self.loaded.add(param_name)
        self.coverage.check(self.where)
        return self.loaded | set(self.tied)


def load_generated_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]],
                           tables: WeightTables) -> set[str]:
    """Route every (checkpoint name, tensor) of ``weights`` into ``model``; the parameter names filled (vLLM checks
    that every parameter is among them). CheckpointError, naming tensors and parameters, on any mismatch."""
    loader = _Loader(model, tables, _checkpoint_name())
    for key, tensor in weights:
        loader.take(key, tensor)
    return loader.finish()


def _checkpoint_name() -> str:
    """The checkpoint vLLM is loading (for messages): its model path."""
    try:
        from vllm.config import get_current_vllm_config

        return str(get_current_vllm_config().model_config.model)
    except Exception:  # no current config (a hand-built model in a test)
        return "(checkpoint)"
