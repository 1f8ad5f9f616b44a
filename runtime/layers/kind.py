"""What the engine asks of a layer kind, declared beside ``kv_spec()``: the one seam between the engine and a kind.

A layer kind (paged attention, MLA, Gated DeltaNet, MoE, ... each in its own ``runtime/layers/<kind>/`` folder)
subclasses :class:`LayerKind` and overrides only the answers that differ from the defaults, which describe a layer
that needs nothing special (a plain per-token layer: graph-capturable, sequence- and pipeline-parallel as is, no
weight read as a matrix). The engine, the targets, the parallel wrappers and the loader walk the built model with
:func:`layer_kinds` and ask; none of them imports a kind's class or checks a layer's type, so a new kind is a new
folder (and its codegen block), not a new ``if`` in each of them -- vLLM's ``MambaBase`` / ``AttentionLayerBase``
play the same part.

The cache itself is declared by ``kv_spec()`` (a ``LayerSpec``, ``LatentCacheSpec`` or ``StateSpec``) and bound by
``bind_kv_cache()``; the generated class that owns the cache implements both (a subclass of the kind's layer, or the
GQA attention module around a ``PagedAttention``), so they are declared here without a default.
"""
from __future__ import annotations

from typing import Any, Iterator

from torch import nn

from ..state_cache import StateSpec

#: The ways a fixed-shape multi-token step (a speculative verify window) can be laid out for a captured graph
#: (``runtime/targets/rocm/cuda_graphs.py`` ``multi_token_layout`` says what each means).
STEP_LAYOUTS = frozenset({"rows", "varlen"})


class LayerKind(nn.Module):
    """A layer the engine asks questions of (see the module docstring); every method has the default answer."""

    #: ``kv_spec().kind`` of the layer's cache: ``"paged_kv"``, ``"paged_latent"``, ``"recurrent_state"``; None when
    #: the layer holds no cache (MoE).
    cache_kind: str | None = None

    # ------------------------------------------------------------------------------------------------------ cache
    def kv_spec(self) -> Any:
        """This layer's cache, per rank (implemented by the generated class that owns the cache)."""
        raise NotImplementedError(f"{type(self).__name__} declares no cache (kv_spec)")

    def bind_kv_cache(self, kv_caches: dict[str, list[Any]]) -> None:
        """Take this layer's tensors of the engine's allocation (implemented beside ``kv_spec``)."""
        raise NotImplementedError(f"{type(self).__name__} binds no cache (bind_kv_cache)")

    def holds_request_state(self) -> bool:
        """Whether the cache is one fixed-size state per request (a state-pool slot) rather than per-token blocks.
        Graph buckets then carry each sequence's slot, and a speculative verify step -- which advances the state
        over every draft token -- is preceded by a snapshot of the slots (``StatePool.snapshot``) so that the
        rejected tokens can be rolled back."""
        return self.cache_kind == StateSpec.kind

    # ------------------------------------------------------------------------------------------------ CUDA graphs
    def decode_graph_capturable(self) -> bool:
        """Whether a one-token-per-sequence decode step through this layer runs without host reads or
        data-dependent shapes on the GPU path, so the rocm runner may capture it in a CUDA graph."""
        return True

    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        """The :data:`STEP_LAYOUTS` in which a captured step of ``tokens_per_seq`` new tokens per sequence computes
        this layer correctly (empty: such a step runs eagerly)."""
        return STEP_LAYOUTS

    # ------------------------------------------------------------------------------------------------ parallelism
    def sequence_parallel_refusal(self) -> str | None:
        """Why this layer cannot run with the residual stream split by tokens (``sequence_parallel=True``), or None."""
        return None

    def sequence_parallel_gathers_tokens(self) -> bool:
        """Whether, under sequence parallelism, every tensor argument of ``forward`` is token-major and must be
        gathered from all ranks first, its output (already summed over ranks) cut back to this rank's tokens.
        False: the layer's inputs arrive whole (e.g. after a column-parallel projection that gathered them)."""
        return False

    def step_metadata_writes(self) -> bool:
        """Whether this layer writes into the step's metadata something later layers of the same forward read."""
        return False

    def step_metadata_reads(self) -> str | None:
        """What this layer reads from the step's metadata that an earlier layer wrote, or None: a phrase for errors,
        ``{layer}`` standing for the layer's index. The metadata does not cross pipeline stages, so such a layer
        cannot come before any writer on a stage."""
        return None

    # ----------------------------------------------------------------------------------------------- quantization
    def linears_read_as_matrix(self) -> list[nn.Module]:
        """Linear submodules whose weight the layer reads as a plain matrix instead of calling them (so a quantized
        checkpoint must hand them dequantized, never keep them in a quantized GEMM format)."""
        return []


def layer_kinds(model: nn.Module) -> Iterator[LayerKind]:
    """The layers of ``model`` that answer the engine's questions, in module order."""
    return (m for m in model.modules() if isinstance(m, LayerKind))
