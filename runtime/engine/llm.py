"""The generate loop: load a checkpoint through its generated module, then continuous batching over a paged cache.

The engine is target-independent: it reads the checkpoint directory through :class:`CheckpointDir`, finds the
generated model for the target, and talks to the target object (``runtime/targets/``) for the runner, the step
budget and weight loading.

Scheduling (one step = one model call): waiting requests are admitted while their prompts fit in free KV blocks;
every running request then feeds its uncomputed tokens (a prompt, a prompt chunk, or the last sampled token), within
a per-step token budget (``max_num_batched_tokens``) that splits long prompts into chunks. On the rocm target
prefill chunks and decodes share a step; on neuron a step is all prefill or all decode (separate graphs). When a
decode needs a block and none is free, the most recently admitted request is preempted (its blocks freed, its tokens
recomputed later); a request that cannot fit even alone raises :class:`CacheFullError`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from .. import backends
from ..hf_config import ConfigError, check_config_keys, check_core_fields
from ..kv_cache import KVSpec, allocate_kv_cache, num_blocks_for_budget
from ..state_cache import StatePool
from ..checkpoint_dir import CheckpointDir
from ..dummy_weights import check_load_format, dummy_checkpoint
from ..parallel.launch import DriverRunner, abort_ranks_on_error, release_graphs, start_ranks
from ..parallel.attention_dp import make_block_manager, wrap_runner as wrap_data_parallel_runner
from ..parallel.pipeline import build_stage_model
from ..loader.checkpoint import check_finite_tensor, finite_mode
from ..progress import CountingCheckpoint, bar
from ..targets import get_target
from ..targets.base import RunnerOptions
from .block_manager import CacheFullError
from .pipelined import PipelinedDecode
from .outputs import CompletionOutput, IncrementalDecoder, Logprob, RequestOutput, RequestStats, StreamDelta
from .registry import find_model
from .runners import Work
from .sampler import SamplingParams, sample

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


def _positive_int(name: str, value, what: str = "a positive integer") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} = {value!r}: expected {what}")
    return value


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


def _is_ids(x) -> bool:
    """A token-id sequence: a list / tuple (or tensor / array) of integers, not a str or a dict."""
    if isinstance(x, (str, bytes, dict)) or not hasattr(x, "__iter__"):
        return False
    try:
        return all(not isinstance(t, bool) and operator.index(t) is not None for t in x)
    except TypeError:
        return False


def _is_id_lists(prompts) -> bool:
    """A list of token-id sequences (the old ``generate`` input)."""
    return isinstance(prompts, (list, tuple)) and bool(prompts) and all(
        not isinstance(p, (str, dict)) and hasattr(p, "__len__") and _is_ids(p) for p in prompts)


def _prompt_items(prompts) -> list[tuple[str | None, list[int] | None]]:
    """``generate``'s prompts as (text, None) / (None, token ids) pairs."""
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    elif _is_ids(prompts) and len(prompts):
        prompts = [prompts]  # a list of ints: one prompt
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts: expected a str, a list of str, token ids (a list of ints or of lists of ints) or "
                         "{'prompt_token_ids': [...]} / {'prompt': '...'} dicts")
    items = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            items.append((p, None))
        elif isinstance(p, dict):
            if "prompt_token_ids" in p:
                items.append((p.get("prompt"), list(p["prompt_token_ids"])))
            elif isinstance(p.get("prompt"), str):
                items.append((p["prompt"], None))
            else:
                raise ValueError(f"prompt {i}: a dict needs 'prompt_token_ids' or 'prompt' (a conversation of "
                                 f"{{'role', 'content'}} messages goes to chat())")
        else:
            items.append((None, list(p)))
    return items


@dataclass(eq=False)  # identity comparison: the scheduler's list membership tests stay O(1) per element
class _Request:
    seq_id: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    output: list[int] = field(default_factory=list)
    computed: int = 0  # tokens whose K/V are in the cache
    done: bool = False
    tokens: list[int] = field(default_factory=list)  # prompt + output, grown in place (no per-step concatenation)
    finish_reason: str | None = None  # "stop" (EOS / stop token) or "length" (max_new_tokens) once done
    # perf_counter() times: submission, first sampled token, completion (per-request stats of the text API)
    t_submit: float = 0.0
    t_first: float | None = None
    t_done: float | None = None
    logprobs: list = field(default_factory=list)  # params.logprobs set: one (logprob, top) per output token (sampler)
    t_admit: float | None = None  # first admission into the running batch (RequestStats.queued_s)
    preemptions: int = 0
    stop_reason: str | int | None = None  # the stop string / stop token id that ended it
    stop_text: str | None = None  # params.stop: the decoded output cut before the stop string that ended it
    stop_scanned: int = 0  # params.stop: characters of decoded output already searched for the stop strings

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt) + list(self.output)
        self.t_submit = time.perf_counter()

    def append(self, token: int) -> None:
        self.output.append(token)
        self.tokens.append(token)


@dataclass
class GenerateStats:
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    steps: int = 0
    preemptions: int = 0
    speculative: object | None = None  # SpeculativeStats when LLM(speculative_tokens=K)

    def as_dict(self) -> dict:
        out = {
            **self.__dict__,
            "decode_tokens_per_s": self.decode_tokens / self.decode_s if self.decode_s else None,
            "prefill_tokens_per_s": self.prefill_tokens / self.prefill_s if self.prefill_s else None,
        }
        spec = out.pop("speculative")
        if spec is not None:  # acceptance_rate, mean_accepted_tokens at the top; the rest under "speculative"
            out["speculative"] = spec.as_dict()
            out["acceptance_rate"] = out["speculative"]["acceptance_rate"]
            out["mean_accepted_tokens"] = out["speculative"]["mean_accepted_tokens"]
        return out


class LLM:
    """An inference engine over one checkpoint: continuous batching over a paged KV cache (vLLM's ``LLM`` API).

    ``LLM(model)`` / ``LLM(model=...)`` loads a Hugging Face-layout checkpoint directory or a hub id (``org/name``,
    resolved through the local hub cache: runtime/hub.py) with the generated model of its architecture; then
    :meth:`generate` (text or token-id prompts -> :class:`RequestOutput`), :meth:`chat`, :meth:`stream`,
    :meth:`generate_ids` (token ids in, token ids out) and :meth:`score` (teacher-forced logits).

    Args:
        model: the checkpoint directory or hub id (also accepted as ``checkpoint=``, its old name, or an opened
            :class:`CheckpointDir`).
        target: the generated code to run: ``"rocm"`` (default; torch on CPU / CUDA / ROCm) or ``"neuron"``.
        dtype: compute dtype (``"float32"``, ``"bfloat16"``, ``"float16"`` or a torch dtype); None: the config's
            ``torch_dtype``, else float32.
        device: ``"cpu"`` (default) or ``"cuda[:N]"``.
        max_model_len: longest prompt + output, in tokens; None: the config's ``max_position_embeddings`` capped
            at 4096.
        block_size: tokens per KV-cache block (default 16).
        num_blocks: KV-cache blocks; None: sized from ``kv_cache_memory`` / ``gpu_memory_utilization``, else
            ``max_num_seqs`` full-length requests.
        max_num_seqs: requests running at once (default 8); more wait.
        compile: ``torch.compile`` the model's step (GPU).
        prefill_buckets: neuron: the prompt lengths graphs are compiled for.
        decode_buckets: neuron: the batch sizes decode graphs are compiled for.
        decode_context_buckets: neuron: the context lengths decode graphs are compiled for.
        cuda_graphs: capture decode steps as CUDA graphs (default True; GPU only).
        on_device_sampling: sample inside the compiled graph (one RNG stream for the batch: a seed makes the run,
            not each request, reproducible).
        max_num_batched_tokens: tokens per engine step; longer prompts are prefilled in chunks. None: the
            target's default (unlimited on rocm, the largest prefill bucket on neuron).
        allow_external_shards: accept safetensors shards that resolve outside the checkpoint directory.
        check_finite: NaN / Inf check of the weights: ``"auto"`` (default: sampled on CPU, full on the device),
            ``"full"`` / True, ``"sampled"``, ``"off"`` / False.
        progress: a tqdm bar over the checkpoint tensors while loading; None (default) draws it only when stderr
            is a terminal, False never (runtime/progress.py).
        speculative_tokens: K draft tokens per step from the checkpoint's MTP head (speculative decoding); None: off.
        tensor_parallel_size: N > 1 spawns ranks 1..N-1 that build the same engine on their shards; this process
            is rank 0 and broadcasts every step (runtime/parallel/launch.py).
        expert_parallel_size: the MoE experts' layout over the ranks (distributed.ParallelConfig); None: the
            tensor-parallel layout.
        load_format: ``"auto"`` (the checkpoint's weights), ``"dummy"`` / ``"dummy_zeros"`` (random / zero weights
            from config.json alone).
        kv_cache_memory: bytes for the KV cache (sizes ``num_blocks``).
        gpu_memory_utilization: fraction of the device's memory the KV cache may fill (sizes ``num_blocks``).
        sequence_parallel: shard activations over the tensor-parallel ranks between layers.
        mlp_data_parallel_size: data-parallel groups for the dense MLPs inside the tensor-parallel group.
        pipeline_parallel_size: pipeline stages (each rank builds its stage's layers only).
        data_parallel_size: attention data parallelism: each rank runs its own requests.
        strict_config: config.json keys the spec neither reads nor ignores are an error instead of a warning
            (hf_config.check_config_keys).
        module: the generated model package to run instead of the one registered for the checkpoint's
            architectures (``modelgen verify`` runs a spec rendered into a temporary folder).
        quantized_weights: ``"keep"`` / ``"dequantize"`` / ``"auto"`` (default, or ``MODELGEN_QUANTIZED_WEIGHTS``):
            whether FP8 / MXFP4 checkpoints keep their quantized weights on the GPU path
            (runtime/loader/quantization.py keep_quantized_weights); the torch path always dequantizes.
        kv_cache_memory_cap: bytes the default KV cache (no num_blocks / kv_cache_memory /
            gpu_memory_utilization) may take at most, but never fewer blocks than one max_model_len request.
        checkpoint: the old name of ``model`` (keyword).

    Raises ValueError / ConfigError / CheckpointError with one line naming the argument, field or file at fault.
    """

    @abort_ranks_on_error
    def __init__(
        self,
        model: str | Path | CheckpointDir | None = None,
        target: str = "rocm",
        dtype: str | torch.dtype | None = None,
        device: str | torch.device = "cpu",
        *,
        max_model_len: int | None = None,
        block_size: int = 16,
        num_blocks: int | None = None,
        max_num_seqs: int = 8,
        compile: bool = False,
        prefill_buckets: list[int] | None = None,
        decode_buckets: list[int] | None = None,
        decode_context_buckets: list[int] | None = None,
        cuda_graphs: bool = True,
        on_device_sampling: bool = False,
        max_num_batched_tokens: int | None = None,
        allow_external_shards: bool = False,
        check_finite: bool | str = "auto",
        progress: bool | None = None,
        speculative_tokens: int | None = None,
        tensor_parallel_size: int = 1,
        expert_parallel_size: int | None = None,
        load_format: str = "auto",
        kv_cache_memory: int | None = None,
        gpu_memory_utilization: float | None = None,
        sequence_parallel: bool = False,
        mlp_data_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        data_parallel_size: int = 1,
        strict_config: bool = False,
        module=None,
        quantized_weights: str | None = None,
        kv_cache_memory_cap: int | None = None,
        checkpoint: str | Path | CheckpointDir | None = None,
    ):
        """Load the checkpoint and build the engine: every parameter is described in the class docstring."""
        if checkpoint is None:
            if model is None:
                raise TypeError("LLM(): give the checkpoint directory or hub id (LLM(model=...))")
            checkpoint = model
        elif model is not None:
            raise TypeError("LLM(): give model or checkpoint (its old name), not both")
        del model  # followers rebuild the engine from checkpoint= (launch._json_args)
        # tensor_parallel_size N > 1: ranks 1..N-1 are spawned now and build the same engine on their shards; this
        # process is rank 0 and broadcasts every step (runtime/parallel/launch.py). expert_parallel_size: the
        # MoE layout (distributed.ParallelConfig). load_format "dummy"/"dummy_zeros": weights from config.json.
        check_load_format(load_format)
        engine_args = {k: v for k, v in locals().items() if k != "self"}  # for follower ranks and the target
        self._ranks, device = start_ranks(engine_args, tensor_parallel_size, expert_parallel_size, device)
        # The directory, its config.json (text_config lifted) and quantization_config: refused here if unsupported.
        self.checkpoint = checkpoint if isinstance(checkpoint, CheckpointDir) else CheckpointDir(checkpoint)
        self.checkpoint_dir = self.checkpoint.path
        config_path = self.checkpoint.config_path
        hf_config = self.checkpoint.hf_config
        self.target = get_target(target)  # ValueError naming the targets for an unknown one
        # Engine sizes: checked before any arithmetic uses them (block_size 0 would divide by zero below).
        _positive_int("block_size", block_size)
        _positive_int("max_num_seqs", max_num_seqs)
        for name, value in (("num_blocks", num_blocks), ("max_model_len", max_model_len),
                            ("max_num_batched_tokens", max_num_batched_tokens)):
            if value is not None:
                _positive_int(name, value)
        self.module = module if module is not None else find_model(self.checkpoint.architectures, self.target.name, self.checkpoint.hf_config)
        self.device = _resolve_device(device)
        self.backend, self.backend_reason = backends.select(self.target.name, self.device)
        self.dtype = _resolve_dtype(dtype, hf_config, config_path)
        # Fields every architecture has: a count or size below 1 is a config error here, not a division by zero
        # or "unexpected tensors" later; the generated readers check types.
        check_core_fields(hf_config, str(config_path))
        try:
            self.config = self.module.CONFIG_CLASS.from_hf_config(hf_config)
        except ConfigError as e:
            raise ConfigError(f"{config_path}: {e}") from None
        check_core_fields(self.config, str(config_path))  # derived values too (head_dim = hidden // heads)
        # Keys the spec does not read may change the output (a multiplier, an activation): named, never silent.
        check_config_keys(hf_config, self.module.CONFIG_CLASS, str(config_path), spec=self.module.SPEC,
                          strict=strict_config)
        check_rope_table(self.config, config_path, self.device)
        self.vocab_size = int(self.config.vocab_size)
        self.eos_ids = self.checkpoint.eos_token_ids()  # before the (slow) weight load: a bad field fails fast
        with default_dtype(self.dtype), self.device:
            # neuron: through the generated factory, with a NeuronConfig from these arguments
            # pipeline_parallel_size > 1: this rank's stage only (runtime/parallel/pipeline.py)
            self.model = build_stage_model(self.target, self.module, self.config, hf_config, engine_args)
        self.model.eval()
        # Sizes that depend on the built model, checked before the (slow) weight load.
        self.max_model_len = max_model_len or min(getattr(self.config, "max_position_embeddings", 2048), 4096)
        # Positions index a precomputed RoPE table (max_position_embeddings rows, more for dynamic NTK): refuse a
        # context the table cannot cover instead of failing inside a kernel.
        rope_rows = min((b.shape[0] for n, b in self.model.named_buffers() if "cos_sin" in n), default=None)
        if rope_rows is not None and self.max_model_len > rope_rows:
            raise ValueError(
                f"max_model_len {self.max_model_len} exceeds the {rope_rows} positions of the model's RoPE table "
                f"(config max_position_embeddings); lower max_model_len"
            )
        self.max_num_seqs = max_num_seqs
        # Layers declare their caches: paged K/V blocks, or (recurrent layers such as Gated DeltaNet) one state slot
        # per running request, held in a pool beside the blocks.
        declared = self.model.get_kv_spec()
        state_specs = [layer for layer in declared.layers if layer.kind == "recurrent_state"]
        kv_spec = KVSpec(layers=[layer for layer in declared.layers if layer.kind != "recurrent_state"])
        if num_blocks is None:  # a memory budget sizes the cache, else max_num_seqs full-length requests do
            per_request = -(-self.max_model_len // block_size)
            num_blocks = num_blocks_for_budget(
                kv_spec, block_size, self.device, kv_cache_memory=kv_cache_memory,
                gpu_memory_utilization=gpu_memory_utilization, min_blocks=per_request,
                state_bytes=StatePool.bytes_per_slot_of(state_specs) * max_num_seqs,
            ) or max_num_seqs * per_request
            if kv_cache_memory_cap is not None and kv_cache_memory is None and gpu_memory_utilization is None:
                # at most this many bytes (`modelgen serve`'s default), never fewer than one full-length request
                cap = kv_cache_memory_cap // max(1, kv_spec.bytes_per_block(block_size))
                num_blocks = max(per_request, min(num_blocks, cap))
        _check_kv_cache_size(kv_spec.bytes_per_block(block_size), num_blocks, block_size, self.device)
        # NaN/Inf check of the weights. On an accelerator, any mode but "off" checks every parameter on the device
        # after the copy (the GPU read-ahead path never goes through Checkpoint.get_tensor; measured on an H200:
        # +1.4 ms on a 28 ms load of 0.62 GB). On CPU, where loading is a memcpy from the page cache and a full
        # pass measured +25-38% of it, "auto" is the sampled check at read (1/64 of the bytes of large tensors;
        # within noise on SmolLM2-135M); "full" checks all (numbers in loader/checkpoint.py).
        mode = check_finite if check_finite == "auto" else finite_mode(check_finite)  # validates the value
        on_device_check = mode != "off" and self.device.type != "cpu"
        if mode == "auto":
            mode = "sampled"
        weights = dummy_checkpoint(self.checkpoint, self.dtype, self.device, load_format) if load_format != "auto" \
            else self.checkpoint.open_weights(self.dtype, allow_external_shards=allow_external_shards,
                                              check_finite="off" if on_device_check else mode)
        self.quantized_weights: dict | None = None  # what keep_quantized_weights decided
        with weights as ckpt:
            t0 = time.perf_counter()
            if load_format == "auto":  # FP8 / MXFP4 layers switched to their stored format (GPU path only)
                from ..loader.quantization import keep_quantized_weights

                self.quantized_weights = keep_quantized_weights(self.model, ckpt, target=self.target.name,
                                                                device=self.device, mode=quantized_weights)
            # The bar counts tensors read through get_tensor (the GPU raw-byte read-ahead bypasses it: the bar then
            # jumps to the end when loading is done).
            with bar(progress, total=len(ckpt.keys()), unit="tensor", desc="loading weights") as pbar:
                # the model's load_weights(checkpoint), the same on every target
                self.target.load(self.model, CountingCheckpoint(ckpt, pbar) if not pbar.disable else ckpt)
                pbar.n = pbar.total
            self.load_seconds = time.perf_counter() - t0
        if on_device_check:
            _check_parameters_finite(self.model, self.checkpoint_dir, self.device)
        self.blocks = make_block_manager(num_blocks, block_size)  # data_parallel_size > 1: one per rank
        self._tokenizer = None  # read at first use by the text API (complete / chat / stream)
        # Per-request resources, each released by seq id (idempotent, a no-op for ids that hold nothing): every exit
        # of generate/score calls all of them, so another kind of per-request state (a recurrent-state slot, an
        # on-device sampling slot) is one more entry here.
        self._request_releasers = (self.blocks.release,)
        caches = allocate_kv_cache(kv_spec, num_blocks, block_size, self.device)
        self.state_pool: StatePool | None = None
        if state_specs:
            # One slot per request that can run at once; a slot is taken at admission and freed with the blocks.
            self.state_pool = StatePool(state_specs, max_num_seqs, self.device)
            self._request_releasers += (self.state_pool.free,)
            caches.update(self.state_pool.tensors())
        self.model.bind_kv_cache(caches)
        # Token budget per step: prompts longer than it are prefilled in chunks. The target decides: rocm continues a
        # chunk over the paged cache natively (unlimited by default); on neuron the budget is the largest prefill
        # bucket and a smaller one turns on segmented prefill (one more graph per prefill x context bucket).
        options = RunnerOptions(
            max_model_len=self.max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            cuda_graphs=cuda_graphs, compile=compile, prefill_buckets=prefill_buckets, decode_buckets=decode_buckets,
            decode_context_buckets=decode_context_buckets, on_device_sampling=on_device_sampling,
        )
        budget = self.target.step_budget(options)
        self.max_num_batched_tokens = budget.max_num_batched_tokens
        self.chunked_prefill = budget.chunked_prefill
        self.runner = self.target.make_runner(self.model, self.blocks, self.device, options, budget,
                                              state_pool=self.state_pool)
        # attention data parallelism: each rank runs its own requests, logits come back to rank 0
        self.runner = wrap_data_parallel_runner(self.runner, self.blocks, self.vocab_size)
        if self._ranks is not None:  # rank 0 of engine-started ranks: every model call is broadcast first
            self.runner = DriverRunner(self.runner, self._ranks, self.blocks, self.state_pool)
            self._ranks.ready(self)
        # Speculative decoding: K draft tokens per step from the checkpoint's MTP head (runtime/engine/speculative.py).
        self.speculative = None
        if speculative_tokens:
            from .speculative import SpeculativeDecoder

            self.speculative = SpeculativeDecoder(self, speculative_tokens, options, budget,
                                                  allow_external_shards=allow_external_shards,
                                                  check_finite="off" if on_device_check else mode)
            self._request_releasers += (self.speculative.release,)
        self._next_id = 0
        self.stats = GenerateStats()
        self.pipelined = PipelinedDecode(self) if PipelinedDecode.applies(self) else None

    def warmup(self) -> None:
        """Compile/capture everything the runner would otherwise build on first use (GPU decode graphs, and the
        speculative steps' graphs when speculation is on)."""
        warm = getattr(self.runner, "warmup", None)
        if warm is not None:
            warm()
        if self.speculative is not None:
            self.speculative.warmup()

    def close(self) -> None:
        """Stop the ranks this engine started (``tensor_parallel_size`` > 1) and destroy their group; a no-op
        otherwise. The engine is unusable afterwards."""
        if self._ranks is not None:
            release_graphs(self)  # before the NCCL group goes (launch.release_graphs says why)
            self._ranks.shutdown()

    # ------------------------------------------------------------------------------------------------------ scoring
    def score(self, prompt: list[int]) -> torch.Tensor:
        """Teacher-forced logits ``[len(prompt), V]`` of one prompt (a single prefill through the paged cache)."""
        prompt = self._checked_prompt(0, prompt)
        if len(prompt) > self.max_model_len:
            raise ValueError(f"prompt 0 has {len(prompt)} tokens, more than max_model_len {self.max_model_len}")
        seq_id = self._next_id
        self._next_id += 1
        try:
            self.blocks.ensure(seq_id, len(prompt))
            if self.state_pool is not None:
                self.state_pool.allocate(seq_id)
            return self.runner.step([Work(seq_id, prompt, 0)], all_positions=True)
        finally:
            self._release_all([seq_id])

    def _release(self, seq_id: int) -> None:
        for release in self._request_releasers:
            release(seq_id)

    def _release_all(self, seq_ids: list[int]) -> None:
        """Release every resource of every id, even if one release fails (the first such error is re-raised)."""
        first: BaseException | None = None
        for seq_id in seq_ids:
            for release in self._request_releasers:
                try:
                    release(seq_id)
                except Exception as e:  # keep freeing the rest; a leak elsewhere would make the instance unusable
                    first = first or e
        if first is not None:
            raise first

    def _checked_prompt(self, index: int, prompt) -> list[int]:
        """The prompt as a list of ints; a ValueError naming the prompt and token unless every id is in the vocab."""
        ids = list(prompt)
        if not ids:
            raise ValueError(f"prompt {index} is empty")
        for pos, t in enumerate(ids):
            try:  # Python, numpy and 0-d torch integers (anything with __index__); not floats or bools
                v = operator.index(t) if not isinstance(t, bool) else None
            except TypeError:
                v = None
            if v is None or not 0 <= v < self.vocab_size:
                raise ValueError(
                    f"prompt {index}: token id {t!r} at position {pos} is outside the vocabulary: expected an integer "
                    f"in [0, {self.vocab_size - 1}] (vocab_size {self.vocab_size})"
                )
            ids[pos] = v
        return ids

    # ------------------------------------------------------------------------------------------------------ generate
    def generate_ids(self, prompts: list[list[int]],
                     params: SamplingParams | list[SamplingParams] | None = None) -> list[list[int]]:
        """Generated token ids (prompt excluded) for each token-id prompt, in order: the token-level API (no
        tokenizer needed, no ``n`` or ``stop`` strings); :meth:`generate`, :meth:`chat` and :meth:`stream` are the
        text-level ones.

        Args:
            prompts: one list of token ids per request.
            params: one :class:`SamplingParams` for all, or one per prompt; None is ``SamplingParams()``.

        Every request is validated before any is admitted; whatever happens inside the loop (a kernel error, a
        full cache, KeyboardInterrupt), the KV blocks and other per-request resources of this call are released
        and the instance stays usable.
        """
        reqs = self._make_requests(prompts, params if params is not None else SamplingParams())
        for _ in self._run(reqs):
            pass
        return [r.output for r in reqs]

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
                 params=None) -> list[RequestOutput]:
        """vLLM's ``LLM.generate``: one :class:`RequestOutput` per prompt, in order, all prompts in one continuous
        batch.

        Args:
            prompts: a str; a list of str; token ids (a list of ints is one prompt, a list of lists of ints one
                prompt each); vLLM's ``{"prompt_token_ids": [...]}`` / ``{"prompt": "..."}`` dicts, or a list of
                them. Text is encoded as is, with the tokenizer's special tokens (no chat template: see
                :meth:`chat`).
            sampling_params: one :class:`SamplingParams` for every prompt or a list of one per prompt; None is
                ``SamplingParams()`` (greedy, 16 tokens). ``n`` samples per prompt land in ``outputs[i]``.
            params: deprecated keyword spelling of ``sampling_params``.

        Compatibility (one release): a list of token-id lists with SamplingParams that spell ``max_new_tokens``
        (or leave ``max_tokens`` unset) returns lists of generated token ids as before, with a DeprecationWarning;
        use :meth:`generate_ids` for that. Same validation and exception safety as :meth:`generate_ids`.
        """
        sampling_params = self._sampling_params_arg(sampling_params, params, "generate")
        if sampling_params is not None and _is_id_lists(prompts) and not any(
                p._vllm_names for p in (sampling_params if isinstance(sampling_params, list) else [sampling_params])):
            import warnings

            warnings.warn("LLM.generate(list of token-id lists, SamplingParams(max_new_tokens=...)) returning lists "
                          "of token ids is deprecated: use generate_ids() for that, or SamplingParams(max_tokens=...) "
                          "for RequestOutputs", DeprecationWarning, stacklevel=2)
            return self.generate_ids(prompts, sampling_params)
        items = _prompt_items(prompts)
        texts = [t for t, _ in items]
        encoded = [ids if ids is not None else self._encode(t) for t, ids in items]
        return self._complete(encoded, sampling_params, texts)

    @staticmethod
    def _sampling_params_arg(sampling_params, params, method: str):
        if params is not None:
            if sampling_params is not None:
                raise TypeError(f"{method}(): give sampling_params or its deprecated spelling params, not both")
            import warnings

            warnings.warn(f"LLM.{method}(params=...) is deprecated: use sampling_params=... (vLLM's name)",
                          DeprecationWarning, stacklevel=3)
            return params
        return sampling_params

    def _make_requests(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[_Request]:
        """Validated requests (nothing admitted yet): ValueError naming the prompt for an empty/out-of-vocab prompt or
        one that cannot fit with its max_new_tokens."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(plist)} SamplingParams")
        checked = [self._checked_prompt(i, prompt) for i, prompt in enumerate(prompts)]
        if any(p.stop for p in plist) and self._maybe_tokenizer() is None:
            raise ValueError(f"stop = {next(p.stop for p in plist if p.stop)!r}: stop strings need the checkpoint's "
                             f"tokenizer.json ({self.checkpoint_dir} has none); use stop_token_ids")
        if any(p.n != 1 for p in plist):
            raise ValueError("n > 1: use generate() / complete() / chat(), which expand it into n requests")
        for i, (prompt, p) in enumerate(zip(checked, plist)):
            if len(prompt) + p.max_new_tokens > self.max_model_len:
                raise ValueError(
                    f"prompt {i} ({len(prompt)} tokens) + max_new_tokens ({p.max_new_tokens}) exceeds max_model_len "
                    f"{self.max_model_len}"
                )
        reqs = []
        for prompt, p in zip(checked, plist):
            gen = None
            if p.temperature > 0:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(p.seed if p.seed is not None else torch.seed())
            r = _Request(self._next_id, prompt, p, gen, done=p.max_new_tokens == 0)
            if r.done:
                r.finish_reason, r.t_done = "length", r.t_submit
            reqs.append(r)
            self._next_id += 1
        if getattr(self.runner, "on_device_sampling", False):
            # The graph samples from the device RNG (one stream for the whole batch): a seed makes the run
            # reproducible, not each request independent of its batch mates as the host sampler's generators do.
            seeds = [p.seed for p in plist if p.temperature > 0 and p.seed is not None]
            if seeds:
                torch.manual_seed(seeds[0])
        return reqs

    def _run(self, reqs: list[_Request]) -> Iterator[list[_Request]]:
        """The continuous-batching loop as a generator: one engine step per iteration, yielding the requests that
        sampled a token in it. Its ``finally`` releases every request's resources whether the loop ends, raises, or
        the consumer stops iterating (``close()`` on an abandoned stream raises GeneratorExit at the yield)."""
        waiting = [r for r in reqs if not r.done]
        running: list[_Request] = []
        self.stats = GenerateStats()
        if self.speculative is not None:
            self.speculative.reset_stats()
            self.stats.speculative = self.speculative.stats
        try:
            stops = any(r.params.stop for r in reqs)
            while waiting or running:
                emitted = self._step(waiting, running)
                if stops and emitted:
                    self._apply_stop_strings(emitted, running)
                yield emitted
        finally:
            if self.pipelined is not None:
                self.pipelined.drop()  # a step still in flight: its tokens are not needed any more
            # Finished requests released theirs already; this frees what a failure left behind.
            self._release_all([r.seq_id for r in reqs])

    def _apply_stop_strings(self, emitted: list[_Request], running: list[_Request]) -> None:
        """End each request whose decoded output now contains one of its ``params.stop`` strings (as the server's
        stop strings do: checked between steps; the text is cut before the match, the tokens are kept)."""
        tok = self.tokenizer
        for r in emitted:
            if not r.params.stop or r.stop_text is not None:
                continue
            text = tok.decode(r.output)
            start = max(0, r.stop_scanned - max(len(x) for x in r.params.stop) + 1)
            hits = [(k, x) for x in r.params.stop if (k := text.find(x, start)) >= 0]
            r.stop_scanned = len(text)
            if not hits:
                continue
            k, which = min(hits)
            r.stop_text, r.stop_reason, r.finish_reason = text[:k], which, "stop"
            if not r.done:
                r.done, r.t_done = True, time.perf_counter()
                if r in running:
                    running.remove(r)
                self._release(r.seq_id)

    # -------------------------------------------------------------------------------------------------- text API
    def _maybe_tokenizer(self):
        """The checkpoint's tokenizer (tokenizer.json + tokenizer_config.json / chat_template.jinja), read once; None
        when it has no tokenizer.json (outputs then carry token ids only)."""
        if self._tokenizer is None:
            self._tokenizer = self.checkpoint.tokenizer() or False
        return self._tokenizer or None

    @property
    def tokenizer(self):
        tok = self._maybe_tokenizer()
        if tok is None:
            raise ValueError(f"{self.checkpoint_dir}: no tokenizer.json; text prompts and chats need one (give token "
                             f"ids instead)")
        return tok

    def _encode(self, prompt) -> list[int]:
        """A str (encoded as is, with the tokenizer's special tokens), a chat (list of {role, content} dicts: the
        chat template with the generation prompt), or token ids (as given)."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        prompt = list(prompt)
        if prompt and all(isinstance(m, dict) for m in prompt):
            tok = self.tokenizer
            return tok.encode(tok.apply_chat_template(prompt), add_special_tokens=False)
        return prompt

    def _request_stats(self, r: _Request) -> RequestStats:
        end = r.t_done if r.t_done is not None else time.perf_counter()
        return RequestStats(
            prompt_tokens=len(r.prompt), generated_tokens=len(r.output),
            time_to_first_token_s=None if r.t_first is None else r.t_first - r.t_submit, total_s=end - r.t_submit,
            queued_s=None if r.t_admit is None else r.t_admit - r.t_submit, preemptions=r.preemptions,
        )

    def _completion(self, index: int, r: _Request) -> CompletionOutput:
        tok = self._maybe_tokenizer()
        text = r.stop_text if r.stop_text is not None else tok.decode(r.output) if tok is not None else None
        logprobs = cumulative = None
        if r.params.logprobs is not None:
            logprobs, cumulative = [], 0.0
            for t, (lp, top) in zip(r.output, r.logprobs):
                entry = {tid: Logprob(v, rank) for rank, (tid, v) in enumerate(top, 1)}
                if t not in entry:
                    entry = {t: Logprob(lp, None), **entry}
                if tok is not None:
                    for tid, v in entry.items():
                        v.decoded_token = tok.decode([tid])
                logprobs.append(entry)
                cumulative += lp
        return CompletionOutput(index, text, list(r.output), r.finish_reason or "length", r.stop_reason, logprobs,
                                cumulative, self._request_stats(r))

    def _complete(self, prompts: list[list[int]], params, texts: list[str | None] | None = None) -> list[RequestOutput]:
        """Run ``prompts`` (token ids) with ``n`` samples each (sample i seeded seed + i) in one batch."""
        params = params if params is not None else SamplingParams()
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(plist)} SamplingParams")
        expanded, eparams = [], []
        for prompt, p in zip(prompts, plist):
            for i in range(p.n):
                expanded.append(prompt)
                eparams.append(p if p.n == 1 else dataclasses.replace(
                    p, n=1, seed=None if p.seed is None else (p.seed + i) % 2**64))
        reqs = self._make_requests(expanded, eparams)
        for _ in self._run(reqs):
            pass
        outs, k = [], 0
        for j, (prompt, p) in enumerate(zip(prompts, plist)):
            group = reqs[k:k + p.n]
            k += p.n
            samples = [self._completion(i, r) for i, r in enumerate(group)]
            stats = [c.stats for c in samples]
            ttft = [s.time_to_first_token_s for s in stats if s.time_to_first_token_s is not None]
            queued = [s.queued_s for s in stats if s.queued_s is not None]
            total = stats[0] if len(stats) == 1 else RequestStats(
                prompt_tokens=stats[0].prompt_tokens, generated_tokens=sum(s.generated_tokens for s in stats),
                time_to_first_token_s=min(ttft) if ttft else None, total_s=max(s.total_s for s in stats),
                queued_s=min(queued) if queued else None, preemptions=sum(s.preemptions for s in stats))
            outs.append(RequestOutput(str(group[0].seq_id), texts[j] if texts else None, list(group[0].prompt),
                                      samples, total))
        return outs

    def complete(self, prompts: str | list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None, *,
                 sampling_params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """One :class:`RequestOutput` per prompt, in order, whatever the prompts are (a list of token-id lists
        too): :meth:`generate` without its compatibility rule. ``prompts``: a str (one prompt), a list of str or of
        token-id lists; ``params`` / ``sampling_params``: one :class:`SamplingParams` or one per prompt."""
        if params is not None and sampling_params is not None:
            raise TypeError("complete(): give params or sampling_params, not both")
        if isinstance(prompts, str):
            prompts = [prompts]
        texts = [p if isinstance(p, str) else None for p in prompts]
        return self._complete([self._encode(p) for p in prompts], params if params is not None else sampling_params,
                              texts)

    def chat(self, messages: list[dict] | list[list[dict]],
             sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
             params=None) -> RequestOutput | list[RequestOutput]:
        """Reply to a conversation rendered with the checkpoint's chat template (with the generation prompt).

        Args:
            messages: one conversation (a list of ``{"role", "content"}`` dicts): one :class:`RequestOutput` is
                returned; or a list of conversations: a list of outputs, batched together (vLLM returns a list in
                both cases).
            sampling_params: one :class:`SamplingParams` or one per conversation; None is ``SamplingParams()``.
            params: deprecated keyword spelling of ``sampling_params``.
        """
        sampling_params = self._sampling_params_arg(sampling_params, params, "chat")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages: expected a non-empty list of {'role', 'content'} dicts (or of conversations)")
        single = isinstance(messages[0], dict)
        convs = [messages] if single else list(messages)
        for i, conv in enumerate(convs):
            if not conv or not all(isinstance(m, dict) for m in conv):
                raise ValueError(f"conversation {i}: expected a non-empty list of {{'role', 'content'}} dicts")
        outs = self._complete([self._encode(c) for c in convs], sampling_params)
        return outs[0] if single else outs

    def stream(self, prompt: str | list[int] | list[dict], sampling_params: SamplingParams | None = None, *,
               params=None) -> Iterator[StreamDelta]:
        """Iterate over one request's output as it is generated: a :class:`StreamDelta` (new text, new token ids)
        per engine step, the last one with its ``finish_reason``.

        Args:
            prompt: text (encoded as is), token ids, or a chat (list of message dicts, rendered with the template).
            sampling_params: its :class:`SamplingParams` (``n`` must be 1; ``stop`` strings are applied at the
                end of the text: a delta never contains one); None is ``SamplingParams()``.
            params: deprecated keyword spelling of ``sampling_params``.

        The text is decoded incrementally (never splitting a multi-byte character). Breaking out of the loop (or
        closing the iterator) frees the request's KV blocks."""
        p = self._sampling_params_arg(sampling_params, params, "stream") or SamplingParams()
        if p.n != 1:
            raise ValueError(f"n = {p.n}: stream() runs one sample; use generate() for n > 1")
        reqs = self._make_requests([self._encode(prompt)], p)
        r = reqs[0]
        tok = self._maybe_tokenizer()
        decoder = IncrementalDecoder(tok) if tok is not None else None
        steps = self._run(reqs)
        sent = 0  # tokens handed out
        text_sent = 0  # characters handed out (stop strings: never past the cut)
        hold = max((len(x) - 1 for x in p.stop), default=0)  # a tail that could begin a stop string waits
        pending = ""
        try:
            for emitted in steps:
                if r not in emitted:
                    continue
                new = r.output[sent:]  # one token per step, or several when speculative drafts were accepted
                sent = len(r.output)
                text = decoder.push(new) if decoder is not None else ""
                if r.done:
                    text += decoder.flush() if decoder is not None else ""
                if p.stop:
                    pending += text
                    if r.stop_text is not None:
                        text, pending = r.stop_text[text_sent:], ""
                    elif r.done:
                        text, pending = pending, ""
                    else:
                        cut = max(0, len(pending) - hold)
                        text, pending = pending[:cut], pending[cut:]
                    text_sent += len(text)
                yield StreamDelta(text, new, r.finish_reason if r.done else None)
                if r.done:
                    break
        finally:
            steps.close()  # release now, not when the generator object is garbage-collected
        if not r.output:  # max_tokens 0: one empty delta carries the finish reason
            yield StreamDelta("", [], r.finish_reason)

    def _admit(self, waiting: list[_Request], running: list[_Request]) -> list[_Request]:
        admitted = []
        while waiting and len(running) + len(admitted) < self.max_num_seqs:
            r = waiting[0]
            need = len(r.tokens)
            if self.blocks.blocks_needed(need) > self.blocks.num_blocks:
                raise CacheFullError(
                    f"request {r.seq_id} needs {self.blocks.blocks_needed(need)} KV blocks but the cache has only "
                    f"{self.blocks.num_blocks}; raise num_blocks or shorten the prompt"
                )
            if not self.blocks.can_allocate(r.seq_id, need):
                break
            if self.state_pool is not None and not self.state_pool.can_allocate(r.seq_id):
                break
            self.blocks.ensure(r.seq_id, need)
            if self.state_pool is not None:
                self.state_pool.allocate(r.seq_id)  # zeroed: a (re)admitted request starts from an empty state
            if r.t_admit is None:
                r.t_admit = time.perf_counter()
            admitted.append(waiting.pop(0))
        return admitted

    def _preempt(self, waiting: list[_Request], running: list[_Request]) -> None:
        victim = running.pop()  # most recently admitted
        self._release(victim.seq_id)
        victim.computed = 0
        victim.preemptions += 1
        waiting.insert(0, victim)
        self.stats.preemptions += 1

    def _ensure_decode_blocks(self, waiting: list[_Request], running: list[_Request]) -> None:
        """Give every decoding request a slot for its next token, preempting the newest requests if blocks run out."""
        tables, block_size = self.blocks.tables, self.blocks.block_size
        for r in list(running):
            table = tables.get(r.seq_id)
            if table is not None and len(table) * block_size >= len(r.tokens):
                continue  # the common case: the slot is already allocated (always so mid-prefill)
            while r in running and not self.blocks.can_allocate(r.seq_id, len(r.tokens)):
                if len(running) == 1:
                    raise CacheFullError(f"request {r.seq_id} alone exceeds the KV cache ({self.blocks.num_blocks} blocks)")
                self._preempt(waiting, running)
            if r in running:
                self.blocks.ensure(r.seq_id, len(r.tokens))

    def _step(self, waiting: list[_Request], running: list[_Request]) -> None:
        if self.speculative is not None:  # draft + verify steps
            return self.speculative.step(waiting, running)
        if self.pipelined is not None:  # greedy decode steps launched one ahead of reading their tokens
            emitted = self.pipelined.step(waiting, running)
            if emitted is not None:
                return emitted
        running.extend(self._admit(waiting, running))
        prefilling = [r for r in running if len(r.tokens) - r.computed > 1]
        if prefilling and not self.runner.mixes_prefill_and_decode:
            candidates = prefilling  # neuron: a step is all prefill or all decode
        else:
            self._ensure_decode_blocks(waiting, running)
            candidates = list(running)
        # Each request feeds its uncomputed tokens; a token budget splits long prompts into chunks (chunked prefill).
        work: list[Work] = []
        batch: list[_Request] = []
        budget = self.max_num_batched_tokens
        for r in candidates:
            n = len(r.tokens) - r.computed
            if budget is not None:
                if n > budget and not self.chunked_prefill:
                    if not work:
                        raise ValueError(f"request {r.seq_id}: {n} prompt tokens exceed the {budget}-token step budget "
                                         f"and chunked prefill is off")
                    break  # whole prompts only: it waits for the next step
                n = min(n, budget)
                if n <= 0:
                    break
                budget -= n
            work.append(Work(r.seq_id, r.tokens[r.computed : r.computed + n], r.computed))
            batch.append(r)
        if not work:
            if waiting and not running:
                raise CacheFullError("no request fits in the KV cache")
            return []
        # Only requests whose prompt is now complete sample a token; a partial chunk's logits are dropped.
        finishing = [r.computed + len(w.token_ids) == len(r.tokens) for r, w in zip(batch, work)]
        t0 = time.perf_counter()
        tokens: list[int | None] = [None] * len(batch)
        rows = [i for i, fin in enumerate(finishing) if fin]
        if getattr(self.runner, "on_device_sampling", False):
            tokens = self.runner.step_sample(work, [r.params for r in batch])
        elif rows and getattr(self.runner, "remote_greedy", False) and all(
                batch[i].params.temperature == 0 and not batch[i].params.uses_logits for i in rows):
            # pipeline stages / attention DP: the argmax runs where the logits are, only the ids reach rank 0
            tokens = self.runner.step_greedy(work)
        else:
            logits = self.runner.step(work)
            if rows and all(batch[i].params.temperature == 0 and not batch[i].params.uses_logits for i in rows):
                tokens = logits.argmax(-1).tolist()  # greedy on the device; one transfer of the ids
            elif rows:
                # penalties / min-p / logprobs (SamplingParams.uses_logits) need each row's history and its logits
                lps: list = []
                picked = sample(logits[rows], [batch[i].params for i in rows], [batch[i].generator for i in rows],
                                histories=[(batch[i].prompt, batch[i].output) for i in rows], logprobs_out=lps)
                for i, tok, lp in zip(rows, picked, lps):
                    tokens[i] = tok
                    if lp is not None:
                        batch[i].logprobs.append(lp)
        dt = time.perf_counter() - t0
        if any(len(w.token_ids) > 1 for w in work):
            self.stats.prefill_tokens += sum(len(w.token_ids) for w in work)
            self.stats.prefill_s += dt
        else:
            self.stats.decode_tokens += len(work)
            self.stats.decode_s += dt
        self.stats.steps += 1
        return self._emit(batch, [len(w.token_ids) for w in work], tokens, finishing, running)

    def _emit(self, batch: list[_Request], fed: list[int], tokens: list[int | None], finishing: list[bool],
              running: list[_Request]) -> list[_Request]:
        """Advance each request by its ``fed`` tokens and append its new token where ``finishing``; finished requests
        leave ``running`` and release their resources. Returns the requests that got a token."""
        now = time.perf_counter()
        emitted = []
        for r, n, tok, fin in zip(batch, fed, tokens, finishing):
            r.computed += n
            if not fin:
                continue
            r.append(tok)
            emitted.append(r)
            if r.t_first is None:
                r.t_first = now
            stop = (tok in self.eos_ids or tok in r.params.stop_token_ids) and not r.params.ignore_eos
            if stop or len(r.output) >= r.params.max_new_tokens:
                r.done = True
                r.finish_reason = "stop" if stop else "length"
                if stop and tok not in self.eos_ids:
                    r.stop_reason = tok
                r.t_done = now
                running.remove(r)
                self._release(r.seq_id)
        return emitted
