"""The model an engine runs: checkpoint and config read and checked, the generated model built (this rank's part
under pipeline / data parallelism), the KV cache sized and allocated, the weights loaded (quantized formats kept or
dequantized, NaN / Inf checked), and the target's runner made and wrapped for the parallel layout.

:func:`build_model` does it in that order, cheapest checks first, so a bad config or an absurd size is refused in
one line before the (slow) weight load and before any large allocation. The result, :class:`LoadedModel`, is what
the scheduler (runtime/engine/scheduler.py) and the speculative decoder (runtime/engine/speculative.py) run on.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from .. import backends
from ..checkpoint_dir import CheckpointDir
from ..dummy_weights import dummy_checkpoint
from ..hf_config import ConfigError, check_config_keys, check_core_fields
from ..kv_cache import KVSpec, allocate_kv_cache, num_blocks_for_budget
from ..loader.checkpoint import check_finite_tensor, finite_mode
from ..loader.quantization import keep_quantized_weights
from ..parallel.attention_dp import make_block_manager, wrap_runner as wrap_data_parallel_runner
from ..parallel.launch import DriverRunner
from ..parallel.pipeline import build_stage_model
from ..progress import CountingCheckpoint, bar
from ..state_cache import StatePool
from ..targets import get_target
from ..targets.base import RunnerOptions, StepBudget
from .args import EngineArgs
from .registry import find_model

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


# A RoPE table is float32 [positions, rotary_dim]; a config asking for more than this is refused before allocation
# (a 10M-token context at head_dim 128 needs 5.1 GB; max_position_embeddings 1e9 would need tens of GB).
MAX_ROPE_TABLE_BYTES = 8 << 30


def _resolve_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {str(device)!r}: expected cpu or cuda[:N] ({str(e).splitlines()[0]})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r}: no CUDA GPU is available (torch.cuda.is_available() is "
                             f"False); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif dev.type != "cpu":
        raise ValueError(f"device {str(device)!r}: expected cpu or cuda[:N]")
    return dev


def _resolve_dtype(dtype, hf_config: dict, config_path: Path) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype}: expected one of {', '.join(DTYPES)}")
        return dtype
    if dtype is not None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        return DTYPES[dtype]
    for key in ("torch_dtype", "dtype"):
        value = hf_config.get(key)
        if value is None:
            continue
        if value not in DTYPES:  # e.g. "float8", "int8", or a non-string
            raise ConfigError(
                f"{config_path}: field '{key}' = {value!r}: expected one of {', '.join(DTYPES)} "
                f"(or choose the compute dtype with --dtype)"
            )
        return DTYPES[value]
    return torch.float32


def _memory_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_kv_cache_size(bytes_per_block: int, num_blocks: int, block_size: int, device: torch.device) -> None:
    """Refuse a KV cache larger than the device's memory before allocating it (one clear message, not an OOM)."""
    total = bytes_per_block * num_blocks
    memory = _memory_bytes(device)
    if memory and total > memory:
        raise ValueError(
            f"the KV cache would take {total / 1e9:.1f} GB ({num_blocks} blocks x {block_size} tokens x "
            f"{bytes_per_block // block_size} bytes per token), more than the {memory / 1e9:.1f} GB of {device}; "
            f"lower max_model_len, max_num_seqs or num_blocks"
        )


def _aminmax(p: torch.Tensor) -> torch.Tensor:
    """``[min, max]`` of a parameter in float32; 1-byte floats (FP8 weights kept on the GPU) widened a chunk at a
    time: a whole-tensor ``float()`` of DeepSeek-V3's stacked FP8 experts would be a 30 GB temporary."""
    if p.dtype.itemsize > 1:
        return torch.stack(torch.aminmax(p)).float()
    parts = torch.stack([torch.stack(torch.aminmax(c.float())) for c in p.reshape(-1).split(1 << 26)])
    return torch.stack([parts[:, 0].min(), parts[:, 1].max()])


def _check_parameters_finite(model: torch.nn.Module, checkpoint_dir: Path, device: torch.device) -> None:
    """Every floating parameter checked on its device: one min/max reduction each, one host sync for all of them;
    only when something is non-finite is the culprit searched for, to name it."""
    params = [(n, p.detach()) for n, p in model.named_parameters() if p.is_floating_point() and p.numel()]
    if not params:
        return
    stats = torch.stack([_aminmax(p) for _, p in params])
    if bool(torch.isfinite(stats).all()):
        return
    for name, p in params:
        check_finite_tensor(p, name, f"{checkpoint_dir} (loaded to {device})", what="parameter")


def check_rope_table(config, config_path: Path, device: torch.device) -> None:
    """Refuse a ``max_position_embeddings`` whose RoPE table (allocated when the model is built) is absurd."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int):
        return
    head_dim = getattr(config, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim < 1:
        heads = getattr(config, "num_attention_heads", None) or 1
        head_dim = max(1, getattr(config, "hidden_size", 0) // heads)
    scaling = getattr(config, "rope_scaling", None) or {}
    factor = scaling.get("factor") if isinstance(scaling, dict) and scaling.get("rope_type") == "dynamic" else 1.0
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor == factor:  # NaN too
        factor = 1.0  # a malformed factor is the RoPE code's error to report, with its field name
    rows = int(positions * min(max(float(factor), 1.0), 1e6))
    table = rows * head_dim * 4  # float32 cos|sin halves: rotary_dim <= head_dim floats per position
    memory = _memory_bytes(device)
    limit = min(MAX_ROPE_TABLE_BYTES, memory // 2) if memory else MAX_ROPE_TABLE_BYTES
    if table > limit:
        raise ConfigError(
            f"{config_path}: field 'max_position_embeddings' = {positions}: its RoPE table alone would take "
            f"{table / 1e9:.1f} GB ({rows} positions x {head_dim} floats x 4 bytes), over the {limit / 1e9:.1f} GB "
            f"limit; expected a context length this device can hold"
        )


@dataclass(eq=False)
class LoadedModel:
    """A built, loaded model with its KV cache and runner: what one engine (or one follower rank) runs."""

    checkpoint: CheckpointDir
    target: object  # runtime/targets/<name>: the runner, the step budget, weight loading
    module: object  # the generated model package
    device: torch.device
    backend: str
    backend_reason: str
    dtype: torch.dtype
    config: object  # the generated CONFIG_CLASS, read from config.json
    vocab_size: int
    eos_ids: set[int]
    model: torch.nn.Module
    max_model_len: int
    max_num_seqs: int
    blocks: object  # BlockManager, or DataParallelBlocks under attention data parallelism
    state_pool: StatePool | None  # one recurrent-state slot per running request (Gated DeltaNet layers)
    runner: object
    options: RunnerOptions
    budget: StepBudget
    quantized_weights: dict | None  # what keep_quantized_weights decided
    load_seconds: float
    draft_check_finite: str  # the NaN / Inf mode the speculative draft's weights are read with
    ranks: object | None = None  # engine-started ranks this rank 0 drives (runtime/parallel/launch.py)


def build_model(args: EngineArgs, device: torch.device | str, ranks=None) -> LoadedModel:
    """Read, check, build, size, load and wrap, in that order (module docstring). ``args`` validated;
    ``device``: this rank's device (start_ranks picks it); ``ranks``: the followers rank 0 drives, or None."""
    # The directory, its config.json (text_config lifted) and quantization_config: refused here if unsupported.
    checkpoint = args.model if isinstance(args.model, CheckpointDir) else CheckpointDir(args.model)
    config_path, hf_config = checkpoint.config_path, checkpoint.hf_config
    target = get_target(args.target)  # ValueError naming the targets for an unknown one
    module = args.module if args.module is not None else find_model(checkpoint.architectures, target.name, hf_config)
    device = _resolve_device(device)
    backend, backend_reason = backends.select(target.name, device)
    dtype = _resolve_dtype(args.dtype, hf_config, config_path)
    config = _read_config(module, hf_config, config_path, args.strict_config)
    check_rope_table(config, config_path, device)
    eos_ids = checkpoint.eos_token_ids()  # before the (slow) weight load: a bad field fails fast
    with default_dtype(dtype), device:
        # neuron: through the generated factory, with a NeuronConfig from these arguments
        # pipeline_parallel_size > 1: this rank's stage only (runtime/parallel/pipeline.py)
        model = build_stage_model(target, module, config, hf_config, args.as_dict())
    model.eval()
    max_model_len = _max_model_len(args.max_model_len, config, model)
    # Layers declare their caches: paged K/V blocks, or (recurrent layers such as Gated DeltaNet) one state slot
    # per running request, held in a pool beside the blocks.
    declared = model.get_kv_spec()
    state_specs = declared.request_states()
    kv_spec = declared.paged()
    num_blocks = _num_blocks(args, kv_spec, state_specs, max_model_len, device)
    quantized, load_seconds, draft_check_finite = _load_weights(args, checkpoint, target, model, dtype, device)
    blocks = make_block_manager(num_blocks, args.block_size)  # data_parallel_size > 1: one per rank
    caches = allocate_kv_cache(kv_spec, num_blocks, args.block_size, device)
    state_pool = None
    if state_specs:
        # One slot per request that can run at once; a slot is taken at admission and freed with the blocks.
        state_pool = StatePool(state_specs, args.max_num_seqs, device)
        caches.update(state_pool.tensors())
    model.bind_kv_cache(caches)
    # Token budget per step: prompts longer than it are prefilled in chunks. The target decides: rocm continues a
    # chunk over the paged cache natively (unlimited by default); on neuron the budget is the largest prefill
    # bucket and a smaller one turns on segmented prefill (one more graph per prefill x context bucket).
    options = RunnerOptions(
        max_model_len=max_model_len, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, cuda_graphs=args.cuda_graphs, compile=args.compile,
        prefill_buckets=args.prefill_buckets, decode_buckets=args.decode_buckets,
        decode_context_buckets=args.decode_context_buckets, on_device_sampling=args.on_device_sampling,
    )
    budget = target.step_budget(options)
    runner = target.make_runner(model, blocks, device, options, budget, state_pool=state_pool)
    # attention data parallelism: each rank runs its own requests, logits come back to rank 0
    runner = wrap_data_parallel_runner(runner, blocks, int(config.vocab_size))
    if ranks is not None:  # rank 0 of engine-started ranks: every model call is broadcast first
        runner = DriverRunner(runner, ranks, blocks, state_pool)
    loaded = LoadedModel(
        checkpoint=checkpoint, target=target, module=module, device=device, backend=backend,
        backend_reason=backend_reason, dtype=dtype, config=config, vocab_size=int(config.vocab_size),
        eos_ids=eos_ids, model=model, max_model_len=max_model_len, max_num_seqs=args.max_num_seqs, blocks=blocks,
        state_pool=state_pool, runner=runner, options=options, budget=budget, quantized_weights=quantized,
        load_seconds=load_seconds, draft_check_finite=draft_check_finite, ranks=ranks,
    )
    if ranks is not None:
        ranks.ready(loaded)  # every rank built its engine; rank 0 schedules over the smallest block count
    return loaded


def _read_config(module, hf_config: dict, config_path: Path, strict: bool):
    """The generated config class read from config.json, with the checks every architecture shares."""
    # Fields every architecture has: a count or size below 1 is a config error here, not a division by zero or
    # "unexpected tensors" later; the generated readers check types.
    check_core_fields(hf_config, str(config_path))
    try:
        config = module.CONFIG_CLASS.from_hf_config(hf_config)
    except ConfigError as e:
        raise ConfigError(f"{config_path}: {e}") from None
    check_core_fields(config, str(config_path))  # derived values too (head_dim = hidden // heads)
    # Keys the spec does not read may change the output (a multiplier, an activation): named, never silent.
    check_config_keys(hf_config, module.CONFIG_CLASS, str(config_path), spec=module.SPEC, strict=strict)
    return config


def _max_model_len(requested: int | None, config, model: torch.nn.Module) -> int:
    max_model_len = requested or min(getattr(config, "max_position_embeddings", 2048), 4096)
    # Positions index a precomputed RoPE table (max_position_embeddings rows, more for dynamic NTK): refuse a
    # context the table cannot cover instead of failing inside a kernel.
    rope_rows = min((b.shape[0] for n, b in model.named_buffers() if "cos_sin" in n), default=None)
    if rope_rows is not None and max_model_len > rope_rows:
        raise ValueError(
            f"max_model_len {max_model_len} exceeds the {rope_rows} positions of the model's RoPE table "
            f"(config max_position_embeddings); lower max_model_len"
        )
    return max_model_len


def _num_blocks(args: EngineArgs, kv_spec: KVSpec, state_specs: list, max_model_len: int,
                device: torch.device) -> int:
    """KV blocks: as given, or from a memory budget, else ``max_num_seqs`` full-length requests; refused when the
    cache would not fit the device's memory."""
    num_blocks, block_size = args.num_blocks, args.block_size
    if num_blocks is None:  # a memory budget sizes the cache, else max_num_seqs full-length requests do
        per_request = -(-max_model_len // block_size)
        num_blocks = num_blocks_for_budget(
            kv_spec, block_size, device, kv_cache_memory=args.kv_cache_memory,
            gpu_memory_utilization=args.gpu_memory_utilization, min_blocks=per_request,
            # speculative decoding also keeps K + 1 per-token checkpoints of every slot (StatePool.enable_checkpoints)
            state_bytes=StatePool.bytes_per_slot_of(state_specs) * args.max_num_seqs
            * (1 + (args.speculative_tokens + 1 if args.speculative_tokens else 0)),
        ) or args.max_num_seqs * per_request
        if args.kv_cache_memory_cap is not None and args.kv_cache_memory is None \
                and args.gpu_memory_utilization is None:
            # at most this many bytes (`modelgen serve`'s default), never fewer than one full-length request
            cap = args.kv_cache_memory_cap // max(1, kv_spec.bytes_per_block(block_size))
            num_blocks = max(per_request, min(num_blocks, cap))
    _check_kv_cache_size(kv_spec.bytes_per_block(block_size), num_blocks, block_size, device)
    return num_blocks


def _load_weights(args: EngineArgs, checkpoint: CheckpointDir, target, model: torch.nn.Module, dtype: torch.dtype,
                  device: torch.device) -> tuple[dict | None, float, str]:
    """Load the weights into ``model``; returns (what keep_quantized_weights decided, seconds, the NaN / Inf mode
    for the draft's weights)."""
    # NaN/Inf check of the weights. On an accelerator, any mode but "off" checks every parameter on the device
    # after the copy (the GPU read-ahead path never goes through Checkpoint.get_tensor; measured on an H200:
    # +1.4 ms on a 28 ms load of 0.62 GB). On CPU, where loading is a memcpy from the page cache and a full
    # pass measured +25-38% of it, "auto" is the sampled check at read (1/64 of the bytes of large tensors;
    # within noise on SmolLM2-135M); "full" checks all (numbers in loader/checkpoint.py).
    mode = args.check_finite if args.check_finite == "auto" else finite_mode(args.check_finite)
    on_device_check = mode != "off" and device.type != "cpu"
    if mode == "auto":
        mode = "sampled"
    read_mode = "off" if on_device_check else mode
    weights = dummy_checkpoint(checkpoint, dtype, device, args.load_format) if args.load_format != "auto" \
        else checkpoint.open_weights(dtype, allow_external_shards=args.allow_external_shards, check_finite=read_mode)
    quantized = None
    with weights as ckpt:
        t0 = time.perf_counter()
        if args.load_format == "auto":  # FP8 / MXFP4 layers switched to their stored format (GPU path only)
            quantized = keep_quantized_weights(model, ckpt, target=target.name, device=device,
                                               mode=args.quantized_weights)
        # The bar counts tensors read through get_tensor (the GPU raw-byte read-ahead bypasses it: the bar then
        # jumps to the end when loading is done).
        with bar(args.progress, total=len(ckpt.keys()), unit="tensor", desc="loading weights") as pbar:
            # the model's load_weights(checkpoint), the same on every target
            target.load(model, CountingCheckpoint(ckpt, pbar) if not pbar.disable else ckpt)
            pbar.n = pbar.total
        load_seconds = time.perf_counter() - t0
    if on_device_check:
        _check_parameters_finite(model, checkpoint.path, device)
    return quantized, load_seconds, read_mode
