"""The neuron target (vLLM Neuron style): static buckets, ``torch.compile(fullgraph=True)``, the mapped loader.

``runner.py`` pads each step to a compiled bucket (prefill token counts; decode request counts x context lengths)
and calls the fixed forward signature; a step is all prefill or all decode. Weights load through the model's
``load_weights``: parameter -> checkpoint key(s) mappings and transform closures (``runtime/loader/mapped.py``);
the model's ops are ``runtime/neuron/``.
"""
from __future__ import annotations

import torch

from ..base import RunnerOptions, StepBudget, Target
from .runner import NeuronRunner, default_buckets


class NeuronTarget(Target):
    name = "neuron"
    on_device_sampling = True  # NF.sample inside the compiled graph (the Neuron guide's on-device sampling)

    def step_budget(self, options: RunnerOptions) -> StepBudget:
        """A step's tokens must fit the largest prefill bucket; a budget below ``max_model_len`` turns on
        segmented prefill (one more graph per prefill x context bucket)."""
        largest = max(options.prefill_buckets) if options.prefill_buckets else options.max_model_len
        asked = options.max_num_batched_tokens
        if asked is not None and asked > largest:
            raise ValueError(f"max_num_batched_tokens {asked} exceeds the largest prefill bucket {largest}")
        budget = asked or largest
        return StepBudget(budget, budget < options.max_model_len)

    def make_runner(self, model: torch.nn.Module, blocks, device: torch.device, options: RunnerOptions,
                    budget: StepBudget, state_pool=None) -> NeuronRunner:
        return NeuronRunner(
            model, blocks, device, max_model_len=options.max_model_len, max_num_seqs=options.max_num_seqs,
            prefill_buckets=options.prefill_buckets, decode_buckets=options.decode_buckets,
            decode_context_buckets=options.decode_context_buckets, compile=options.compile,
            on_device_sampling=options.on_device_sampling, segmented_prefill=budget.chunked_prefill,
            state_pool=state_pool,
        )


TARGET = NeuronTarget()

__all__ = ["TARGET", "NeuronRunner", "NeuronTarget", "default_buckets"]
