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
        if distributed.parallel_config().sequence_parallel:
            from ...parallel.sequence import enable_sequence_parallel

            enable_sequence_parallel(model)
        return model

    def make_runner(self, model: torch.nn.Module, blocks, device: torch.device, options: RunnerOptions,
                    budget: StepBudget, state_pool=None) -> RocmRunner:
        return RocmRunner(
            model, blocks, device, max_model_len=options.max_model_len, max_num_seqs=options.max_num_seqs,
            cuda_graphs=options.cuda_graphs, decode_buckets=options.decode_buckets, state_pool=state_pool,
        )


TARGET = RocmTarget()

__all__ = ["TARGET", "RocmRunner", "RocmTarget"]
