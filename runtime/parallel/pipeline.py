"""Pipeline parallelism (rocm): the layer split, the stage hand-off and the multi-process pipeline.

``LLM(..., pipeline_parallel_size=N)`` (``--pipeline-parallel-size N``) starts N x TP ranks with the launcher of
tensor parallelism (``runtime/parallel/launch.py``); rank = stage * TP + tp rank, one TP group per stage
(``distributed.set_groups``). Each stage's process builds only its layers: :func:`build_stage_model` builds the
generated model with the decoder layers of other stages (and the embedding / LM head a stage does not use) on the
``meta`` device, then replaces them with placeholders (:class:`PPMissingLayer`, :class:`PPMissingEmbedding`,
:class:`PPMissingHead`; no parameters, no KV cache), so the loader reads only the stage's tensors
(``loader/names.py`` ``ExtraLayers`` skips the keys of modules a stage does not hold). The generated backbone's own
``forward`` runs each stage: :class:`StageLayers` (the layer list, full length so parameter names keep their layer
index) iterates over the owned layers only, the first of them fed the previous stage's :class:`IntermediateTensors`
(``hidden_states`` + ``residual``, the rocm layers' pre-norm residual stream), and on every stage but the last the
final norm is a :class:`PPBoundary` that keeps the stream for the next stage instead of normalising it.

Between processes (:class:`PipelineComm`, driven by the rocm runner): every rank runs the same step (rank 0
broadcasts the step's inputs); stage s receives ``[2, tokens, hidden]`` (hidden, residual) from the same TP rank
of stage s - 1 with ``torch.distributed.recv`` (tensors only: the shape follows from the broadcast step), runs its
layers and sends to stage s + 1; the last stage computes the logits and its TP rank 0 sends them (float32) to rank
0, whose engine samples -- or, for an all-greedy step, the ids of its argmax (int64), so only token ids travel
back. Under TP a stage hands over the partial sums of its last down projection when that
projection's all-reduce is fused into the next layer's input norm, which then reduces them on the next stage.

Schedule: stage by stage, one step at a time -- no micro-batches in flight, so a stage idles while the others run:
PP spreads the weights and KV cache over the stages' devices, it does not make a step faster; decode CUDA graphs are
off under PP.
``LocalPipeline`` chains stages built from one model in one process (``tests/test_pipeline_split.py``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from .. import distributed
from .class_swap import swapped_classes


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


class PPMissingEmbedding(nn.Module):
    """The token embedding on a stage after the first: no weight; returns a zero ``[tokens, hidden]`` block the
    generated forward may scale (an embedding multiplier), which the first owned layer then ignores for the
    previous stage's tensors."""

    def __init__(self, hidden_size: int, dtype: torch.dtype):
        super().__init__()
        self.hidden_size, self.dtype = hidden_size, dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(input_ids.shape[0], self.hidden_size, dtype=self.dtype, device=input_ids.device)


class PPMissingHead(nn.Module):
    """The LM head on a stage before the last: no weight; computing logits there is a wiring error."""

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the LM head belongs to the last pipeline stage")

    def forward(self, *args, **kwargs):
        raise RuntimeError("the LM head belongs to the last pipeline stage")


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


class _StageIO:
    """A stage's hand-off slots: ``received`` (set before the forward on every stage but the first) and ``sent``
    (what :class:`PPBoundary` kept, on every stage but the last)."""

    def __init__(self):
        self.received: IntermediateTensors | None = None
        self.sent: IntermediateTensors | None = None


class StageLayers(nn.ModuleList):
    """The backbone's layer list on one stage: every index present (other stages' layers are
    :class:`PPMissingLayer`, so parameter names and the loader's layer indices are those of the whole model), but
    iterating yields only the owned layers -- the generated ``forward``, ``get_kv_spec`` and ``bind_kv_cache``
    loop over ``self.layers`` -- the first of them fed the previous stage's tensors."""

    def __init__(self, layers: nn.ModuleList, stage: Stage, io: _StageIO):
        super().__init__(list(layers))
        self._stage, self._io = stage, io

    def __iter__(self):
        owned = [self._modules[str(i)] for i in range(self._stage.start, self._stage.end)]
        if self._io.received is None:
            yield from owned
            return
        first, received = owned[0], self._io.received

        def from_previous(positions, hidden_states, residual, attn_metadata):
            return first(positions, received["hidden_states"], received["residual"], attn_metadata)

        yield from_previous
        yield from owned[1:]


class PPBoundary(nn.Module):
    """The final norm on a stage before the last: keeps the residual stream (``hidden_states``, ``residual``) for
    the next stage and returns it unnormalised."""

    def __init__(self, io: _StageIO):
        super().__init__()
        self._io = io

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            raise RuntimeError("pipeline boundary: the stage's last layer returned no residual stream")
        self._io.sent = IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        return hidden_states, None


def _backbone(model: nn.Module) -> nn.Module:
    """The module holding ``layers`` (the generated ``<Prefix>Model``)."""
    for module in model.modules():
        if isinstance(getattr(module, "layers", None), nn.ModuleList) and module is not model:
            return module
    raise ValueError(f"{type(model).__name__}: no decoder layer list (expected a generated rocm model)")


def _ends(backbone: nn.Module) -> tuple[str, str]:
    """Attribute names of the backbone's token embedding and its final norm (the one registered after
    ``layers``), found by type: the names come from the spec."""
    from ..layers.embedding import VocabParallelEmbedding
    from ..layers.norm import LayerNorm, RMSNorm

    children = list(backbone.named_children())
    after = children[[n for n, _ in children].index("layers") + 1:]
    embed = next((n for n, m in children if isinstance(m, (VocabParallelEmbedding, PPMissingEmbedding))), None)
    norm = next((n for n, m in after if isinstance(m, (RMSNorm, LayerNorm, PPBoundary))), None)
    if embed is None or norm is None:
        raise ValueError(f"{type(backbone).__name__}: expected a VocabParallelEmbedding and a final norm after layers")
    return embed, norm


def _is_meta(module: nn.Module) -> bool:
    return any(p.is_meta for p in module.parameters())


def split_stage(model: nn.Module, pp_rank: int, pp_size: int) -> Stage:
    """Make ``model`` stage ``pp_rank`` of ``pp_size`` in place: the layers outside its range become
    :class:`PPMissingLayer`, the list a :class:`StageLayers`; on a stage before the last the final norm becomes a
    :class:`PPBoundary` and an untied LM head a :class:`PPMissingHead`; on a stage after the first an embedding
    built on the meta device (or, untied, any) a :class:`PPMissingEmbedding`. Returns the stage's span."""
    backbone = _backbone(model)
    layers = backbone.layers
    start, end = layer_range(len(layers), pp_rank, pp_size)
    stage = Stage(pp_rank, pp_size, start, end)
    io = _StageIO()
    for i in range(len(layers)):
        if not start <= i < end:
            layers[i] = PPMissingLayer(i)
    backbone.layers = StageLayers(layers, stage, io)
    embed_name, norm_name = _ends(backbone)
    embed = getattr(backbone, embed_name)
    head = getattr(model, "lm_head", None)
    tied = head is not None and getattr(head, "weight", None) is getattr(embed, "weight", 0)
    if not stage.is_last:
        setattr(backbone, norm_name, PPBoundary(io))
        if head is not None:
            model.lm_head = PPMissingHead()
    if not stage.is_first and (not (tied and stage.is_last) or _is_meta(embed)):
        setattr(backbone, embed_name, PPMissingEmbedding(embed.weight.shape[1], torch.get_default_dtype()
                                                         if embed.weight.is_meta else embed.weight.dtype))
    model.pp_stage = stage
    model.pp_io = io
    return stage


def missing_prefixes(model: nn.Module) -> list[str]:
    """Dotted names (with a trailing dot) of the modules this stage does not hold: the loader skips their keys."""
    return [f"{name}." for name, m in model.named_modules()
            if isinstance(m, (PPMissingLayer, PPMissingEmbedding, PPMissingHead, PPBoundary))]


def stage_forward(model: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata,
                  intermediate: IntermediateTensors | None = None):
    """One stage of a split model through its generated ``forward``: IntermediateTensors out of every stage but the
    last, the final (normed) hidden states out of the last."""
    stage: Stage = model.pp_stage
    io: _StageIO = model.pp_io
    if not stage.is_first and intermediate is None:
        raise ValueError(f"pipeline stage {stage.rank} needs the previous stage's IntermediateTensors")
    io.received, io.sent = (None if stage.is_first else intermediate), None
    try:
        hidden = model(input_ids, positions, attn_metadata)
    finally:
        io.received = None
    if stage.is_last:
        return hidden
    out, io.sent = io.sent, None
    if out is None:
        raise RuntimeError(f"pipeline stage {stage.rank}: the forward never reached the stage boundary")
    return out


# ------------------------------------------------------------------------------------------- multi-process pipeline
def init_groups(pp_size: int) -> None:
    """After ``init_process_group``: the TP group of this rank's stage (every rank creates every stage's group, in
    order: ``new_group`` is collective). World = PP x TP."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % pp_size:
        raise ValueError(f"pipeline_parallel_size {pp_size} does not divide the world size {world}")
    tp = world // pp_size
    groups = [dist.new_group(list(range(s * tp, (s + 1) * tp))) if tp > 1 else None for s in range(pp_size)]
    distributed.set_groups(tp, rank % tp, groups[rank // tp])


def _on_meta(cls, owned):
    """A stand-in for class ``cls`` while the model is built: instances it does not own (``owned(args)`` False) are
    built on the meta device -- the structure the generated constructor wires up, without memory."""

    def build(*args, **kwargs):
        if owned(*args, **kwargs):
            return cls(*args, **kwargs)
        with torch.device("meta"):
            return cls(*args, **kwargs)

    return build


def build_stage_model(target, module, config, hf_config: dict, engine_args: dict) -> nn.Module:
    """The target's model for this rank: under pipeline parallelism its stage (see the module docstring), under
    attention data parallelism the model of ``runtime/parallel/attention_dp.py``."""
    if distributed.parallel_config().data_parallel_size > 1:
        from .attention_dp import build_dp_model

        return build_dp_model(target, module, config, hf_config, engine_args)
    pp = distributed.parallel_config().pipeline_parallel_size
    if pp == 1:
        return target.build_model(module, config, hf_config, engine_args)
    if target.name != "rocm":
        raise ValueError(f"pipeline_parallel_size is implemented for the rocm target, not {target.name}")
    tp = distributed.tp_size()
    pp_rank = dist.get_rank() // tp
    num_layers = int(config.num_hidden_layers)
    start, end = layer_range(num_layers, pp_rank, pp)
    first, last = pp_rank == 0, pp_rank == pp - 1
    tied = bool(getattr(config, "tie_word_embeddings", False))
    namespace = vars(sys.modules[module.MODEL_CLASS.__module__])
    layer_classes = [k for k, v in namespace.items() if isinstance(v, type) and k.endswith("DecoderLayer")
                     and v.__module__ == module.MODEL_CLASS.__module__]
    if len(layer_classes) != 1:
        raise ValueError(f"{module.MODEL_CLASS.__module__}: pipeline parallelism expects one *DecoderLayer class, "
                         f"found {layer_classes or 'none'}")
    replacements = {layer_classes[0]: _on_meta(namespace[layer_classes[0]],
                                               lambda config, i, *a, **kw: start <= i < end)}
    if "VocabParallelEmbedding" in namespace:
        replacements["VocabParallelEmbedding"] = _on_meta(namespace["VocabParallelEmbedding"],
                                                          lambda *a, **kw: first or (last and tied))
    if "ParallelLMHead" in namespace:
        replacements["ParallelLMHead"] = _on_meta(namespace["ParallelLMHead"], lambda *a, **kw: last)
    with swapped_classes(namespace, replacements):
        model = target.build_model(module, config, hf_config, engine_args)
    split_stage(model, pp_rank, pp)
    _check_shared_index(model, pp_rank)
    leftover = sorted({n.rsplit(".", 1)[0] for n, p in model.named_parameters() if p.is_meta})
    if leftover:
        raise RuntimeError(f"pipeline stage {pp_rank}: parameters left on the meta device: {', '.join(leftover)}")
    model.pp_comm = PipelineComm(model.pp_stage, tp, int(config.hidden_size), int(config.vocab_size))
    return model


def _check_shared_index(model: nn.Module, pp_rank: int) -> None:
    """Layers that read what an earlier layer wrote into the step's metadata (GLM-5's shared DSA layers reuse the
    top-k of the nearest earlier indexer) need that writer on their own stage, as the metadata does not cross stages:
    a stage where such a reader comes before any writer is refused (choose another split)."""
    from ..layers.kind import layer_kinds

    stage = model.pp_stage
    for i in range(stage.start, stage.end):
        kinds = list(layer_kinds(_backbone(model).layers[i]))
        if any(m.step_metadata_writes() for m in kinds):
            return
        reads = next((what for m in kinds if (what := m.step_metadata_reads()) is not None), None)
        if reads is not None:
            raise ValueError(f"pipeline stage {pp_rank} starts at layer {stage.start}, whose {reads.format(layer=i)} "
                             f"on an earlier stage; pipeline_parallel_size must split the layers so that each stage "
                             f"starts at a layer that writes what its later layers read")


class PipelineComm:
    """The wire between stages of engine-started ranks (point-to-point on the default group; tensors only, their
    shapes known on both sides from the broadcast step)."""

    def __init__(self, stage: Stage, tp: int, hidden_size: int, vocab_size: int):
        self.stage, self.tp, self.hidden_size, self.vocab_size = stage, tp, hidden_size, vocab_size
        self.rank = dist.get_rank()

    def step(self, model: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata,
             rows: torch.Tensor | None, greedy: bool = False):
        """One runner call on this rank: logits ``[rows or tokens, V]`` (float32) on rank 0, None elsewhere;
        ``greedy``: the last stage's argmax ids ``[rows]`` (int64) instead."""
        stage, n = self.stage, input_ids.shape[0]
        received = None
        if not stage.is_first:
            dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
            buf = torch.empty(2, n, self.hidden_size, dtype=dtype, device=input_ids.device)
            dist.recv(buf, src=self.rank - self.tp)
            received = IntermediateTensors({"hidden_states": buf[0], "residual": buf[1]})
        out = stage_forward(model, input_ids, positions, attn_metadata, received)
        if not stage.is_last:
            dist.send(torch.stack([out["hidden_states"], out["residual"]]).contiguous(), dst=self.rank + self.tp)
            logits = None
        else:
            logits = model.compute_logits(out if rows is None else out.index_select(0, rows))
            logits = logits.argmax(-1) if greedy else logits.float()
        if self.rank == 0:
            if logits is None:  # rank 0 is the first stage; the last stage's TP rank 0 sends
                count = n if rows is None else rows.shape[0]
                shape, dtype = ((count,), torch.int64) if greedy else ((count, self.vocab_size), torch.float32)
                logits = torch.empty(shape, dtype=dtype, device=input_ids.device)
                dist.recv(logits, src=(stage.size - 1) * self.tp)
            return logits
        if stage.is_last and self.rank % self.tp == 0:
            dist.send(logits.contiguous(), dst=0)
        return None


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
