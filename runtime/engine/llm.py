"""The Python API of the engine (vLLM's ``LLM``): generate / chat / stream / generate_ids / score.

``LLM`` is the front of three parts, each in its own module:

* runtime/engine/args.py -- :class:`EngineArgs`, the arguments and their validation;
* runtime/engine/model_build.py -- the model: checkpoint, config, build, KV sizing, weight loading, quantization,
  parallel wrapping (:class:`LoadedModel`);
* runtime/engine/scheduler.py -- continuous batching: admission, blocks, the step, preemption, release, and
  per-request failure isolation (:class:`Scheduler`);

plus the speculative decoder (runtime/engine/speculative.py), which steps through the scheduler when
``speculative_tokens`` is set. This module turns prompts (text, token ids, chats) into requests and finished
requests into :class:`RequestOutput` s.

Failures in a batch call (``generate`` / ``chat`` / ``complete`` / ``generate_ids``): a bad argument of any request
(its sampling parameters, an out-of-vocabulary prompt, one longer than max_model_len or than the KV cache can ever
hold) raises before anything runs, as vLLM does. A request that fails while running (its sampling produced
non-finite probabilities) ends alone; the others run to the end with the tokens they get without it, then the call
raises :class:`RequestError` naming the first failed one, its ``outputs`` holding every output of the call (the
failed ones with finish reason ``"error"``). A failure of the step itself (the model call) fails the whole call.
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
import time
import warnings
from pathlib import Path
from typing import Iterator

import torch

from ..checkpoint_dir import CheckpointDir
from ..parallel.launch import abort_ranks_on_error, release_graphs, start_ranks
from .args import EngineArgs
from .model_build import LoadedModel, build_model
from .outputs import CompletionOutput, IncrementalDecoder, Logprob, RequestOutput, RequestStats, StreamDelta
from .sampler import SamplingParams
from .scheduler import Request, RequestError, Scheduler
from .speculative import SpeculativeDecoder


def _part(part: str, name: str, doc: str, writable: bool = False) -> property:
    """An attribute that one of the engine's parts keeps (``loaded``: the model, or the ``scheduler``), read through
    the front; ``writable`` where callers set it (a test pretending an EOS id, a benchmark switching pipelined
    decode off)."""

    def get(self):
        return getattr(getattr(self, part), name)

    def set_(self, value):
        setattr(getattr(self, part), name, value)

    return property(get, set_ if writable else None, doc=doc)


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
    def __init__(self, model: str | Path | CheckpointDir | None = None, target: str = "rocm",
                 dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu", **kwargs):
        """Load the checkpoint and build the engine: every keyword argument is an :class:`EngineArgs` field (the
        class docstring describes them); an unknown one is a TypeError."""
        args = EngineArgs(model=model, target=target, dtype=dtype, device=device, **kwargs).validate()
        self.args = args
        # tensor_parallel_size N > 1: ranks 1..N-1 are spawned now and build the same engine (this class, from the
        # same arguments) on their shards; this process is rank 0 and broadcasts every step (parallel/launch.py).
        self._ranks, device = start_ranks(args.as_dict(), args.tensor_parallel_size, args.expert_parallel_size,
                                          args.device, build=type(self))
        self.loaded: LoadedModel = build_model(args, device, self._ranks)
        self._tokenizer = None  # read at first use by the text API (complete / chat / stream)
        self.scheduler = Scheduler(self.loaded, self._maybe_tokenizer)
        if args.speculative_tokens:
            # K draft tokens per step from the checkpoint's MTP head (runtime/engine/speculative.py)
            self.scheduler.attach_speculative(SpeculativeDecoder(
                self.loaded, self.scheduler, args.speculative_tokens, allow_external_shards=args.allow_external_shards,
                check_finite=self.loaded.draft_check_finite))

    # What callers read of the parts (tests, the server, benchmarks), one line each.
    checkpoint = _part("loaded", "checkpoint", "The checkpoint directory (CheckpointDir).")
    target = _part("loaded", "target", "The target (runtime/targets/): runner, step budget, weight loading.")
    module = _part("loaded", "module", "The generated model package.")
    device = _part("loaded", "device", "This rank's torch device.")
    backend = _part("loaded", "backend", "The op backend (runtime/backends.py).")
    backend_reason = _part("loaded", "backend_reason", "Why that backend was chosen.")
    dtype = _part("loaded", "dtype", "The compute dtype.")
    config = _part("loaded", "config", "The generated config, read from config.json.")
    vocab_size = _part("loaded", "vocab_size", "The vocabulary size.")
    model = _part("loaded", "model", "The built model (this rank's part of it).")
    state_pool = _part("loaded", "state_pool", "Recurrent-state slots (Gated DeltaNet models), or None.")
    quantized_weights = _part("loaded", "quantized_weights", "What keep_quantized_weights decided, or None.")
    load_seconds = _part("loaded", "load_seconds", "Seconds the weight load took.")
    blocks = _part("scheduler", "blocks", "The KV block manager.")
    runner = _part("scheduler", "runner", "The target's runner (wrapped for the parallel layout).")
    max_model_len = _part("scheduler", "max_model_len", "Longest prompt + output, in tokens.")
    max_num_seqs = _part("scheduler", "max_num_seqs", "Requests running at once.")
    max_num_batched_tokens = _part("scheduler", "max_num_batched_tokens", "Tokens per step (None: unlimited).")
    chunked_prefill = _part("scheduler", "chunked_prefill", "Whether long prompts are prefilled in chunks.")
    speculative = _part("scheduler", "speculative", "The SpeculativeDecoder, or None.")
    stats = _part("scheduler", "stats", "GenerateStats of the last call.")
    eos_ids = _part("scheduler", "eos_ids", "Token ids that end a request.", writable=True)
    pipelined = _part("scheduler", "pipelined", "PipelinedDecode, or None.", writable=True)

    @property
    def checkpoint_dir(self) -> Path:
        return self.loaded.checkpoint.path

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
    # ------------------------------------------------------------------------------------------------------ scoring
    def score(self, prompt: list[int]) -> torch.Tensor:
        """Teacher-forced logits ``[len(prompt), V]`` of one prompt (a single prefill through the paged cache)."""
        return self.scheduler.score(prompt)

    # The step-by-step interface of runtime/server/engine_loop.py and bench/tp.py, which run the loop themselves.
    def _make_requests(self, prompts: list[list[int]],
                       params: SamplingParams | list[SamplingParams]) -> list[Request]:
        return self.scheduler.make_requests(prompts, params)

    def _step(self, waiting: list[Request], running: list[Request]) -> list[Request]:
        return self.scheduler.step(waiting, running)

    def _release_all(self, seq_ids: list[int]) -> None:
        self.scheduler.release_all(seq_ids)

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
        and the instance stays usable. A request that fails alone: :class:`RequestError` after the others finished
        (module docstring), its ``outputs`` the token ids of each.
        """
        reqs = self.scheduler.make_requests(prompts, params if params is not None else SamplingParams())
        self._run_all(reqs)
        outputs = [r.output for r in reqs]
        _raise_failed(reqs, outputs)
        return outputs

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
            warnings.warn(f"LLM.{method}(params=...) is deprecated: use sampling_params=... (vLLM's name)",
                          DeprecationWarning, stacklevel=3)
            return params
        return sampling_params

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

    def _request_stats(self, r: Request) -> RequestStats:
        end = r.t_done if r.t_done is not None else time.perf_counter()
        return RequestStats(
            prompt_tokens=len(r.prompt), generated_tokens=len(r.output),
            time_to_first_token_s=None if r.t_first is None else r.t_first - r.t_submit, total_s=end - r.t_submit,
            queued_s=None if r.t_admit is None else r.t_admit - r.t_submit, preemptions=r.preemptions,
        )

    def _completion(self, index: int, r: Request) -> CompletionOutput:
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
        reqs = self.scheduler.make_requests(expanded, eparams)
        self._run_all(reqs)
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
        _raise_failed(reqs, outs)
        return outs

    def _run_all(self, reqs: list[Request]) -> None:
        """Run ``reqs`` to the end (one continuous batch)."""
        for _ in self.scheduler.run(reqs):
            pass

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
        reqs = self.scheduler.make_requests([self._encode(prompt)], p)
        r = reqs[0]
        tok = self._maybe_tokenizer()
        decoder = IncrementalDecoder(tok) if tok is not None else None
        steps = self.scheduler.run(reqs)
        sent = 0  # tokens handed out
        text_sent = 0  # characters handed out (stop strings: never past the cut)
        hold = max((len(x) - 1 for x in p.stop), default=0)  # a tail that could begin a stop string waits
        pending = ""
        try:
            for emitted in steps:
                if r not in emitted:
                    continue
                if r.error is not None:
                    raise r.error  # it failed alone (scheduler.py): its own error
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


def _engine_signature() -> inspect.Signature:
    """``LLM.__init__`` as callers see it (help(), inspect, editors): the :class:`EngineArgs` fields, the first four
    positional as before, the rest keyword-only -- it receives them as ``**kwargs`` to hand them on whole."""
    positional = ("model", "target", "dtype", "device")
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in dataclasses.fields(EngineArgs):
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if f.name in positional else inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(f.name, kind, default=f.default, annotation=f.type))
    return inspect.Signature(params)


LLM.__init__.__signature__ = _engine_signature()


def _raise_failed(reqs: list[Request], outputs: list) -> None:
    """A batch call's end: :class:`RequestError` naming the first request that failed alone (its cause chained),
    carrying every output of the call; nothing when none failed."""
    failed = [r for r in reqs if r.error is not None]
    if failed:
        r = failed[0]
        more = f" ({len(failed) - 1} more failed)" if len(failed) > 1 else ""
        raise RequestError(f"request {r.seq_id} failed alone, the others finished{more}: {r.error}",
                           outputs) from r.error
