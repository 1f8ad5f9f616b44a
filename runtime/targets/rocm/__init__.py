"""The rocm target (ATOM style): flattened varlen batches, CUDA graphs for decode, the packed weight loader.

``runner.py`` turns a scheduled step into one varlen batch (prefill chunks and decodes mix); ``cuda_graphs.py``
replays decode steps from per-batch-size graphs on a GPU. Weights load through the model's ``load_weights``, which
routes checkpoint names to fused parameters (``runtime/loader/packed.py``); the model's layers are
``runtime/layers/``.
"""
from __future__ import annotations

import torch

from ... import distributed
from ..base import RunnerOptions, StepBudget, Target
from .runner import RocmRunner


class RocmTarget(Target):
    name = "rocm"

    def build_model(self, module, config, hf_config: dict, engine_args: dict) -> torch.nn.Module:
        """The generated model; with ``sequence_parallel`` its parallel modules switch to token-split residuals
        (``runtime/parallel/sequence.py``)."""
        model = super().build_model(module, config, hf_config, engine_args)
        parallel = distributed.parallel_config()
        if parallel.sequence_parallel and parallel.mlp_data_parallel_size > 1:
            raise ValueError("sequence_parallel and mlp_data_parallel_size > 1 both re-route the MLP's collectives; "
                             "choose one")
        if parallel.sequence_parallel:
            from ...parallel.sequence import enable_sequence_parallel

            enable_sequence_parallel(model)
        if parallel.mlp_data_parallel_size > 1:
            from ...parallel.data import enable_mlp_data_parallel

            enable_mlp_data_parallel(model, parallel.mlp_data_parallel_size)
        return model

    def load(self, model, checkpoint) -> None:
        """Under tensor parallelism every parameter loader narrows the checkpoint tensor to this rank's slice: the
        tensors must then come from the memory-mapped reader (``get_tensor`` maps the file, ``narrow`` + copy reads
        only the slice's pages), not from the GPU raw-byte read-ahead, which reads every tensor whole (the packed
        loader takes that route only for checkpoints whose ``raw_reads`` is true)."""
        if distributed.tp_size() > 1:
            checkpoint = _SliceReads(checkpoint)
        super().load(model, checkpoint)

    def make_runner(self, model: torch.nn.Module, blocks, device: torch.device, options: RunnerOptions,
                    budget: StepBudget, state_pool=None) -> RocmRunner:
        return RocmRunner(
            model, blocks, device, max_model_len=options.max_model_len, max_num_seqs=options.max_num_seqs,
            cuda_graphs=options.cuda_graphs, decode_buckets=options.decode_buckets, state_pool=state_pool,
        )


class _SliceReads:
    """A checkpoint seen with ``raw_reads = False`` (everything else delegated): each rank reads its slices."""

    raw_reads = False

    def __init__(self, checkpoint):
        self._checkpoint = checkpoint

    def __getattr__(self, name: str):
        return getattr(self._checkpoint, name)


TARGET = RocmTarget()

__all__ = ["TARGET", "RocmRunner", "RocmTarget"]
