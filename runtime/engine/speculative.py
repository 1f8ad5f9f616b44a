"""Speculative decoding with the checkpoint's own multi-token-prediction (MTP) head (``LLM(speculative_tokens=K)``).

Each engine step of a decoding request is a *verify* step: the target model runs the request's last token plus its K
draft tokens in one forward over the paged cache (positions ``c .. c+K``), and the request keeps the longest run of
drafts the target agrees with plus one token of the target's own (the correction or the bonus token). Then the MTP
head, chained on its own hidden state, proposes the next K drafts. This is vLLM's MTP/EAGLE loop, on the engine's
scheduler and the targets' runners, unchanged:

* **Target hidden states.** MTP reads the target's final hidden state ``h[i]``: the target step is
  ``runner.step(work, return_hidden=True)``, whose second output is the model's output (the final-normed hidden
  states) of every fed token. Not a forward hook: a CUDA-graph replay runs no Python hook (the hook would keep the
  capture's tensors), and a runner is free to call ``forward`` directly. A decode step without drafts replays its
  graph (the graph keeps the hidden states in a static output beside the logits). The logit rows the step needs
  (each request's last token and drafts) are computed here, from the hidden states, in one LM-head call.
* **The draft's cache.** The MTP layer's attention has its own paged cache with the target's block tables (same
  block ids, its own tensors). After every target step the draft runs over the same positions ``[c0, c)`` of the
  tokens the target accepted (ids shifted by one: the token at ``i+1`` with ``h[i]``), which rewrites whatever a
  chained draft wrote there, then chains ``K-1`` single-token steps.
* **Rollback.** K/V written for rejected drafts needs no undo: attention reads a sequence only up to its context
  length and the next step overwrites those slots. A recurrent layer (Gated DeltaNet) has advanced its state over
  every fed token. A graphed verify step also leaves each sequence's state after each of its tokens in
  ``StatePool.checkpoints`` (``[slot, token]``; K + 1 times the pool's memory), and a request that rejected a draft
  is rewound to the checkpoint after the last token it keeps (``StatePool.rewind``: two copies a layer). An eager
  verify step (a prompt chunk in the batch, tensor-parallel ranks) snapshots the states of verifying requests
  before the step (``StatePool.snapshot``) and, for a request that rejected a draft, restores them and re-advances
  at once over the tokens it keeps (one more target forward of those requests, ``n + accepted`` tokens each). Marking the request computed up to the step's start instead, to re-feed the kept tokens with the next
  drafts, never moves past a run of rejections: each rejected step re-fed one token more than the last.
* **Exactness.** Greedy: a draft is accepted iff it equals the target's argmax at its position, so the output is
  plain greedy decoding's token for token (up to the floating-point differences of computing K+1 positions in one
  call rather than one at a time: exact in float32, as the tests check; in bf16 on a GPU the linear layers pick
  their kernel per row count -- runtime/ops/gpu/linear.py's split-K GEMV at one row, tensor-core tiles above --
  and the MoE has batch-1 kernels, so a verify row and a one-token decode step round differently and a near-tie
  of the top two logits may flip, after which the two outputs are different greedy continuations. Bitwise
  equality would need batch-invariant kernels; bench/mtp.py records where bf16 outputs part and the margin there). Sampling: the rejection rule of Leviathan et al. 2023 / Chen et al. 2023 —
  accept draft ``x ~ q`` with probability ``min(1, p(x)/q(x))``, else sample ``norm(max(p - q, 0))``; all accepted:
  sample the bonus token from ``p`` — with ``p`` and ``q`` the temperature / top-k / top-p distributions the
  non-speculative sampler uses, so each token's distribution is unchanged.
* **CUDA graphs** (GPU path, when the runner replays its decode steps): the verify step is captured per batch
  bucket with K+1 token slots per sequence (``StepGraphs``, runtime/targets/rocm/cuda_graphs.py; fewer drafts pad
  the slots), and so are the draft's settling step (K+1 slots) and its chained step (1), the target's hidden
  states being a static input of the draft's graphs. MLA models lay the K+1 tokens out as decode rows (context =
  position + 1, the latents written before the kernel reads them), GQA models as a fixed-shape varlen prefill.
  Targets with Gated DeltaNet layers (Qwen3-Next, Qwen3.5) graph their verify step too: varlen attention, and the
  recurrent layers run their one-token decode op once per token slot with each sequence's state slot, fresh flag
  and real token count in the bucket (``StateMetadata.tokens_per_seq``: no host reads); the snapshot before a
  verify step and the restore after a rejection stay eager tensor copies around the replay, the re-advance over
  the kept tokens (at most K + 1 a sequence) replays the verify graph.
  Steps with a longer run (a prompt chunk) stay eager.
* **Drafts on the device** (greedy requests, graphs built ``resident``): the graphs also compute the LM head's
  argmax; the draft steps leave draft j of the request in row r at ``_draft_buf[j, r]`` and the next chained step and
  the next verify step feed it by reference (token id ``-1 - r``, ``runtime/ops/tokens.py``), so a step reads the
  device once -- the target's argmax and the drafts it verified, together -- instead of once per draft step and once
  more for the verify. A step that must run on the host path (a sampling request, a prompt chunk, no bucket) first
  reads the waiting drafts in one transfer. A Gated DeltaNet re-advance replays the verify graph too.
* **Tensor parallelism.** Under torchrun every rank runs this loop itself. With engine-started ranks
  (``LLM(tensor_parallel_size=N)``) rank 0 announces each model call (target, re-advance, draft, chained draft)
  with launch.py's SPEC message and the followers mirror it (:meth:`SpeculativeDecoder.follow`) on their own
  replicated hidden states; those steps run eagerly (the runner's decode graphs still replay draft-free steps).
* **Budgets.** A request drafts at most ``max_new_tokens - generated - 1`` tokens (the verify step's extra token
  is never beyond what it may emit), never past ``max_model_len``, and only when the KV blocks for them can be had
  without preempting anyone (else it drafts fewer, down to a plain decode step).

Neuron: the same loop, K static; target steps run the eager inner model (``return_hidden``), draft steps the eager
forward of the runner's buckets, with segmented prefill on (a verify window continues a cached sequence).
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, replace

import torch
from torch.profiler import record_function

from modelgen import settings

from ..kv_cache import allocate_kv_cache
from ..layers.mtp import MissingDraftWeights
from ..parallel import launch
from ..parallel.launch import SPEC
from ..targets.rocm.cuda_graphs import StepGraphs, multi_token_layout
from .args import check_speculative_tokens
from ..block_manager import CacheFullError
from .model_build import LoadedModel, default_dtype
from ..work import Work
from .sampler import SamplingParams, filter_logits
from .scheduler import Scheduler, sampling_error

# A phase recorder for resident greedy steps (bench/spec_oracle.py --timeline sets one: ``mark(name)`` records a CUDA
# event and a host stamp at each phase boundary). None: nothing is recorded (the default, zero cost beyond the test).
TIMELINE = None


@dataclass
class SpeculativeStats:
    """Draft figures of one generate call (``LLM.stats.as_dict()["speculative"]``)."""

    num_speculative_tokens: int
    proposed_tokens: int = 0  # drafts verified
    accepted_tokens: int = 0  # drafts the target agreed with
    verify_steps: int = 0  # (request, step) pairs that verified at least one draft
    rollbacks: int = 0  # recurrent-state restores (a request with GDN layers rejected a draft)
    draft_s: float = 0.0  # time in the MTP head

    def as_dict(self) -> dict:
        return {
            **self.__dict__,
            # fraction of proposed drafts accepted
            "acceptance_rate": self.accepted_tokens / self.proposed_tokens if self.proposed_tokens else None,
            # drafts accepted per verify step (0..K)
            "mean_accepted_tokens": self.accepted_tokens / self.verify_steps if self.verify_steps else None,
            # tokens a verify step emits: the accepted drafts + the target's own (ATOM's "tokens per forward")
            "mean_tokens_per_verify_step": 1 + self.accepted_tokens / self.verify_steps if self.verify_steps else None,
        }


def load_draft_module(package_name: str):
    """The generated ``mtp`` module of a model package; ValueError when the spec declares no MTP head."""
    try:
        return importlib.import_module(f"{package_name}.mtp")
    except ModuleNotFoundError as e:
        if e.name != f"{package_name}.mtp":
            raise
        raise ValueError(f"{package_name}: this architecture has no multi-token-prediction head in its spec (no `mtp:` "
                         f"section), so it cannot draft for speculative decoding") from None


def _probs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The distribution ``sample`` draws from: temperature, then top-k / top-p (float32)."""
    return filter_logits(logits.float() / p.temperature, p.top_k, p.top_p).softmax(-1)


def _uniform(generator: torch.Generator | None, device: torch.device) -> float:
    return float(torch.rand((), generator=generator, device=device))


def verify(drafts: list[int], target_logits: torch.Tensor, params: SamplingParams, generator,
           draft_probs: list[torch.Tensor] | None, argmax: list[int] | None = None) -> tuple[list[int], int]:
    """Tokens to emit and the number of accepted drafts for one request.

    ``target_logits [len(drafts) + 1, V]``: row j is the target's prediction after the request's last token and the
    first j drafts. Greedy: accept while the draft is the argmax, then the argmax (correction or bonus); ``argmax``:
    those rows' argmax already on the host (one transfer for the whole step). Sampling: the rejection rule (module
    docstring) with ``draft_probs[j]`` the distribution draft j was drawn from.
    """
    if params.temperature == 0:
        target = argmax if argmax is not None else target_logits.argmax(-1).tolist()
        a = 0
        while a < len(drafts) and drafts[a] == target[a]:
            a += 1
        return drafts[:a] + [target[a]], a
    device = target_logits.device
    for j, x in enumerate(drafts):
        p = _probs(target_logits[j], params)
        q = draft_probs[j]
        px, qx = float(p[x]), float(q[x])
        if qx > 0 and _uniform(generator, device) * qx <= px:  # accept with probability min(1, p(x)/q(x))
            continue
        residual = (p - q).clamp_min(0)
        total = float(residual.sum())
        # p == q (to rounding) can reject only with vanishing probability; sampling p is then the same distribution.
        dist = residual / total if total > 0 else p
        return drafts[:j] + [int(torch.multinomial(dist, 1, generator=generator))], j
    p = _probs(target_logits[len(drafts)], params)
    return drafts + [int(torch.multinomial(p, 1, generator=generator))], len(drafts)


class _Drafted:
    """A request's drafts: host tokens (``tokens``; sampling requests also ``probs``, the q each draft was drawn
    from), or -- device-resident drafting -- ``count`` tokens in column ``row`` of the draft buffer ``buf``
    (``[K, stride]``), unread: the next verify step feeds them by reference (:meth:`ids`); ``tokens`` reads them."""

    def __init__(self, buf: torch.Tensor | None = None, row: int = -1, count: int = 0):
        self._tokens: list[int] | None = [] if buf is None else None
        self.probs: list[torch.Tensor] = []
        self.buf, self.row, self.count = buf, row, count

    @property
    def resident(self) -> bool:
        return self._tokens is None

    @property
    def tokens(self) -> list[int]:
        if self._tokens is None:  # a device-to-host read (tests, fallbacks); the graphed greedy step never asks
            self._tokens = self.buf[: self.count, self.row].tolist()
        return self._tokens

    @tokens.setter
    def tokens(self, value: list[int]) -> None:
        self._tokens = list(value)

    def ids(self) -> list[int]:
        """The drafts as input ids: host tokens, or ``-1 - r`` naming element ``r`` of the flat draft buffer
        (``runtime/ops/tokens.py``; the verify graph's ``chain``)."""
        if self._tokens is not None:
            return self._tokens
        return [-1 - (j * self.buf.shape[1] + self.row) for j in range(self.count)]


def _index(values: list[int], device: torch.device) -> torch.Tensor:
    """``values`` as an int64 index on ``device`` without waiting for the device: a pinned host tensor copied
    asynchronously (a plain ``torch.tensor(values, device=cuda)`` would synchronise the stream)."""
    t = torch.tensor(values, dtype=torch.int64, pin_memory=torch.device(device).type == "cuda")
    return t.to(device, non_blocking=True)


class SpeculativeDecoder:
    """The MTP draft model of an engine and the engine step that drafts and verifies (see module docstring)."""

    def __init__(self, loaded: LoadedModel, scheduler: Scheduler, num_speculative_tokens: int, *,
                 allow_external_shards: bool = False, check_finite: str = "sampled"):
        """``loaded``: the target model (its runner's RunnerOptions and StepBudget are the draft runner's too, without
        CUDA graphs); ``scheduler``: the engine's scheduler, whose public methods :meth:`step` runs on."""
        self.loaded, self.scheduler = loaded, scheduler
        self.k = check_speculative_tokens(num_speculative_tokens)
        options, budget = loaded.options, loaded.budget
        if getattr(loaded.runner, "on_device_sampling", False):
            raise ValueError("speculative_tokens: not supported with on_device_sampling (drafts are verified on the "
                             "host)")
        # Engine-started tensor-parallel ranks: every model call below is announced to the followers first (a SPEC
        # message of runtime/parallel/launch.py, whose followers call follow()), so their collectives pair up.
        self._ranks = loaded.ranks
        mtp = load_draft_module(loaded.module.__name__)
        layers = int(mtp.num_mtp_layers(loaded.config))
        if layers < 1:
            raise MissingDraftWeights(
                f"{loaded.checkpoint.config_path}: the config declares no MTP layers ({mtp.__name__}.num_mtp_layers = "
                f"{layers}): this checkpoint has no draft head for speculative decoding"
            )
        with default_dtype(loaded.dtype), loaded.device:
            self.draft = mtp.DRAFT_CLASS(loaded.config, loaded.model)
        self.draft.eval()
        with loaded.checkpoint.open_weights(loaded.dtype, allow_external_shards=allow_external_shards,
                                            check_finite=check_finite) as ckpt:
            loaded.target.load(self.draft, ckpt)
        blocks = loaded.blocks
        caches = allocate_kv_cache(self.draft.get_kv_spec(), blocks.num_blocks, blocks.block_size, loaded.device)
        self.draft.bind_kv_cache(caches)
        # The draft runs through the target's own runner class over the same block tables, without the runner's
        # decode graphs (they would not see the bound hidden states): its graphs are StepGraphs with a static hidden
        # input (enable_graphs).
        self.runner = loaded.target.make_runner(self.draft, blocks, loaded.device,
                                                replace(options, cuda_graphs=False, compile=False), budget,
                                                state_pool=None)
        for runner in (loaded.runner, self.runner):
            if hasattr(runner, "segmented_prefill"):
                runner.segmented_prefill = True  # neuron: a verify window continues a cached sequence
        self.drafted: dict[int, _Drafted] = {}
        self.stats = SpeculativeStats(self.k)
        # ``propose_override(requests, j) -> list[int] | None``: replaces draft j of each request (greedy drafting
        # only) before the next draft step reads it -- bench/spec_oracle.py's oracle drafts at a fixed acceptance.
        self.propose_override = None
        self.resident = False  # greedy steps keep drafts on the device (enable_graphs)
        self._draft_buf: torch.Tensor | None = None  # [K, max_num_seqs]: draft j of the request drafting in row r
        # CUDA graphs of the verify step and the draft steps (module docstring), when the target runner replays its
        # decode steps from graphs; MODELGEN_SPEC_GRAPHS=0 keeps speculative steps eager (bench/mtp.py compares).
        self.verify_graphs = self.draft_graphs = self.chain_graphs = None
        # Not with engine-started ranks: the followers mirror the eager calls (their runners' own decode graphs, which
        # capture the collectives alike on every rank, still replay draft-free steps).
        self._follower: dict | None = None  # follower ranks: what follow() keeps between calls
        if getattr(loaded.runner, "graphs", None) is not None and settings.get("MODELGEN_SPEC_GRAPHS") \
                and self._ranks is None and not _engine_started_follower():
            self.enable_graphs(options.decode_buckets)

    def enable_graphs(self, buckets: list[int] | None = None, capture=None, resident: bool = True,
                      checkpoints: bool = True) -> None:
        """Build the speculative steps' graphs (``StepGraphs``, runtime/targets/rocm/cuda_graphs.py): the target's
        verify step (K + 1 tokens per sequence; Gated DeltaNet targets with their state slots, the state snapshot /
        restore around the step being plain tensor copies between steps); the draft's settling step (K + 1) and
        chained step (1), with the target's hidden states as a static input. ``capture``: the graphs' capture seam
        (None: CUDA graphs); lazily captured per batch bucket on first use. ``resident``: the graphs also compute the
        LM head's argmax and the verify / chained-draft steps read their draft tokens from the draft buffer, so a
        greedy step reads the device once (module docstring, "Drafts on the device"); ``False`` only for
        bench/spec_oracle.py's A/B against the step that reads its drafts back (which lost: bench/NOTES-mtp.md).
        ``checkpoints`` (recurrent targets): the verify graph leaves each token's state in
        ``StatePool.checkpoints`` and a rejection rewinds to one (no snapshot, restore or re-advance); ``False``
        only for bench/spec_oracle.py's A/B against the snapshot path."""
        loaded = self.loaded
        q = self.k + 1
        self.resident = bool(resident)
        self._draft_buf = (torch.zeros(self.k, loaded.max_num_seqs, dtype=torch.int64, device=loaded.device)
                           if self.resident else None)
        flat = self._draft_buf.view(-1) if self.resident else None
        common = dict(max_num_seqs=loaded.max_num_seqs, block_size=loaded.blocks.block_size, buckets=buckets,
                      capture=capture, width=loaded.blocks.blocks_needed(loaded.max_model_len + q))
        pool = None
        if capture is None:
            pool = torch.cuda.graph_pool_handle()  # one pool: run() gathers its output before another replay
        layout = multi_token_layout(loaded.model, q)
        head = self.resident
        ck = None
        if checkpoints and loaded.state_pool is not None and layout is not None:
            loaded.state_pool.enable_checkpoints(q)
            ck = loaded.state_pool.checkpoints
        self.verify_graphs = (StepGraphs(loaded.model, loaded.device, tokens_per_seq=q, layout=layout, pool=pool,
                                         head=head, chain=flat, checkpoints=ck, **common) if layout is not None
                              else None)
        hidden = (int(loaded.config.hidden_size), loaded.dtype)
        layout = multi_token_layout(self.draft, q)
        self.draft_graphs = (StepGraphs(self.draft, loaded.device, tokens_per_seq=q, layout=layout, hidden=hidden,
                                        pool=pool, head=head, **common) if layout is not None else None)
        self.chain_graphs = (StepGraphs(self.draft, loaded.device, tokens_per_seq=1, layout="rows", hidden=hidden,
                                        pool=pool, head=head, chain=flat, **common) if self.k > 1 else None)

    def warmup(self) -> None:
        """Capture every bucket of the verify / draft / chained-draft graphs now (``LLM.warmup``; none exist with
        engine-started tensor parallelism, whose followers mirror eager calls). Outside inference mode, as a capture
        on first use is: the buckets' static buffers are written in place by every later step."""
        for graphs in (self.verify_graphs, self.draft_graphs, self.chain_graphs):
            if graphs is not None:
                graphs.capture_all()

    def release_graphs(self) -> None:
        """Drop the verify / draft / chained-draft graphs (before a NCCL group goes: launch.release_graphs says why);
        later speculative steps run eagerly (drafts still on the device are read when next needed)."""
        self.verify_graphs = self.draft_graphs = self.chain_graphs = None
        self.resident = False

    def graph_replays(self) -> dict:
        """Replays of each speculative graph set so far (None: that step runs eagerly)."""
        return {name: (g.replays if g is not None else None) for name, g in
                (("verify", self.verify_graphs), ("draft", self.draft_graphs), ("draft_chain", self.chain_graphs))}

    def reset_stats(self) -> None:
        self.stats = SpeculativeStats(self.k)

    def release(self, seq_id: int) -> None:
        """Forget a request's drafts (it finished, failed or was preempted)."""
        self.drafted.pop(seq_id, None)

    # ------------------------------------------------------------------------------------------------------- step
    def _send(self, kind: int, work: list[Work]) -> None:
        """Engine-started ranks: announce a model call to the followers (they run :meth:`follow`)."""
        if self._ranks is not None:
            self._ranks.send_step(SPEC, work, self.loaded.blocks, self.loaded.state_pool, flag=kind)

    def _logit_rows(self, work: list[Work], hidden: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """The target's logits of the rows a step verifies or samples, in one LM-head call, and where each work
        item's rows start in them. Rows are chosen from the work alone -- every token of an item of at most K + 1
        tokens (a verify window: the last token and the drafts), the last token of a longer one (a prompt chunk,
        which carries no drafts) -- so follower ranks pick the same rows and the LM head's all-gather pairs up."""
        rows, first, at = [], [], 0
        for w in work:
            n = len(w.token_ids)
            keep = range(at, at + n) if n <= self.k + 1 else range(at + n - 1, at + n)
            first.append(len(rows) - keep[0])  # logits row of token j of the item: first[i] + at_i + j
            rows.extend(keep)
            at += n
        logits = self.draft.compute_logits(hidden[torch.tensor(rows, device=hidden.device)])
        return logits, first

    def _target_step(self, work: list[Work]) -> torch.Tensor:
        """Final hidden states ``[num_tokens, hidden]`` of every fed token, in work order, from the runner itself
        (``return_hidden``; the module docstring says why not a hook). The hidden states must cover every token:
        a runner returning fewer rows is a bug named here, not a silent misalignment of drafts and positions."""
        graphs = self.verify_graphs
        if graphs is not None and any(len(w.token_ids) > 1 for w in work) and graphs.accepts(work):
            tables, pool = self.loaded.blocks.tables, self.loaded.state_pool
            slots = [pool.slot(w.seq_id) for w in work] if graphs.with_state else None
            hidden = graphs.run(work, [tables[w.seq_id] for w in work], state_slots=slots)
        else:  # one token per sequence: the runner's own decode graphs; longer steps (prompts): eager
            self._send(_TARGET, work)
            runner = self.loaded.runner
            if self._ranks is not None:
                runner = runner.inner  # the DriverRunner would broadcast a plain STEP; SPEC went out above
            _, hidden = runner.step(work, return_hidden=True)
        total = sum(len(w.token_ids) for w in work)
        if hidden.shape[0] != total:
            raise RuntimeError(f"{type(self.loaded.runner).__name__}.step(return_hidden=True) returned "
                               f"{hidden.shape[0]} hidden rows for {total} fed tokens")
        return hidden

    def step(self, waiting: list, running: list) -> list:
        loaded = self.loaded
        t0 = time.perf_counter()
        running.extend(self.scheduler.admit(waiting, running))
        for r in list(running):
            if r.computed == 0:
                self.release(r.seq_id)  # admitted or readmitted after preemption: drafts were for an old state
        self.scheduler.ensure_decode_blocks(waiting, running)
        for seq_id in [s for s in self.drafted if all(r.seq_id != s for r in running)]:
            self.release(seq_id)  # preempted in _ensure_decode_blocks
        if waiting and not running:
            raise CacheFullError("no request fits in the KV cache")
        work: list[Work] = []
        batch, real, drafts = [], [], []
        budget = self.scheduler.max_num_batched_tokens
        tables, block_size = loaded.blocks.tables, loaded.blocks.block_size
        for r in running:
            # Uncomputed tokens: the last sampled one, or (after a recurrent rollback) the accepted run again, or a
            # prompt (chunk). Drafts follow them when all of them fit this step.
            n = len(r.tokens) - r.computed
            d = self.drafted[r.seq_id].ids() if r.seq_id in self.drafted else []
            room = len(tables.get(r.seq_id, [])) * block_size - len(r.tokens)
            d = d[: max(0, room)]
            if budget is not None:
                if budget <= 0:
                    break
                if n > budget:
                    n, d = budget, []
                d = d[: max(0, budget - n)]
                budget -= n + len(d)
            work.append(Work(r.seq_id, r.tokens[r.computed : r.computed + n] + d, r.computed))
            batch.append(r)
            real.append(n)
            drafts.append(d)
        if not work:
            return []
        prefill = any(r.computed < len(r.prompt) for r in batch)  # a prompt (chunk) in this step
        # Device-resident greedy step: the verify graph reads the drafts from the draft buffer and computes the
        # argmax of every slot; one device-to-host read brings back the argmax and the drafts it fed.
        resident = (self.resident and not prefill and all(r.params.temperature == 0 for r in batch)
                    and any(len(w.token_ids) > 1 for w in work) and self.verify_graphs.accepts(work))
        if not resident and any(x < 0 for d in drafts for x in d):  # drafts on the device, an eager / sampled step
            self._read_drafts()
            for i, r in enumerate(batch):
                if drafts[i]:
                    drafts[i] = self.drafted[r.seq_id].tokens[: len(drafts[i])]
                    work[i] = Work(r.seq_id, work[i].token_ids[: real[i]] + drafts[i], work[i].start_pos)
        pool = loaded.state_pool
        verifying = [i for i, d in enumerate(drafts) if d]
        snapshot = None
        # A verify through the graphs with state checkpoints leaves every token's state behind (rewind); otherwise
        # the states of verifying requests are copied first (restore + re-advance).
        rewind = (pool is not None and self.verify_graphs is not None and self.verify_graphs.checkpoints is not None
                  and (resident or (any(len(w.token_ids) > 1 for w in work) and self.verify_graphs.accepts(work))))
        if pool is not None and verifying:
            slots = [pool.slot(batch[i].seq_id) for i in verifying]
            snapshot = None if rewind else pool.snapshot(slots)
        offsets = [0]
        for w in work:
            offsets.append(offsets[-1] + len(w.token_ids))
        if resident:
            with record_function("spec::target_forward_argmax"):
                tables = loaded.blocks.tables
                state = [pool.slot(w.seq_id) for w in work] if self.verify_graphs.with_state else None
                if TIMELINE is not None:
                    TIMELINE.mark("verify_start")
                hidden, top, fed = self.verify_graphs.run(work, [tables[w.seq_id] for w in work], state_slots=state,
                                                          head=True)
                if TIMELINE is not None:
                    TIMELINE.mark("verify_end")
                argmax, fed = torch.stack([top, fed]).tolist()  # the step's one device-to-host read
                if TIMELINE is not None:
                    TIMELINE.mark("read_done")
            logits = None
            row_at = {i: offsets[i] + n - 1 for i, n in enumerate(real)}
            drafts = [fed[offsets[i] + real[i]: offsets[i] + real[i] + len(d)] for i, d in enumerate(drafts)]
        else:
            with record_function("spec::target_forward"):
                hidden = self._target_step(work)
            # The target's logits at each sampling request's last token and drafts: one gather, one LM-head call.
            with record_function("spec::target_logits_argmax"):  # the device-to-host read waits for the forward
                logits, first = self._logit_rows(work, hidden)
                row_at = {i: first[i] + offsets[i] + n - 1 for i, (r, n) in enumerate(zip(batch, real))
                          if r.computed + n == len(r.tokens)}
                # Greedy rows' argmax in one device-to-host transfer (not one sync per request).
                argmax = (logits.argmax(-1).tolist() if row_at and any(r.params.temperature == 0 for r in batch)
                          else None)
        now = time.perf_counter()
        emitted, starts, accepted_counts = [], [], []
        n_emitted = 0
        for i, (r, n, d) in enumerate(zip(batch, real, drafts)):
            start = r.computed
            starts.append(start)
            finishing = start + n == len(r.tokens)
            if not finishing:  # a prompt chunk: nothing sampled
                r.computed += n
                accepted_counts.append(None)
                continue
            lo, hi = row_at[i], row_at[i] + len(d) + 1
            got = self.drafted.get(r.seq_id)
            try:
                tokens, a = verify(d, logits[lo:hi] if logits is not None else None, r.params, r.generator,
                                   got.probs[: len(d)] if got and d else None,
                                   argmax[lo:hi] if argmax is not None else None)
            except RuntimeError as e:  # non-finite probabilities: this request fails alone (scheduler.py)
                self.scheduler.fail(r, sampling_error(r, e), waiting, running)
                accepted_counts.append(None)
                continue
            if d:
                self.stats.proposed_tokens += len(d)
                self.stats.accepted_tokens += a
                self.stats.verify_steps += 1
            accepted_counts.append(a)
            r.computed += n + a
            self.release(r.seq_id)
            emitted.append(r)
            for tok in tokens:
                n_emitted += 1
                if self.scheduler.append_token(r, tok, now):  # ended: later tokens of the run are dropped
                    break
        # Recurrent layers: a request that rejected a draft gets its state back (as it was before this step) and
        # re-advances it over the tokens it keeps, positions [start, computed), in one more target forward (hidden
        # states dropped; attention rewrites the same K/V). The hidden states of those positions from the verify
        # forward are exact (causal), so the draft is fed from it.
        settled = [r.computed for r in batch]  # positions [start, settled) are final for the draft
        if snapshot is not None:
            redo = [j for j, i in enumerate(verifying)
                    if not batch[i].done and accepted_counts[i] is not None and accepted_counts[i] < len(drafts[i])]
            if redo:
                pool.restore(slots, snapshot, rows=redo)
                again = [Work(batch[i].seq_id, batch[i].tokens[starts[i]:batch[i].computed], starts[i])
                         for i in (verifying[j] for j in redo)]
                graphs = self.verify_graphs
                if graphs is not None and graphs.accepts(again):  # at most K + 1 tokens each: the verify graph
                    tables = loaded.blocks.tables
                    graphs.run(again, [tables[w.seq_id] for w in again],
                               state_slots=[pool.slot(w.seq_id) for w in again])
                else:
                    self._send(_REDO, again)
                    runner = loaded.runner.inner if self._ranks is not None else loaded.runner
                    runner.step(again, return_hidden=True)
                self.stats.rollbacks += len(redo)
        for r in batch:
            if r.done and r in running:  # (one that failed alone has left already)
                running.remove(r)
                self.scheduler.release(r.seq_id)
        t_draft = time.perf_counter()
        with record_function("spec::draft"):
            self._draft(batch, starts, settled, offsets, hidden)
        self.stats.draft_s += time.perf_counter() - t_draft
        # Checkpoint rewind, issued after the draft graphs launched: the draft never reads the target's recurrent
        # states and the next verify is behind both on the stream, so the GPU runs the drafts while the host issues
        # the rewind's copies (s32a: bench/NOTES-mtp.md).
        if rewind and verifying:
            redo = [j for j, i in enumerate(verifying)
                    if not batch[i].done and accepted_counts[i] is not None and accepted_counts[i] < len(drafts[i])]
            if redo:  # each keeps tokens [start, computed) of its window: the checkpoint after the last of them
                pool.rewind([slots[j] for j in redo],
                            [batch[verifying[j]].computed - starts[verifying[j]] for j in redo])
                self.stats.rollbacks += len(redo)
        dt = time.perf_counter() - t0
        if prefill:
            self.scheduler.stats.prefill_tokens += sum(real)
            self.scheduler.stats.prefill_s += dt
        else:
            self.scheduler.stats.decode_tokens += n_emitted
            self.scheduler.stats.decode_s += dt
        self.scheduler.stats.steps += 1
        return emitted

    # ------------------------------------------------------------------------------------------------------ draft
    def _num_drafts(self, r) -> int:
        """Drafts request ``r`` may propose now: within its remaining tokens, the context and the free blocks."""
        loaded = self.loaded
        k = min(self.k, r.params.max_new_tokens - len(r.output) - 1, loaded.max_model_len - len(r.tokens))
        while k > 0 and not loaded.blocks.can_allocate(r.seq_id, len(r.tokens) + k):
            k -= 1
        if k > 0:
            loaded.blocks.ensure(r.seq_id, len(r.tokens) + k)
        return max(k, 0)

    def _draft(self, batch: list, starts: list[int], settled: list[int], offsets: list[int],
               hidden: torch.Tensor) -> None:
        """Feed the MTP head the positions ``[start, settled)`` the target just settled and chain K drafts for the
        requests that want them (module docstring)."""
        work, rows, wanted, owners = [], [], [], []
        for i, r in enumerate(batch):
            if r.done:
                continue
            start, end = starts[i], settled[i]
            if end <= start:
                continue
            work.append(Work(r.seq_id, r.tokens[start + 1 : end + 1], start))
            rows.append(hidden[offsets[i] : offsets[i] + (end - start)])
            owners.append(r)
            # Only a request whose next token is known and sampled (its whole context is in the cache) drafts.
            wanted.append(self._num_drafts(r) if end + 1 == len(r.tokens) else 0)
        if not work:
            return
        ends = []
        at = 0
        for w in work:
            at += len(w.token_ids)
            ends.append(at - 1)
        tables = self.loaded.blocks.tables
        if self.resident and all(r.params.temperature == 0 for r in owners) and self.draft_graphs.accepts(work):
            self._draft_on_device(work, rows, owners, wanted, ends)
            return
        if self.draft_graphs is not None and self.draft_graphs.accepts(work):
            last_hidden = self.draft_graphs.run(work, [tables[w.seq_id] for w in work], hidden=torch.cat(rows))[ends]
            last_logits = self.draft.compute_logits(last_hidden)
        else:
            self._send(_DRAFT, work)
            self.draft.bind_hidden_states(torch.cat(rows))
            last_logits = self.runner.step(work, all_positions=False)  # each request's last token
            last_hidden = self.draft.last_hidden_states[ends]
        active = [j for j, k in enumerate(wanted) if k > 0]
        for j in active:
            self.drafted[owners[j].seq_id] = _Drafted()
        for step in range(self.k):
            active = [j for j in active if wanted[j] > step]
            if not active:
                break
            if step > 0:
                step_work = []
                for j in active:
                    r = owners[j]
                    got = self.drafted[r.seq_id].tokens
                    # draft `step` (token len(tokens) + step - 1) enters at the position before it
                    step_work.append(Work(r.seq_id, [got[-1]], len(r.tokens) + step - 2))
                if self.chain_graphs is not None and self.chain_graphs.accepts(step_work):
                    chained = self.chain_graphs.run(step_work, [tables[w.seq_id] for w in step_work],
                                                    hidden=last_hidden[active])
                    last_logits_step = self.draft.compute_logits(chained)
                else:
                    self._send(_CHAIN, step_work)
                    self.draft.bind_hidden_states(last_hidden[active])
                    last_logits_step = self.runner.step(step_work, all_positions=False)
                    chained = self.draft.last_hidden_states
                rows_logits = last_logits_step[: len(active)]
                new_hidden = last_hidden.clone()
                new_hidden[active] = chained[: len(active)]
                last_hidden = new_hidden
                new_logits = last_logits.clone()
                new_logits[active] = rows_logits.to(new_logits.dtype)
                last_logits = new_logits
            greedy = last_logits.argmax(-1).tolist() if any(owners[j].params.temperature == 0 for j in active) else None
            if greedy is not None and self.propose_override is not None:
                over = self.propose_override([owners[j] for j in active], step)
                if over is not None:
                    for j, t in zip(active, over):
                        greedy[j] = t
            for j in active:
                r = owners[j]
                entry = self.drafted[r.seq_id]
                if r.params.temperature == 0:
                    entry.tokens.append(greedy[j])
                else:
                    q = _probs(last_logits[j], r.params)
                    entry.tokens.append(int(torch.multinomial(q, 1, generator=r.generator)))
                    entry.probs.append(q)

    def _draft_on_device(self, work: list[Work], rows: list[torch.Tensor], owners: list, wanted: list[int],
                         ends: list[int]) -> None:
        """:meth:`_draft` for greedy requests with the graphs built ``resident``: the settling step and the K - 1
        chained steps replay their graphs with the LM head's argmax inside; draft j of the request in row r lands
        in ``_draft_buf[j, r]``, which the next chained step and the next verify step read by reference. Nothing is
        read back here (the verify step's one read returns the drafts it fed)."""
        dev, tables = self.loaded.device, self.loaded.blocks.tables
        buf = self._draft_buf
        for seq_id in [q for q, e in self.drafted.items() if e.resident]:
            self.release(seq_id)  # unverified drafts of a request left out of this step: the buffer is rewritten
        if TIMELINE is not None:
            TIMELINE.mark("settle_start")
        hidden, top, _ = self.draft_graphs.run(work, [tables[w.seq_id] for w in work], hidden=torch.cat(rows),
                                               head=True)
        if TIMELINE is not None:
            TIMELINE.mark("settle_end")
        n = len(work)
        ends_at = _index(ends, dev)
        last_hidden = hidden.index_select(0, ends_at)
        active = [j for j in range(n) if wanted[j] > 0]
        # Oracle drafts (propose_override): every draft of every request in one upload; the head's own proposals
        # are then not stored (each chained step reads the replaced one).
        over = self._overrides(owners, active, wanted)
        if over is not None:
            buf[:, :n].copy_(torch.tensor(over, dtype=torch.int64, pin_memory=dev.type == "cuda"), non_blocking=True)
        else:
            buf[0, :n].copy_(top.index_select(0, ends_at))
        for step in range(self.k):
            active = [j for j in active if wanted[j] > step]
            if not active:
                break
            at = None if len(active) == n else _index(active, dev)
            if step > 0:
                step_work = [Work(owners[j].seq_id, [-1 - ((step - 1) * buf.shape[1] + j)],
                                  len(owners[j].tokens) + step - 2) for j in active]
                h_in = last_hidden if at is None else last_hidden.index_select(0, at)
                if TIMELINE is not None:
                    TIMELINE.mark(f"chain{step}_start")
                chained, top, _ = self.chain_graphs.run(step_work, [tables[w.seq_id] for w in step_work],
                                                        hidden=h_in, head=True)
                if TIMELINE is not None:
                    TIMELINE.mark(f"chain{step}_end")
                if at is None:
                    last_hidden = chained
                    if over is None:
                        buf[step, :n].copy_(top)
                else:
                    last_hidden = last_hidden.index_copy(0, at, chained)
                    if over is None:
                        buf[step].index_copy_(0, at, top)
        for j in range(n):
            if wanted[j] > 0:
                self.drafted[owners[j].seq_id] = _Drafted(buf, j, wanted[j])

    def _overrides(self, owners: list, active: list[int], wanted: list[int]) -> list[list[int]] | None:
        """``propose_override``'s drafts as a ``[K, len(owners)]`` table (0 where a request drafts fewer), or None."""
        if self.propose_override is None:
            return None
        table = [[0] * len(owners) for _ in range(self.k)]
        for step in range(self.k):
            rows = [j for j in active if wanted[j] > step]
            got = self.propose_override([owners[j] for j in rows], step) if rows else []
            if got is None:
                return None
            for j, t in zip(rows, got):
                table[step][j] = t
        return table

    def _read_drafts(self) -> None:
        """Bring every device-resident draft to the host in one read (a step that cannot verify on the device)."""
        host = {}
        for e in self.drafted.values():
            if e.resident:
                if id(e.buf) not in host:
                    host[id(e.buf)] = e.buf.tolist()
                e.tokens = [host[id(e.buf)][j][e.row] for j in range(e.count)]

    # -------------------------------------------------------------------------------------------- follower ranks
    def follow(self, kind: int, work: list[Work]) -> None:
        """A follower rank of engine-started tensor parallelism runs rank 0's model call ``kind`` on ``work``
        (``runtime/parallel/launch.py`` hands it the SPEC messages, with the block tables and state slots set):

        * ``_TARGET``: the target's forward and the LM head over :meth:`_logit_rows`' rows (results dropped: rank 0
          decides). Recurrent states: a slot is zeroed for an item at position 0 (a new or readmitted request), and
          every multi-token item continuing a sequence is snapshotted first (a superset of rank 0's verify windows);
        * ``_REDO``: rank 0 rolled these sequences back: restore their snapshots, re-run the kept tokens;
        * ``_DRAFT``: the MTP head over the item's tokens with this rank's own hidden states of the same positions
          from the last target call (replicated across ranks: the row-parallel layers all-reduce them);
        * ``_CHAIN``: one chained draft step on each sequence's last MTP hidden state."""
        loaded = self.loaded
        if self._follower is None:
            self._follower = {"snap": {}, "last": {}, "hidden": None, "at": {}}
            self.release_graphs()  # rank 0 runs these calls eagerly
        f, pool = self._follower, loaded.state_pool
        if kind == _TARGET:
            if pool is not None:
                f["snap"], keep = {}, []
                for w in work:
                    if w.start_pos == 0:
                        pool.reset(pool.slot(w.seq_id))
                    elif len(w.token_ids) > 1:
                        keep.append(w.seq_id)
                if keep:
                    slots = [pool.slot(q) for q in keep]
                    snap = pool.snapshot(slots)
                    f["snap"] = {q: (slots, snap, j) for j, q in enumerate(keep)}
            _, hidden = loaded.runner.step(work, return_hidden=True)
            self._logit_rows(work, hidden)
            at, f["at"] = 0, {}
            for w in work:
                f["at"][w.seq_id] = at
                at += len(w.token_ids)
            f["hidden"] = hidden
        elif kind == _REDO:
            for w in work:
                slots, snap, j = f["snap"][w.seq_id]
                pool.restore(slots, snap, rows=[j])
            loaded.runner.step(work, return_hidden=True)
        elif kind == _DRAFT:
            rows = [f["hidden"][f["at"][w.seq_id]:f["at"][w.seq_id] + len(w.token_ids)] for w in work]
            self.draft.bind_hidden_states(torch.cat(rows))
            self.runner.step(work, all_positions=False)
            out, at = self.draft.last_hidden_states, 0
            for w in work:
                at += len(w.token_ids)
                f["last"][w.seq_id] = out[at - 1]
        elif kind == _CHAIN:
            self.draft.bind_hidden_states(torch.stack([f["last"][w.seq_id] for w in work]))
            self.runner.step(work, all_positions=False)
            for w, h in zip(work, self.draft.last_hidden_states):
                f["last"][w.seq_id] = h
        else:
            raise RuntimeError(f"speculative follower: unknown call kind {kind}")


# Kinds of the model calls a speculative step makes (the flag of launch.py's SPEC message).
_TARGET, _DRAFT, _CHAIN, _REDO = 0, 1, 2, 3


def _engine_started_follower() -> bool:
    """This process is a follower rank that runtime/parallel/launch.py spawned (it mirrors rank 0's calls)."""
    return bool(getattr(launch, "_FOLLOWER", False))
