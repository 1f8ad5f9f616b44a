"""What the engine needs from a target: a runner for the scheduled steps, a token budget, and weight loading."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..block_manager import BlockManager
from ..loader.checkpoint import Checkpoint
from ..loader.protocol import LoadsWeights


@dataclass(frozen=True)
class RunnerOptions:
    """Engine options a runner may use; each target reads the ones that concern it (the others are ignored, as
    before: ``cuda_graphs`` means nothing on neuron, compiled buckets nothing on rocm)."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int | None = None
    cuda_graphs: bool = True
    compile: bool = False
    prefill_buckets: list[int] | None = None
    decode_buckets: list[int] | None = None
    decode_context_buckets: list[int] | None = None
    on_device_sampling: bool = False


@dataclass(frozen=True)
class StepBudget:
    """Tokens one step may feed (None: unlimited) and whether a prompt longer than that is split into chunks."""

    max_num_batched_tokens: int | None
    chunked_prefill: bool


class Target:
    """One target's run-time side. Subclasses set ``name`` and implement :meth:`make_runner`."""

    name: str
    # Whether the model graph can sample (forward returns token ids; LLM(on_device_sampling=True)).
    on_device_sampling: bool = False

    def step_budget(self, options: RunnerOptions) -> StepBudget:
        """The default: the runner continues any chunk over the paged cache, so the budget is the caller's
        (unlimited when None) and chunking is always on."""
        return StepBudget(options.max_num_batched_tokens, True)

    def make_runner(self, model: torch.nn.Module, blocks: BlockManager, device: torch.device,
                    options: RunnerOptions, budget: StepBudget, state_pool=None):
        raise NotImplementedError

    def build_model(self, module, config, hf_config: dict, engine_args: dict) -> torch.nn.Module:
        """The generated model of ``module`` for its typed ``config`` (called under the engine's default dtype and
        device); ``hf_config`` is config.json, ``engine_args`` the ``LLM(...)`` arguments."""
        return module.MODEL_CLASS(config)

    def check_parallel(self) -> None:
        """Refuse parallel options this target does not implement (``distributed.parallel_config()``)."""
        from .. import distributed

        if distributed.parallel_config().sequence_parallel and self.name != "rocm":
            raise ValueError(f"sequence_parallel is implemented for the rocm target, not {self.name}")

    def load(self, model: LoadsWeights, checkpoint: Checkpoint) -> None:
        """Fill the model's parameters: the one ``load_weights(checkpoint)`` of the loader protocol, on every target
        (the model's tables say how; its parameters' device says where). Dummy weights without a tensor layout
        (``runtime/dummy_weights.py``) fill the parameters in place instead."""
        fill = getattr(checkpoint, "fill_in_place", None)
        if fill is not None:
            fill(model)
            return
        model.load_weights(checkpoint)

    def __repr__(self) -> str:
        return f"<target {self.name}>"
