"""The rocm runner (ATOM style): a scheduled step -> one flattened varlen batch -> next-token logits."""
from __future__ import annotations


import torch

from modelgen import settings

from ...block_manager import BlockManager
from ...work import Work, pad_tables
from ...layers.attention import AttentionMetadata
from ...layers.kind import layer_kinds
from ...ops.tokens import chain_token_ids
from ...state_cache import StateMetadata
from .cuda_graphs import DecodeGraphs, slots_for


class RocmRunner:
    """ATOM-style: flattened tokens, :class:`AttentionMetadata`, ``forward`` + ``compute_logits``.

    On a GPU with the Triton kernels active, pure decode steps of up to the largest bucket replay CUDA graphs
    (``runtime/targets/rocm/cuda_graphs.py``); prefill, mixed steps and scoring run eagerly (their shapes vary).
    ``cuda_graphs=False`` or ``MODELGEN_CUDA_GRAPHS=0`` turns the graphs off.
    """

    mixes_prefill_and_decode = True

    def __init__(
        self, model: torch.nn.Module, blocks: BlockManager, device: torch.device, *,
        max_model_len: int | None = None, max_num_seqs: int = 8, cuda_graphs: bool = True,
        decode_buckets: list[int] | None = None, state_pool=None,
    ):
        self.model, self.blocks, self.device = model, blocks, device
        self.state_pool = state_pool  # StatePool of recurrent layers (Gated DeltaNet), None for pure attention
        self.graphs = None
        # Pipeline parallelism: each step's stage hand-off and logits return (runtime/parallel/pipeline.py); its
        # point-to-point transfers are not captured in the decode graphs, which stay off.
        self.pipeline = getattr(model, "pp_comm", None)
        # The engine asks for greedy ids (step_greedy) instead of logits: the last stage takes the argmax.
        self.remote_greedy = self.pipeline is not None
        if self.pipeline is not None:
            cuda_graphs = False
        # Greedy feedback for pipelined decode (step_greedy_async): row i holds the argmax of the last async step's
        # sequence i; a later step's id ``-1 - i`` reads it (runtime/ops/tokens.py).
        self.async_greedy = self.pipeline is None
        self.chain = torch.zeros(max([max_num_seqs, *(decode_buckets or [])]), dtype=torch.int64, device=device)
        self._readback = None  # two pinned host rows the async steps' tokens are copied into, alternately
        if cuda_graphs and settings.get("MODELGEN_CUDA_GRAPHS") and _gpu_kernels_on(model, device):
            width = blocks.blocks_needed(max_model_len) if max_model_len else blocks.num_blocks
            self.graphs = DecodeGraphs(model, device, max_num_seqs, width, blocks.block_size, decode_buckets,
                                       with_state=state_pool is not None, chain=self.chain)

    def warmup(self) -> None:
        """Capture every decode bucket now rather than on first use."""
        if self.graphs is not None:
            with torch.inference_mode():
                self.graphs.capture_all()

    def release_graphs(self) -> None:
        """Drop the decode CUDA graphs before the process group goes (``runtime/parallel/launch.py``
        ``release_graphs`` says why); later decode steps run eagerly."""
        self.graphs = None

    def step_greedy(self, work: list[Work]) -> list[int] | None:
        """Greedy token id of each sequence's last new token (``step(work).argmax(-1)``); under pipeline parallelism
        the last stage computes it and sends only the ids to rank 0 (None on the other ranks)."""
        if self.pipeline is None:
            return self.step(work).argmax(-1).tolist()
        ids = self.step(work, _greedy=True)
        return ids.tolist() if ids is not None else None

    @torch.inference_mode()
    def step_greedy_async(self, work: list[Work], read_back: bool = True) -> "GreedyStep":
        """Launch a step that ends each sequence's row in its greedy token, without waiting for the GPU.

        The argmax rows land in ``self.chain`` (row i = ``work[i]``), where the next step's ids ``from_chain(i)`` read
        them on the device; ``read_back`` also queues their copy to pinned host memory, which
        :meth:`GreedyStep.tokens` waits for. The engine reads step n's tokens after launching step n + 1
        (``runtime/engine/llm.py``), so at most two steps are unread: two pinned rows, used alternately."""
        if not self.async_greedy:
            raise NotImplementedError("step_greedy_async under pipeline parallelism")
        n = len(work)
        graphed = self._graphed(work)
        logits = self.step(work)
        if not graphed:  # the decode graphs write chain themselves
            torch.argmax(logits, -1, out=self.chain[:n])
        if not read_back:
            return GreedyStep(None, n, None)
        if self.chain.is_cuda:
            if self._readback is None:
                self._readback = [torch.zeros(self.chain.numel(), dtype=torch.int64, pin_memory=True) for _ in range(2)]
            buf = self._readback.pop(0)
            self._readback.append(buf)
            buf[:n].copy_(self.chain[:n], non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            return GreedyStep(buf, n, done)
        return GreedyStep(self.chain[:n].clone(), n, None)

    def _graphed(self, work: list[Work], all_positions: bool = False) -> bool:
        graphs = self.graphs
        return graphs is not None and not all_positions and all(len(w.token_ids) == 1 for w in work) \
            and graphs.bucket_for(len(work)) is not None

    @torch.inference_mode()
    def step(self, work: list[Work], all_positions: bool = False, return_hidden: bool = False, *,
             _greedy: bool = False):
        """Logits of each sequence's last new token ``[num_seqs, V]`` (every new token with ``all_positions``).

        ``return_hidden``: ``(logits, hidden)`` instead, ``hidden [num_tokens, hidden_size]`` the model's output (final
        normed hidden states) of every fed token in work order -- what a draft head (MTP) reads. A pure decode step
        still replays its CUDA graph (the graph keeps the hidden states in a static output beside the logits: a
        forward hook would not run in a replay); ``logits`` is then the graph's ``[num_seqs, V]`` and None on the
        eager path (the caller computes the rows it needs, instead of a vocabulary-wide row per prompt token).
        """
        graphs = self.graphs
        if self._graphed(work, all_positions):
            tables = self.blocks.tables
            slots = [self.state_pool.slot(w.seq_id) for w in work] if self.state_pool is not None else None
            return graphs.run([w.token_ids[0] for w in work], [w.start_pos for w in work],
                              [tables[w.seq_id] for w in work], state_slots=slots, return_hidden=return_hidden)
        ids, pos, cu, ctx = [], [], [0], []
        for w in work:
            n = len(w.token_ids)
            ids += w.token_ids
            pos += range(w.start_pos, w.start_pos + n)
            cu.append(cu[-1] + n)
            ctx.append(w.start_pos + n)
        tables = [self.blocks.tables[w.seq_id] for w in work]
        slots = slots_for(tables, [w.start_pos for w in work], [len(w.token_ids) for w in work], self.blocks.block_size)
        width = max(len(t) for t in tables)
        dev = self.device
        meta = AttentionMetadata(
            is_prefill=any(len(w.token_ids) > 1 for w in work),
            slot_mapping=torch.from_numpy(slots).to(dev),
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=dev),
            context_lens=torch.tensor(ctx, dtype=torch.int32, device=dev),
            block_tables=torch.tensor(pad_tables(tables, width), dtype=torch.int32, device=dev),
            max_seqlen_q=max(len(w.token_ids) for w in work),
            state=self._state_metadata(work),
        )
        input_ids = torch.tensor(ids, dtype=torch.int64, device=dev)
        if min(ids) < 0:  # ids fed back from the previous greedy step's rows (step_greedy_async)
            input_ids = chain_token_ids(input_ids, self.chain)
        positions = torch.tensor(pos, dtype=torch.int64, device=dev)
        if self.pipeline is not None:
            if return_hidden:
                raise NotImplementedError("return_hidden under pipeline parallelism (the hidden states live on the "
                                          "last stage)")
            rows = None if all_positions else torch.tensor(cu[1:], device=dev) - 1
            return self.pipeline.step(self.model, input_ids, positions, meta, rows, greedy=_greedy)
        hidden = self.model(input_ids, positions, meta)
        if return_hidden:
            return (self.model.compute_logits(hidden) if all_positions else None), hidden
        if all_positions:
            return self.model.compute_logits(hidden)
        last = torch.tensor(cu[1:], device=dev) - 1
        return self.model.compute_logits(hidden.index_select(0, last))

    def _state_metadata(self, work: list[Work]):
        """Each sequence's state slot; ``fresh`` (no computed token yet) makes a recurrent layer start from zeros."""
        if self.state_pool is None:
            return None
        return StateMetadata.build([len(w.token_ids) for w in work], [self.state_pool.slot(w.seq_id) for w in work],
                                   [w.start_pos == 0 for w in work], self.device)


def _gpu_kernels_on(model: torch.nn.Module, device: torch.device) -> bool:
    if torch.device(device).type != "cuda":
        return False
    from ...ops import gpu

    probe = next(model.parameters(), None)
    return probe is not None and gpu.enabled(probe) and all(layer.decode_graph_capturable()
                                                            for layer in layer_kinds(model))


class GreedyStep:
    """A launched greedy step's tokens: :meth:`tokens` waits for them (the step's copy to pinned memory)."""

    def __init__(self, host: torch.Tensor | None, n: int, done):
        self.host, self.n, self.done = host, n, done

    def tokens(self) -> list[int]:
        if self.host is None:
            raise RuntimeError("this step's tokens were not read back (a follower rank's step)")
        if self.done is not None:
            self.done.synchronize()
        return self.host[: self.n].tolist()
