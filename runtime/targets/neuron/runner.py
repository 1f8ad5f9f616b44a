"""The neuron runner (vLLM Neuron style): a scheduled step padded to a compiled bucket, per-layer metadata dict."""
from __future__ import annotations

import contextlib
import time

import torch

from ... import distributed
from ...block_manager import BlockManager
from ...work import Work, pad_tables


def default_buckets(limit: int, start: int = 16) -> list[int]:
    out, b = [], start
    while b < limit:
        out.append(b)
        b *= 2
    return out + [limit]


def format_bucket_table(rows: list[dict]) -> str:
    """The warm-up table (``NeuronRunner.bucket_table``) as aligned text, with a total line."""
    lines = [f"{'path':<16} {'bucket':<26} {'compile s':>9} {'graphs':>6}"]
    for r in rows:
        lines.append(f"{r['path']:<16} {r['bucket']:<26} {r['seconds']:>9.2f} {r['graphs']:>6}")
    total_s, total_g = sum(r["seconds"] for r in rows), sum(r["graphs"] for r in rows)
    lines.append(f"{'total':<16} {f'{len(rows)} buckets':<26} {total_s:>9.2f} {total_g:>6}")
    return "\n".join(lines)


class NeuronRunner:
    """vLLM Neuron-style: static buckets, per-layer metadata dict, optional ``torch.compile(fullgraph=True)``.

    Prefill buckets are token counts (``num_batched_tokens_buckets``); decode buckets are pairs of a request count
    (``num_seqs_buckets``) and a context length: a decode step's block table has ``context_bucket / block_size``
    columns, so short contexts do not gather the whole ``max_model_len`` window. Prefill block tables always have
    ``max_num_seqs`` rows and the full ``max_model_len`` width. Every bucket has one static shape.
    """

    mixes_prefill_and_decode = False
    decode_token_threshold = 1

    def __init__(
        self,
        model: torch.nn.Module,
        blocks: BlockManager,
        device: torch.device,
        *,
        max_model_len: int,
        max_num_seqs: int,
        prefill_buckets: list[int] | None = None,
        decode_buckets: list[int] | None = None,
        decode_context_buckets: list[int] | None = None,
        compile: bool = False,
        on_device_sampling: bool = False,
        segmented_prefill: bool = False,
        state_pool=None,
    ):
        self.model, self.blocks, self.device = model, blocks, device
        # Recurrent layers (Gated DeltaNet) read each request row's state slot from the metadata: ``state_slots``
        # [rows] (-1 = empty row, never touched) and ``state_fresh`` [rows] (first chunk: start from zeros).
        self.state_pool = state_pool
        # Chunked prompts continue through segmented prefill (kv_segment_size > 0), one graph per (tokens, context).
        self.segmented_prefill = segmented_prefill
        # With on-device sampling every call passes sampling_params (a fixed signature: always present or never).
        self.on_device_sampling = on_device_sampling
        self.max_num_seqs = max_num_seqs
        self.max_blocks_per_seq = blocks.blocks_needed(max_model_len)
        self.prefill_buckets = sorted(prefill_buckets or default_buckets(max_model_len))
        self.decode_buckets = sorted(decode_buckets or default_buckets(max_num_seqs, start=1))
        self.decode_context_buckets = sorted(decode_context_buckets or default_buckets(max_model_len, start=128))
        if self.decode_context_buckets[-1] < max_model_len:
            raise ValueError(f"decode context buckets {self.decode_context_buckets} do not reach max_model_len {max_model_len}")
        self.layer_names = [layer.name for layer in model.get_kv_spec().layers]
        self.forward = model.forward
        if compile:
            from torch import _dynamo

            # One graph per bucket and path; raise the per-function cache limit above the bucket count.
            n_ctx = len(self.decode_context_buckets)
            n_graphs = len(self.prefill_buckets) * (1 + n_ctx * segmented_prefill) + len(self.decode_buckets) * n_ctx
            _dynamo.config.cache_size_limit = max(64, 4 * n_graphs)
            _dynamo.config.accumulated_cache_size_limit = 4 * _dynamo.config.cache_size_limit
            self.forward = torch.compile(model.forward, fullgraph=True, dynamic=False)
        self.compiled = compile
        self.warm = False  # after warmup() a compiled runner refuses to recompile (Neuron: graphs are fixed)
        # Bucket padding uses the config's pad_token_id (the guide: "padding tokens use pad_token_id"), carried by the
        # model's NeuronConfig; 0 for a model built without one. Padding rows never reach the cache (slot -1) and
        # are never sampled, so the id only matters to what the padded graph computes, not to any output.
        neuron_config = getattr(getattr(model, "config", None), "neuron_config", None)
        self.pad_token_id = getattr(neuron_config, "pad_token_id", 0) or 0
        # warmup(): one row per traced bucket (path, bucket, seconds, graphs compiled), `modelgen run --compile`'s table
        self.bucket_table: list[dict] = []
        self.rank = torch.tensor(distributed.tp_rank(), dtype=torch.int64, device=device)

    def _stance(self):
        """After warm-up every bucket is traced; a new shape would be a silent recompile on CPU and a failed
        NEFF lookup on Neuron, so it raises instead (torch.compiler stance ``fail_on_recompile``, scoped to
        this runner's calls so other models in the process are unaffected)."""
        if self.compiled and self.warm:
            return torch.compiler.set_stance("fail_on_recompile")
        return contextlib.nullcontext()

    def _bucket(self, n: int, buckets: list[int], what: str) -> int:
        for b in buckets:
            if n <= b:
                return b
        raise ValueError(f"{what} {n} exceeds the largest compiled bucket {buckets[-1]}")

    def _metadata(self, slots, block_table, max_query_len, seq_ids, kv_segment_size=0, cached=None,
                  work: list[Work] | None = None) -> dict:
        dev = self.device
        cached = cached if cached is not None else [0] * len(block_table)
        common = {
            "block_table_tensor": torch.tensor(block_table, dtype=torch.int32, device=dev),
            "slot_mapping": torch.tensor(slots, dtype=torch.int64, device=dev),
            "max_query_len": max_query_len,
            "block_size": self.blocks.block_size,
            "max_blocks_per_seq": len(block_table[0]),
            "decode_token_threshold": self.decode_token_threshold,
            "cached_seq_len": torch.tensor([[c] for c in cached], dtype=torch.int32, device=dev),
            "kv_segment_size": kv_segment_size,
            "seq_ids": torch.tensor(seq_ids, dtype=torch.int32, device=dev),
        }
        if self.state_pool is not None:
            work = work or []
            empty = len(block_table) - len(work)
            common["state_slots"] = torch.tensor([self.state_pool.slot(w.seq_id) for w in work] + [-1] * empty,
                                                 dtype=torch.int64, device=dev)
            common["state_fresh"] = torch.tensor([w.start_pos == 0 for w in work] + [False] * empty,
                                                 dtype=torch.bool, device=dev)
        return {name: common for name in self.layer_names}

    def build_inputs(self, work: list[Work]) -> tuple[dict, int]:
        """Padded forward kwargs for one step, and the number of real requests."""
        decode = all(len(w.token_ids) == 1 for w in work)
        tables = [self.blocks.tables[w.seq_id] for w in work]
        if decode:
            n_pad = self._bucket(len(work), self.decode_buckets, "decode batch")
            ids = [w.token_ids[0] for w in work] + [self.pad_token_id] * (n_pad - len(work))
            pos = [w.start_pos for w in work] + [0] * (n_pad - len(work))
            slots = [self.blocks.slot(w.seq_id, w.start_pos) for w in work] + [-1] * (n_pad - len(work))
            seq_ids = list(range(len(work))) + [-1] * (n_pad - len(work))
            segment, cached = 0, None
            context = self._bucket(max(w.start_pos + 1 for w in work), self.decode_context_buckets, "decode context")
            width = self.blocks.blocks_needed(context)
            rows = pad_tables([t[:width] for t in tables], width) + [[0] * width] * (n_pad - len(work))
            sampling = list(range(n_pad))
            max_query_len = 1
        else:
            segmented = any(w.start_pos for w in work)
            if segmented and not self.segmented_prefill:
                raise NotImplementedError("a prompt chunk after the first needs segmented_prefill=True")
            total = sum(len(w.token_ids) for w in work)
            t_pad = self._bucket(total, self.prefill_buckets, "prefill tokens")
            ids, pos, slots, seq_ids, sampling = [], [], [], [], []
            for r, w in enumerate(work):
                n = len(w.token_ids)
                ids += w.token_ids
                pos += range(w.start_pos, w.start_pos + n)
                slots += [self.blocks.slot(w.seq_id, p) for p in range(w.start_pos, w.start_pos + n)]
                seq_ids += [r] * n
                sampling.append(len(ids) - 1)
            pad = t_pad - total
            ids += [self.pad_token_id] * pad
            pos += [0] * pad
            slots += [-1] * pad
            seq_ids += [-1] * pad
            sampling += [0] * (self.max_num_seqs - len(work))
            empty = self.max_num_seqs - len(work)
            if segmented:  # the block table covers the context bucket the chunk attends over
                segment = self._bucket(max(w.start_pos + len(w.token_ids) for w in work),
                                       self.decode_context_buckets, "prefill context")
                width = self.blocks.blocks_needed(segment)
                tables = [t[:width] for t in tables]
            else:
                segment, width = 0, self.max_blocks_per_seq
            rows = pad_tables(tables, width) + [[0] * width] * empty
            # cached_seq_len (the guide's per-layer key): tokens of each request already in the cache before this
            # chunk. The generated attention reads the same number off ``positions`` (a chunk's first position is
            # its cached length; segmented attention masks keys past each query's position), so the two agree by
            # construction; the key stays in the metadata for models written against the plugin's contract.
            cached = [w.start_pos for w in work] + [0] * empty
            max_query_len = t_pad  # bucket-static so the graph guard never sees a new value
        dev = self.device
        kwargs = dict(
            input_ids=torch.tensor(ids, dtype=torch.int64, device=dev),
            positions=torch.tensor(pos, dtype=torch.int64, device=dev),
            attn_metadata=self._metadata(slots, rows, max_query_len, seq_ids, segment, cached, work),
            sampling_positions=torch.tensor(sampling, dtype=torch.int64, device=dev),
            sampling_params=None,
            spec_decode_metadata=None,
            logit_mask=None,
            rank=self.rank,
            inputs_embeds=None,
            is_token_ids=None,
        )
        return kwargs, len(work)

    @torch.inference_mode()
    def step(self, work: list[Work], all_positions: bool = False, return_hidden: bool = False):
        """Logits ``[num_seqs, V]`` (every real token's with ``all_positions``). ``return_hidden``: ``(None, hidden)``
        with ``hidden [num_tokens, hidden_size]`` the inner model's output (final normed hidden states) of every fed
        token in work order, from an eager call of the inner model (a draft head's input; the caller computes the
        logit rows it needs). Eager rather than the compiled bucket graph, whose outputs are logits only."""
        kwargs, n = self.build_inputs(work)
        if return_hidden:
            total = sum(len(w.token_ids) for w in work)
            hidden = self.model.model(kwargs["input_ids"], kwargs["positions"], kwargs["attn_metadata"], kwargs["rank"],
                                      kwargs["inputs_embeds"], kwargs["is_token_ids"])
            if isinstance(hidden, tuple):  # EAGLE3 aux layers: (final hidden states, aux states)
                hidden = hidden[0]
            return None, hidden[:total]  # real tokens come first in build_inputs' layout, padding after
        if all_positions:  # teacher-forced scoring: eager forward, logits at every real token
            total = sum(len(w.token_ids) for w in work)
            kwargs["sampling_positions"] = torch.arange(total, device=self.device)
            return self.model.forward(**kwargs)
        with self._stance():
            return self.forward(**kwargs)[:n]

    @torch.inference_mode()
    def step_sample(self, work: list[Work], params: list) -> list[int]:
        """On-device sampling: the graph returns token ids; ``params`` are the requests' SamplingParams."""
        kwargs, n = self.build_inputs(work)
        rows = kwargs["sampling_positions"].shape[0]
        table = [[p.top_k, p.top_p, p.temperature] for p in params] + [[0, 1.0, 0.0]] * (rows - n)
        kwargs["sampling_params"] = torch.tensor(table, dtype=torch.float32, device=self.device)
        with self._stance():
            tokens, _ = self.forward(**kwargs)
        return tokens[:n].tolist()

    @torch.inference_mode()
    def warmup(self) -> None:
        """Trace every prefill and decode bucket with padding-only inputs (slot -1: the cache is untouched), timing
        each and counting the graphs it compiled (``bucket_table``)."""
        self.bucket_table = []
        for t in self.prefill_buckets:
            self._warm("prefill", f"{t} tokens", self._synthetic(t, prefill=True))
            if self.segmented_prefill:
                for c in self.decode_context_buckets:
                    self._warm("prefill segment", f"{t} tokens x {c} context",
                               self._synthetic(t, prefill=True, context=c))
        for r in self.decode_buckets:
            for c in self.decode_context_buckets:
                self._warm("decode", f"{r} seqs x {c} context", self._synthetic(r, prefill=False, context=c))
        self.warm = True

    def _warm(self, path: str, bucket: str, kwargs: dict) -> None:
        from torch._dynamo.utils import counters

        before = counters["stats"]["unique_graphs"]
        t0 = time.perf_counter()
        self.forward(**kwargs)
        self.bucket_table.append({"path": path, "bucket": bucket, "seconds": time.perf_counter() - t0,
                                  "graphs": counters["stats"]["unique_graphs"] - before})

    def _synthetic(self, n: int, prefill: bool, context: int | None = None) -> dict:
        dev = self.device
        rows = self.max_num_seqs if prefill else n
        width = self.blocks.blocks_needed(context) if context else self.max_blocks_per_seq
        table = [[0] * width] * rows
        segment = context if (prefill and context) else 0
        return dict(
            input_ids=torch.full((n,), self.pad_token_id, dtype=torch.int64, device=dev),
            positions=torch.zeros(n, dtype=torch.int64, device=dev),
            attn_metadata=self._metadata([-1] * n, table, n if prefill else 1, [-1] * n, segment),
            sampling_positions=torch.zeros(rows, dtype=torch.int64, device=dev),
            sampling_params=torch.zeros(rows, 3, device=dev) if self.on_device_sampling else None,
            spec_decode_metadata=None, logit_mask=None, rank=self.rank, inputs_embeds=None, is_token_ids=None,
        )
