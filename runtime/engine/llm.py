"""The generate loop: load a checkpoint through its generated module, then continuous batching over a paged cache.

Scheduling (one step = one model call): waiting requests are admitted while their prompts fit in free KV blocks;
every running request then feeds its uncomputed tokens (a prompt, a prompt chunk, or the last sampled token), within
a per-step token budget (``max_num_batched_tokens``) that splits long prompts into chunks. On the rocm target
prefill chunks and decodes share a step; on neuron a step is all prefill or all decode (separate graphs). When a
decode needs a block and none is free, the most recently admitted request is preempted (its blocks freed, its tokens
recomputed later); a request that cannot fit even alone raises :class:`CacheFullError`.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from .. import backends
from ..kv_cache import allocate_kv_cache
from ..loader.checkpoint import Checkpoint, read_json_if_exists
from .block_manager import BlockManager, CacheFullError
from .registry import find_model
from .runners import NeuronRunner, RocmRunner, Work
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


def eos_token_ids(checkpoint_dir: Path) -> set[int]:
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        cfg = read_json_if_exists(checkpoint_dir / name) or {}
        eos = cfg.get("eos_token_id")
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
        if ids:
            break
    return ids


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

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt) + list(self.output)

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

    def as_dict(self) -> dict:
        return {
            **self.__dict__,
            "decode_tokens_per_s": self.decode_tokens / self.decode_s if self.decode_s else None,
            "prefill_tokens_per_s": self.prefill_tokens / self.prefill_s if self.prefill_s else None,
        }


class LLM:
    def __init__(
        self,
        checkpoint: str | Path,
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
    ):
        self.checkpoint_dir = Path(checkpoint)
        hf_config = read_json_if_exists(self.checkpoint_dir / "config.json")
        if hf_config is None:
            raise FileNotFoundError(f"{self.checkpoint_dir}: no config.json")
        self.target = target
        self.module = find_model(hf_config.get("architectures"), target)
        self.device = torch.device(device)
        self.backend, self.backend_reason = backends.select(target, self.device)
        if dtype is None:
            dtype = hf_config.get("torch_dtype") or hf_config.get("dtype") or "float32"
        self.dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
        self.config = self.module.CONFIG_CLASS.from_hf_config(hf_config)
        with default_dtype(self.dtype), self.device:
            self.model = self.module.MODEL_CLASS(self.config)
        self.model.eval()
        with Checkpoint(self.checkpoint_dir) as ckpt:
            t0 = time.perf_counter()
            if target == "neuron":
                self.model.load_weights(ckpt, device=self.device)
            else:
                self.model.load_weights(ckpt)
            self.load_seconds = time.perf_counter() - t0

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
        kv_spec = self.model.get_kv_spec()
        if num_blocks is None:
            num_blocks = max_num_seqs * -(-self.max_model_len // block_size)
        self.blocks = BlockManager(num_blocks, block_size)
        self.model.bind_kv_cache(allocate_kv_cache(kv_spec, num_blocks, block_size, self.device))
        # Token budget per step: prompts longer than it are prefilled in chunks. The rocm runner continues a chunk
        # over the paged cache natively (unlimited by default); on neuron the budget is the largest prefill bucket
        # and a smaller one turns on segmented prefill (one more graph per prefill x context bucket).
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = True
        if target == "neuron":
            largest = max(prefill_buckets) if prefill_buckets else self.max_model_len
            if max_num_batched_tokens is not None and max_num_batched_tokens > largest:
                raise ValueError(f"max_num_batched_tokens {max_num_batched_tokens} exceeds the largest prefill bucket {largest}")
            self.max_num_batched_tokens = max_num_batched_tokens or largest
            self.chunked_prefill = self.max_num_batched_tokens < self.max_model_len
            self.runner = NeuronRunner(
                self.model, self.blocks, self.device, max_model_len=self.max_model_len, max_num_seqs=max_num_seqs,
                prefill_buckets=prefill_buckets, decode_buckets=decode_buckets,
                decode_context_buckets=decode_context_buckets, compile=compile,
                on_device_sampling=on_device_sampling, segmented_prefill=self.chunked_prefill,
            )
        else:
            self.runner = RocmRunner(
                self.model, self.blocks, self.device, max_model_len=self.max_model_len, max_num_seqs=max_num_seqs,
                cuda_graphs=cuda_graphs, decode_buckets=decode_buckets,
            )
        self.eos_ids = eos_token_ids(self.checkpoint_dir)
        self._next_id = 0
        self.stats = GenerateStats()

    def warmup(self) -> None:
        """Compile/capture everything the runner would otherwise build on first use (GPU decode graphs)."""
        warm = getattr(self.runner, "warmup", None)
        if warm is not None:
            warm()

    # ------------------------------------------------------------------------------------------------------ scoring
    def score(self, prompt: list[int]) -> torch.Tensor:
        """Teacher-forced logits ``[len(prompt), V]`` of one prompt (a single prefill through the paged cache)."""
        seq_id = self._next_id
        self._next_id += 1
        self.blocks.ensure(seq_id, len(prompt))
        try:
            return self.runner.step([Work(seq_id, list(prompt), 0)], all_positions=True)
        finally:
            self.blocks.release(seq_id)

    # ------------------------------------------------------------------------------------------------------ generate
    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Generated token ids (prompt excluded) for each prompt, in order."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        reqs = []
        for prompt, p in zip(prompts, plist):
            if not prompt:
                raise ValueError("empty prompt")
            if len(prompt) + p.max_new_tokens > self.max_model_len:
                raise ValueError(
                    f"prompt ({len(prompt)} tokens) + max_new_tokens ({p.max_new_tokens}) exceeds max_model_len "
                    f"{self.max_model_len}"
                )
            gen = None
            if p.temperature > 0:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(p.seed if p.seed is not None else torch.seed())
            reqs.append(_Request(self._next_id, list(prompt), p, gen, done=p.max_new_tokens == 0))
            self._next_id += 1
        if getattr(self.runner, "on_device_sampling", False):
            # The graph samples from the device RNG (one stream for the whole batch): a seed makes the run
            # reproducible, not each request independent of its batch mates as the host sampler's generators do.
            seeds = [p.seed for p in plist if p.temperature > 0 and p.seed is not None]
            if seeds:
                torch.manual_seed(seeds[0])
        waiting = [r for r in reqs if not r.done]
        running: list[_Request] = []
        self.stats = GenerateStats()
        while waiting or running:
            self._step(waiting, running)
        return [r.output for r in reqs]

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
            self.blocks.ensure(r.seq_id, need)
            admitted.append(waiting.pop(0))
        return admitted

    def _preempt(self, waiting: list[_Request], running: list[_Request]) -> None:
        victim = running.pop()  # most recently admitted
        self.blocks.release(victim.seq_id)
        victim.computed = 0
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
            return
        # Only requests whose prompt is now complete sample a token; a partial chunk's logits are dropped.
        finishing = [r.computed + len(w.token_ids) == len(r.tokens) for r, w in zip(batch, work)]
        t0 = time.perf_counter()
        tokens: list[int | None] = [None] * len(batch)
        if getattr(self.runner, "on_device_sampling", False):
            tokens = self.runner.step_sample(work, [r.params for r in batch])
        else:
            logits = self.runner.step(work)
            rows = [i for i, fin in enumerate(finishing) if fin]
            if rows and all(batch[i].params.temperature == 0 for i in rows):
                tokens = logits.argmax(-1).tolist()  # greedy on the device; one transfer of the ids
            elif rows:
                picked = sample(logits[rows], [batch[i].params for i in rows], [batch[i].generator for i in rows])
                for i, tok in zip(rows, picked):
                    tokens[i] = tok
        dt = time.perf_counter() - t0
        if any(len(w.token_ids) > 1 for w in work):
            self.stats.prefill_tokens += sum(len(w.token_ids) for w in work)
            self.stats.prefill_s += dt
        else:
            self.stats.decode_tokens += len(work)
            self.stats.decode_s += dt
        self.stats.steps += 1
        for r, w, tok, fin in zip(batch, work, tokens, finishing):
            r.computed += len(w.token_ids)
            if not fin:
                continue
            r.append(tok)
            stop = (tok in self.eos_ids or tok in r.params.stop_token_ids) and not r.params.ignore_eos
            if stop or len(r.output) >= r.params.max_new_tokens:
                r.done = True
                running.remove(r)
                self.blocks.release(r.seq_id)
