"""Tensor-parallel linear layers in ATOM/vLLM style.

Every parameter carries ``weight_loader(param, loaded_weight, shard_id=None)`` which takes the *full* checkpoint
tensor and copies this rank's shard into place, so the loader only needs names and shard ids (from the generated
``packed_modules_mapping``), never sharding arithmetic. Weights are ``[out_features, in_features]`` as in HF.

FP8 block-scaled checkpoints on the GPU path (``runtime/loader/quantization.py`` ``keep_quantized_weights``): a layer
switched by :meth:`LinearBase.keep_fp8` holds ``weight`` as ``float8_e4m3fn`` plus ``weight_scale_inv`` (float32, one
per ``block``) and multiplies through ``runtime/ops/gpu/fp8.py``'s block-scaled GEMM; its loaders place the scales of
each shard at the shard's block offset, which is why a layer is switched only when every shard boundary falls on a
block boundary (:meth:`LinearBase.fp8_shard_blocks_aligned`).
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from .. import distributed as dist
from ..ops import gpu
from .fp8 import fp8_linear

_gpu_linear = None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``; on a GPU, small-M (decode) GEMMs may run a Triton weight-streaming kernel instead of cuBLAS,
    chosen per shape by timing both once (``runtime/ops/gpu/linear.py``)."""
    global _gpu_linear
    if gpu.enabled(x):
        if _gpu_linear is None:
            from ..ops.gpu.linear import linear as _gpu_linear
        return _gpu_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def _check_shape(param: nn.Parameter, expected: tuple[int, ...], got: torch.Tensor, what: str) -> None:
    if tuple(got.shape) != tuple(expected):
        raise ValueError(f"{what}: checkpoint tensor has shape {tuple(got.shape)}, expected {tuple(expected)}")


class LinearBase(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)
            self.bias.weight_loader = self.weight_loader
        else:
            self.register_parameter("bias", None)

    fp8_block: tuple[int, int] | None = None  # (rows, cols) of a scale block once keep_fp8 switched the layer

    def _mm(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.fp8_block is not None:
            return fp8_linear(x, self.weight, self.weight_scale_inv, self.fp8_block, bias)
        return linear(x, self.weight, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._mm(x, self.bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        _check_shape(param, param.shape, loaded, "replicated weight")
        param.data.copy_(loaded)

    # -- FP8 block-scaled weights kept as FP8 (GPU path)
    def fp8_shard_blocks_aligned(self, block: tuple[int, int]) -> bool:
        """Whether every shard this layer's loaders cut out of a checkpoint tensor starts on a block boundary (else
        its scale rows/columns could not be cut alongside). Replicated layers take whole tensors."""
        return True

    def keep_fp8(self, block: tuple[int, int], fp8_dtype: torch.dtype = torch.float8_e4m3fn) -> bool:
        """Switch to an FP8 ``weight`` + ``weight_scale_inv [ceil(out / bo), ceil(in / bi)]`` (before loading);
        False (nothing changed) when a shard boundary splits a block."""
        if (not self.fp8_shard_blocks_aligned(block) or "forward" in self.__dict__
                or getattr(self.weight, "weight_loader", None) != self.weight_loader):
            # a parallel mode (runtime/parallel: sequence parallel, MLP data parallel) replaced this layer's forward
            # (one that multiplies ``self.weight`` itself) or its weight's loader (its own slicing): both expect the
            # dequantized weight
            return False
        out, inp = self.weight.shape
        self.weight = nn.Parameter(torch.empty(out, inp, dtype=fp8_dtype, device=self.weight.device),
                                   requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.weight_scale_inv = nn.Parameter(
            torch.empty(-(-out // block[0]), -(-inp // block[1]), dtype=torch.float32, device=self.weight.device),
            requires_grad=False)
        self.weight_scale_inv.weight_loader = self._scale_loader
        self.fp8_block = (int(block[0]), int(block[1]))
        return True

    def _scale_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        """The checkpoint's whole ``weight_scale_inv``: the weight loader's sharding, in block units."""
        self._load_scale(param, loaded, shard_id, *self.fp8_block)

    def _load_scale(self, param, loaded, shard_id, bo: int, bi: int) -> None:
        _check_shape(param, param.shape, loaded, "replicated weight_scale_inv")
        param.data.copy_(loaded)


class ReplicatedLinear(LinearBase):
    """Same full weight on every rank (routers, small projections)."""


class ColumnParallelLinear(LinearBase):
    """Output features split across ranks; output stays sharded (``gather_output=False``)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, gather_output: bool = False):
        self.tp_rank, self.tp_size = dist.tp_rank(), dist.tp_size()
        super().__init__(in_features, dist.divide(out_features, self.tp_size, "output features"), bias)
        self.gather_output = gather_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self._mm(x, self.bias)
        return dist.all_gather(y, -1) if self.gather_output else y

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        n = param.shape[0]
        _check_shape(param, (n * self.tp_size, *param.shape[1:]), loaded, "column-parallel weight")
        param.data.copy_(loaded.narrow(0, self.tp_rank * n, n))

    def fp8_shard_blocks_aligned(self, block: tuple[int, int]) -> bool:
        return self.tp_size == 1 or self.out_features % block[0] == 0

    def _load_scale(self, param, loaded, shard_id, bo, bi) -> None:
        r = param.shape[0]  # whole blocks per rank (aligned), the last rank's last one possibly partial
        _check_shape(param, (-(-self.out_features * self.tp_size // bo), *param.shape[1:]), loaded,
                     "column-parallel weight_scale_inv")
        param.data.copy_(loaded.narrow(0, self.tp_rank * r, r))


class RowParallelLinear(LinearBase):
    """Input features split across ranks; partial outputs are summed (all-reduce), bias added once after.

    ``reduce_results = False`` (set by :func:`~modelgen.runtime.layers.norm.fuse_all_reduce` on a bias-free layer whose
    output goes straight into a residual-add + RMSNorm) returns this rank's partial sum; the norm then reduces it in
    the fused all-reduce + add + RMSNorm op (ATOM / vLLM ``reduce_results``)."""

    def __init__(self, in_features: int, out_features: int, bias: bool):
        self.tp_rank, self.tp_size = dist.tp_rank(), dist.tp_size()
        super().__init__(dist.divide(in_features, self.tp_size, "input features"), out_features, bias)
        self.reduce_results = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self._mm(x, None)
        if not self.reduce_results:
            return y  # partial sum; bias-free by construction (fuse_all_reduce)
        y = dist.all_reduce(y)
        return y + self.bias if self.bias is not None else y

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if param.dim() == 1:  # bias: replicated
            _check_shape(param, param.shape, loaded, "row-parallel bias")
            param.data.copy_(loaded)
            return
        n = param.shape[1]
        _check_shape(param, (param.shape[0], n * self.tp_size), loaded, "row-parallel weight")
        param.data.copy_(loaded.narrow(1, self.tp_rank * n, n))

    def fp8_shard_blocks_aligned(self, block: tuple[int, int]) -> bool:
        return self.tp_size == 1 or self.in_features % block[1] == 0

    def _load_scale(self, param, loaded, shard_id, bo, bi) -> None:
        c = param.shape[1]
        _check_shape(param, (param.shape[0], -(-self.in_features * self.tp_size // bi)), loaded,
                     "row-parallel weight_scale_inv")
        param.data.copy_(loaded.narrow(1, self.tp_rank * c, c))


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs stacked in one GEMM (gate/up -> gate_up); shard ids are 0, 1, ..."""

    def __init__(self, in_features: int, output_sizes: list[int], bias: bool):
        self.output_sizes = output_sizes
        super().__init__(in_features, sum(output_sizes), bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if shard_id is None:
            raise ValueError("merged column weight needs a shard id (0, 1, ...)")
        local = [s // self.tp_size for s in self.output_sizes]
        offset, size = sum(local[:shard_id]), local[shard_id]
        _check_shape(param, (self.output_sizes[shard_id], *param.shape[1:]), loaded, f"shard {shard_id}")
        param.data.narrow(0, offset, size).copy_(loaded.narrow(0, self.tp_rank * size, size))

    def fp8_shard_blocks_aligned(self, block: tuple[int, int]) -> bool:
        # every shard but the last starts at a sum of earlier local sizes; the last may end in a partial block
        local = [s // self.tp_size for s in self.output_sizes]
        return all(n % block[0] == 0 for n in (local[:-1] if self.tp_size == 1 else local))

    def _load_scale(self, param, loaded, shard_id, bo, bi) -> None:
        if shard_id is None:
            raise ValueError("merged column weight_scale_inv needs a shard id (0, 1, ...)")
        local = [s // self.tp_size for s in self.output_sizes]
        offset, size = sum(local[:shard_id]) // bo, -(-local[shard_id] // bo)
        _check_shape(param, (-(-self.output_sizes[shard_id] // bo), *param.shape[1:]), loaded,
                     f"shard {shard_id} weight_scale_inv")
        param.data.narrow(0, offset, size).copy_(loaded.narrow(0, self.tp_rank * size, size))


class QKVParallelLinear(ColumnParallelLinear):
    """Fused Q/K/V projection; shard ids ``"q"``, ``"k"``, ``"v"``. KV heads are replicated when fewer than ranks.

    ``gated_query=True`` (Qwen3-Next / Qwen3.5 full attention): ``q_proj`` emits ``2 * head_dim`` rows per head, the
    query then its output gate (HF ``q_proj(x).view(..., -1, 2 * head_dim).chunk(2, -1)``); heads stay whole per rank.
    """

    def __init__(self, hidden_size: int, head_dim: int, num_heads: int, num_kv_heads: int, bias: bool,
                 gated_query: bool = False):
        world = dist.tp_size()
        self.head_dim = head_dim
        self.q_head_size = head_dim * (2 if gated_query else 1)
        self.total_num_heads, self.total_num_kv_heads = num_heads, num_kv_heads
        self.num_heads = dist.divide(num_heads, world, "num_attention_heads")
        self.num_kv_heads, self.kv_replicas = dist.kv_heads_per_rank(num_kv_heads, world)
        local_out = self.num_heads * self.q_head_size + 2 * self.num_kv_heads * head_dim
        super().__init__(hidden_size, local_out * world, bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        d = self.head_dim
        q, kv = self.num_heads * self.q_head_size, self.num_kv_heads * d
        if shard_id == "q":
            offset, size, start, total = 0, q, self.tp_rank * q, self.total_num_heads * self.q_head_size
        elif shard_id in ("k", "v"):
            head0 = dist.kv_head_offset(self.tp_rank, self.total_num_kv_heads, self.tp_size)
            offset = q if shard_id == "k" else q + kv
            size, start, total = kv, head0 * d, self.total_num_kv_heads * d
        else:
            raise ValueError(f"QKV weight needs shard id q, k or v, got {shard_id!r}")
        _check_shape(param, (total, *param.shape[1:]), loaded, f"{shard_id}_proj")
        param.data.narrow(0, offset, size).copy_(loaded.narrow(0, start, size))

    def _shard_rows(self, shard_id) -> tuple[int, int, int, int]:
        """(offset in this rank's weight, rows, first row in the checkpoint tensor, checkpoint rows) of a shard."""
        d = self.head_dim
        q, kv = self.num_heads * self.q_head_size, self.num_kv_heads * d
        if shard_id == "q":
            return 0, q, self.tp_rank * q, self.total_num_heads * self.q_head_size
        if shard_id in ("k", "v"):
            head0 = dist.kv_head_offset(self.tp_rank, self.total_num_kv_heads, self.tp_size)
            return (q if shard_id == "k" else q + kv), kv, head0 * d, self.total_num_kv_heads * d
        raise ValueError(f"QKV weight_scale_inv needs shard id q, k or v, got {shard_id!r}")

    def fp8_shard_blocks_aligned(self, block: tuple[int, int]) -> bool:
        offsets = [self._shard_rows(s) for s in ("q", "k", "v")]
        # every offset (in this rank's weight and in the checkpoint tensor) on a block boundary; v may end partial
        return all(o % block[0] == 0 and start % block[0] == 0 for o, _, start, _ in offsets) and \
            all(n % block[0] == 0 for _, n, _, _ in offsets[:2])

    def _load_scale(self, param, loaded, shard_id, bo, bi) -> None:
        offset, size, start, total = self._shard_rows(shard_id)
        _check_shape(param, (-(-total // bo), *param.shape[1:]), loaded, f"{shard_id}_proj weight_scale_inv")
        n = -(-size // bo)
        param.data.narrow(0, offset // bo, n).copy_(loaded.narrow(0, start // bo, n))
