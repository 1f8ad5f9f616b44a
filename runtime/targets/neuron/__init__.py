"""The neuron target (vLLM Neuron style): static buckets, ``torch.compile(fullgraph=True)``, the mapped loader.

``runner.py`` pads each step to a compiled bucket (prefill token counts; decode request counts x context lengths)
and calls the fixed forward signature; a step is all prefill or all decode. Weights load through the model's
``load_weights``: parameter -> checkpoint key(s) mappings and transform closures (``runtime/loader/mapped.py``);
the model's ops are ``runtime/neuron/``.
"""
from __future__ import annotations

import torch

from ... import distributed
from ..base import RunnerOptions, StepBudget, Target
from .config import NeuronConfig, NeuronModelConfig, OnDeviceSamplingConfig
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

    def build_model(self, module, config, hf_config: dict, engine_args: dict) -> torch.nn.Module:
        """Through the generated factory, as vLLM Neuron does: ``Factory.from_configs(hf_config, neuron_config)``
        validates both (``_validate_config``), selects the implementation and builds it with
        ``Config.from_configs``; the NeuronConfig comes from the engine's arguments and parallel state."""
        self.check_parallel()
        factory = getattr(module, "FACTORY_CLASS", None)
        if factory is None:  # a package generated before the factory contract
            return super().build_model(module, config, hf_config, engine_args)
        neuron_config = NeuronConfig.from_engine(
            engine_args, hf_config, tp_degree=distributed.tp_size(),
            ep_degree=distributed.parallel_config().expert_parallel_size,
            dtype=str(torch.get_default_dtype()).removeprefix("torch."),
        )
        archs = hf_config.get("architectures") or []
        if archs and not set(archs) & set(module.ARCHITECTURES):
            # served through a registry alias (engine/registry.py ALIASES): the factory validates the served name
            hf_config = {**hf_config, "architectures": list(module.ARCHITECTURES)}
        return factory.from_configs(hf_config, neuron_config)

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

__all__ = ["TARGET", "NeuronConfig", "NeuronModelConfig", "NeuronRunner", "NeuronTarget", "OnDeviceSamplingConfig",
           "default_buckets"]
