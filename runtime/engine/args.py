"""The engine's arguments: one typed object, validated in one place (vLLM's ``EngineArgs``).

``LLM(model, **kwargs)`` builds an :class:`EngineArgs` from its keyword arguments and calls :meth:`validate` before
anything is spawned, read or allocated; follower ranks rebuild the same engine from :meth:`as_dict` (plain values,
runtime/parallel/launch.py sends them as JSON). Checks that need the checkpoint (dtype from config.json, a context
the RoPE table can cover, the KV cache against the device's memory) belong to the model build
(runtime/engine/model_build.py); this module checks only what the arguments alone decide.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint_dir import CheckpointDir
from ..dummy_weights import check_load_format
from ..loader.checkpoint import finite_mode

# Draft tokens per step the MTP head may propose; more would only lower the acceptance rate (bench/mtp.py).
MAX_SPECULATIVE_TOKENS = 3


@dataclass
class EngineArgs:
    """Every argument of ``LLM(...)``; the class docstring of :class:`~runtime.engine.llm.LLM` says what each does."""

    # ---------------------------------------------------------------------------------------------- what to run
    model: str | Path | CheckpointDir | None = None  # checkpoint directory, hub id or opened CheckpointDir
    target: str = "rocm"  # the generated code: "rocm" (torch on CPU / CUDA / ROCm) or "neuron"
    dtype: str | torch.dtype | None = None  # None: the config's torch_dtype, else float32
    device: str | torch.device = "cpu"
    module: object = None  # a generated model package instead of the registered one (modelgen verify)
    load_format: str = "auto"  # "auto" | "dummy" | "dummy_zeros"
    strict_config: bool = False  # unread config.json keys are an error, not a warning
    # -------------------------------------------------------------------------------------------- sizes, cache
    max_model_len: int | None = None  # None: max_position_embeddings capped at 4096
    block_size: int = 16
    num_blocks: int | None = None  # None: sized from the memory budget below, else max_num_seqs requests
    max_num_seqs: int = 8
    max_num_batched_tokens: int | None = None  # None: the target's default
    kv_cache_memory: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_cap: int | None = None
    # -------------------------------------------------------------------------------------- runner, compilation
    compile: bool = False
    cuda_graphs: bool = True
    on_device_sampling: bool = False
    prefill_buckets: list[int] | None = None  # neuron
    decode_buckets: list[int] | None = None  # neuron
    decode_context_buckets: list[int] | None = None  # neuron
    # ------------------------------------------------------------------------------------------------ loading
    allow_external_shards: bool = False
    check_finite: bool | str = "auto"
    progress: bool | None = None
    quantized_weights: str | None = None  # "keep" | "dequantize" | "auto" (None: MODELGEN_QUANTIZED_WEIGHTS)
    # --------------------------------------------------------------------------------------------- speculation
    speculative_tokens: int | None = None  # K draft tokens per step from the MTP head; None / 0: off
    # -------------------------------------------------------------------------------------------- parallelism
    tensor_parallel_size: int = 1
    expert_parallel_size: int | None = None
    sequence_parallel: bool = False
    mlp_data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    # ---------------------------------------------------------------------------------------------- old names
    checkpoint: str | Path | CheckpointDir | None = None  # the old name of ``model``

    def validate(self) -> "EngineArgs":
        """Refuse a bad argument with one line naming it (ValueError; TypeError for model / checkpoint given both
        or neither). ``checkpoint`` is folded into ``model``. Returns self."""
        if self.checkpoint is not None:
            if self.model is not None:
                raise TypeError("LLM(): give model or checkpoint (its old name), not both")
            self.model, self.checkpoint = self.checkpoint, None
        if self.model is None:
            raise TypeError("LLM(): give the checkpoint directory or hub id (LLM(model=...))")
        # Sizes are checked before any arithmetic uses them (block_size 0 would divide by zero in the KV sizing).
        for name in ("block_size", "max_num_seqs", "tensor_parallel_size", "mlp_data_parallel_size",
                     "pipeline_parallel_size", "data_parallel_size"):
            _positive_int(name, getattr(self, name))
        # (kv_cache_memory and gpu_memory_utilization: runtime/kv_cache.py, which sizes the cache from them)
        for name in ("num_blocks", "max_model_len", "max_num_batched_tokens", "expert_parallel_size",
                     "kv_cache_memory_cap"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        check_load_format(self.load_format)
        if self.check_finite != "auto":
            finite_mode(self.check_finite)
        if self.speculative_tokens:
            check_speculative_tokens(self.speculative_tokens)
        return self

    def as_dict(self) -> dict:
        """The arguments by name (shallow: a CheckpointDir or module stays the object given)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} = {value!r}: expected a positive integer")
    return value


def check_speculative_tokens(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise ValueError(f"speculative_tokens = {k!r}: expected an integer in [1, {MAX_SPECULATIVE_TOKENS}] "
                         f"(draft tokens per step; 0 / None = no speculation)")
    return k
