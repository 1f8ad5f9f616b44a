"""Pipeline parallelism: the layer split and the stage hand-off (ATOM's ``PPMissingLayer`` / ``IntermediateTensors``).

What exists (and is tested on CPU, ``tests/test_pipeline_split.py``): :func:`layer_range` splits the decoder layers
over ``pp_size`` stages as vLLM's ``get_pp_indices`` does; :func:`split_stage` turns a built rocm model into one
stage (layers it does not own become :class:`PPMissingLayer`: no parameters, no KV cache, an error if called);
:func:`stage_forward` runs a stage on its inputs — token ids on the first stage, the previous stage's
:class:`IntermediateTensors` (``hidden_states`` + ``residual``, the rocm layers' pre-norm residual stream) on the
others — and :class:`LocalPipeline` chains stages in one process, which is how the split is checked against the
whole model (same logits, same greedy tokens).

What a multi-process PP needs beyond this (designed, not built; README "Parallel modes"): a PP process group next
to the TP one (world = PP x TP); each stage's engine process builds only its layers (the generated backbone taking
``start_layer``/``end_layer`` from ``layer_range`` and filling the rest with ``PPMissingLayer``, so parameters and
KV caches exist only for owned layers; the loaders skipping checkpoint keys of missing layers as they skip layers
beyond ``num_hidden_layers``); ``forward(input_ids, positions, attn_metadata, intermediate_tensors=None)``
returning ``IntermediateTensors`` except on the last stage; the driver broadcasting the step inputs (as
``runtime/parallel/launch.py`` does for TP) and each stage receiving the previous stage's tensors with
``torch.distributed.recv`` into buffers sized ``[tokens, hidden]`` (``make_empty_intermediate_tensors``); the last
stage computing logits; micro-batches (several steps in flight) for throughput.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


def layer_range(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """Layers ``[start, end)`` of stage ``pp_rank``: an even split, the remainder going one layer each to the stages
    before the last (vLLM ``get_pp_indices``: the last stage also runs the norm and the LM head)."""
    if pp_size < 1 or not 0 <= pp_rank < pp_size:
        raise ValueError(f"pipeline stage {pp_rank} of {pp_size}: expected 0 <= rank < size")
    if num_layers < pp_size:
        raise ValueError(f"{num_layers} layers cannot fill {pp_size} pipeline stages")
    sizes = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        sizes[-i] += 1
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


class PPMissingLayer(nn.Identity):
    """A layer another pipeline stage owns: holds no parameters or cache; calling it is a wiring error."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, *args, **kwargs):
        raise RuntimeError(f"layer {self.index} belongs to another pipeline stage")


@dataclass
class IntermediateTensors:
    """Tensors one stage hands the next, by name (rocm layers: ``hidden_states`` and ``residual``)."""

    tensors: dict[str, torch.Tensor | None] = field(default_factory=dict)

    def __getitem__(self, name: str) -> torch.Tensor | None:
        return self.tensors[name]


@dataclass(frozen=True)
class Stage:
    rank: int
    size: int
    start: int
    end: int

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.size - 1


def _backbone(model: nn.Module) -> nn.Module:
    """The module holding ``layers`` (the generated ``<Prefix>Model``)."""
    for module in model.modules():
        if isinstance(getattr(module, "layers", None), nn.ModuleList) and module is not model:
            return module
    raise ValueError(f"{type(model).__name__}: no decoder layer list (expected a generated rocm model)")


def split_stage(model: nn.Module, pp_rank: int, pp_size: int) -> Stage:
    """Make ``model`` stage ``pp_rank`` of ``pp_size`` in place: the layers outside its range become
    :class:`PPMissingLayer`. Returns the stage's span."""
    layers = _backbone(model).layers
    start, end = layer_range(len(layers), pp_rank, pp_size)
    for i in range(len(layers)):
        if not start <= i < end:
            layers[i] = PPMissingLayer(i)
    model.pp_stage = Stage(pp_rank, pp_size, start, end)
    return model.pp_stage


def stage_forward(model: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata,
                  intermediate: IntermediateTensors | None = None):
    """One stage of a generated rocm model (``<Prefix>Model.forward`` restricted to the stage's layers):
    IntermediateTensors out of every stage but the last, the final hidden states out of the last."""
    stage: Stage = model.pp_stage
    backbone = _backbone(model)
    embed, norm = _ends(backbone)
    if stage.is_first:
        hidden, residual = embed(input_ids), None
    else:
        if intermediate is None:
            raise ValueError(f"pipeline stage {stage.rank} needs the previous stage's IntermediateTensors")
        hidden, residual = intermediate["hidden_states"], intermediate["residual"]
    for layer in backbone.layers[stage.start:stage.end]:
        hidden, residual = layer(positions, hidden, residual, attn_metadata)
    if not stage.is_last:
        return IntermediateTensors({"hidden_states": hidden, "residual": residual})
    hidden, _ = norm(hidden, residual)
    return hidden


def _ends(backbone: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The backbone's token embedding and its final norm (the one registered after ``layers``), by type: their
    attribute names come from the spec."""
    from ..layers.embedding import VocabParallelEmbedding
    from ..layers.norm import LayerNorm, RMSNorm

    children = list(backbone.named_children())
    after = [m for n, m in children[[n for n, _ in children].index("layers") + 1:]]
    embed = next((m for _, m in children if isinstance(m, VocabParallelEmbedding)), None)
    norm = next((m for m in after if isinstance(m, (RMSNorm, LayerNorm))), None)
    if embed is None or norm is None:
        raise ValueError(f"{type(backbone).__name__}: expected a VocabParallelEmbedding and a final norm after layers")
    return embed, norm


class LocalPipeline(nn.Module):
    """Stages chained in one process behind the model interface the rocm runner calls (``forward`` +
    ``compute_logits``): the hand-off a multi-process pipeline sends over the wire, done in memory."""

    def __init__(self, stages: list[nn.Module]):
        super().__init__()
        spans = [s.pp_stage for s in stages]
        chained = all(a.end == b.start for a, b in zip(spans, spans[1:]))
        if [s.rank for s in spans] != list(range(len(stages))) or not chained:
            raise ValueError(f"stages {spans} do not chain")
        self.stages = nn.ModuleList(stages)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata) -> torch.Tensor:
        out = None
        for stage in self.stages:
            out = stage_forward(stage, input_ids, positions, attn_metadata, out)
        return out

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.stages[-1].compute_logits(hidden_states)
