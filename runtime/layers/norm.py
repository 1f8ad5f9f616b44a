"""Norm modules whose forward optionally fuses the residual add (``(x, residual) -> (normed, new_residual)``).

On a GPU (Triton importable, ``MODELGEN_BACKEND`` not ``torch``) the plain and zero-centred affine RMSNorms are one
Triton kernel each (``runtime/ops/gpu/norm.py``); the other variants (float32 weight product, non-affine, LayerNorm)
run the torch references of ``runtime/ops/norm.py`` on every device.

``zero_centred=True`` is the ``x_hat * (1 + w)`` norm of Qwen3-Next / Gemma, whose checkpoint weight is the offset from
one (HF initialises it to zeros); ``weight_float32=True`` the ``(w * x_hat).to(dtype)`` of OLMo 2; ``affine=False`` a
norm without a learned weight.
"""
from __future__ import annotations

import torch
from torch import nn

from .. import distributed as dist
from ..ops import gpu
from ..ops import norm as torch_norm
from .all_reduce_norm import all_reduce_add_rms_norm


class RMSNorm(nn.Module):
    def __init__(
        self, hidden_size: int, eps: float, zero_centred: bool = False, weight_float32: bool = False,
        affine: bool = True,
    ):
        super().__init__()
        self.eps = eps
        self.zero_centred = zero_centred
        self.weight_float32 = weight_float32
        # True when the input is a row-parallel partial sum this norm reduces (fuse_all_reduce); False: already whole
        self.reduce_input = False
        self._reduced_for: tuple = ()  # the linear whose reduction moved here (a tuple: not a submodule)
        if affine:
            init = torch.zeros(hidden_size) if zero_centred else torch.ones(hidden_size)
            self.weight = nn.Parameter(init, requires_grad=False)
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if self.reduce_input and _defers(self._reduced_for):
            if residual is None:
                return self._plain(dist.all_reduce(x))
            return all_reduce_add_rms_norm(x, residual, self.weight, self.eps, self.zero_centred, self.weight_float32)
        return self._plain(x, residual)

    def _plain(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        ops = torch_norm
        if gpu.enabled(x) and self.weight is not None and not self.weight_float32:
            from ..ops.gpu import norm as gpu_norm

            if residual is None:
                return gpu_norm.rms_norm(x, self.weight, self.eps, self.zero_centred)
            return gpu_norm.add_rms_norm(x, residual, self.weight, self.eps, self.zero_centred)
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps, self.zero_centred, self.weight_float32)
        return ops.add_rms_norm(x, residual, self.weight, self.eps, self.zero_centred, self.weight_float32)


def fuse_all_reduce(linear: nn.Module, norm: nn.Module) -> bool:
    """Under tensor parallelism, move ``linear``'s all-reduce into ``norm`` (ATOM's fused all-reduce + RMSNorm): the
    row-parallel layer returns its partial sum and the norm that adds it to the residual reduces it in the same op
    (:func:`~modelgen.runtime.layers.all_reduce_norm.all_reduce_add_rms_norm`). The caller guarantees
    ``norm(linear(...), residual)`` is the only use of the output. Done only where the result is the same sum: a
    bias-free RowParallelLinear and an RMSNorm with a weight; otherwise (and at world size 1) nothing changes. Returns
    whether it fused."""
    from .linear import RowParallelLinear

    if dist.tp_size() == 1 or not isinstance(linear, RowParallelLinear) or linear.bias is not None:
        return False
    if not isinstance(norm, RMSNorm) or norm.weight is None:
        return False
    linear.reduce_results, norm.reduce_input, norm._reduced_for = False, True, (linear,)
    return True


def _defers(partner: tuple) -> bool:
    """Whether the paired linear still hands its partial sum over: not when a parallel mode has since replaced its
    forward on the instance (sequence parallelism's reduce-scatter, ``runtime/parallel/sequence.py``), which then
    returns reduced rows itself."""
    return bool(partner) and not partner[0].reduce_results and "forward" not in vars(partner[0])


class LayerNorm(nn.Module):
    """``nn.LayerNorm`` over the last dimension (StableLM, GPT-NeoX), with the residual-add form of :class:`RMSNorm`."""

    def __init__(self, hidden_size: int, eps: float, bias: bool = True, affine: bool = True):
        super().__init__()
        self.eps = eps
        if affine:
            self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.bias = nn.Parameter(torch.zeros(hidden_size), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return torch_norm.layer_norm(x, self.weight, self.bias, self.eps)
        return torch_norm.add_layer_norm(x, residual, self.weight, self.bias, self.eps)


class PerHeadNorm(nn.Module):
    """A norm per head, each with its own weights (StableLM ``q_layernorm.norms.{h}``), over ``[tokens, heads, D]``:
    head ``h`` goes through ``norms[h]``, as HF's ``StableLmLayerNormPerHead`` splits the heads and concatenates."""

    def __init__(self, norms: list[nn.Module]):
        super().__init__()
        self.norms = nn.ModuleList(norms)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([norm(x[:, h]) for h, norm in enumerate(self.norms)], dim=1)


class ShardedProjectionRMSNorm(nn.Module):
    """RMSNorm over a whole q or k projection (OLMo 2 ``q_norm [heads * head_dim]``) whose heads are split across
    tensor-parallel ranks: each rank holds the weight slice of its heads, and the variance is the mean over every head
    (local sums of squares all-reduced; a KV head replicated on several ranks is counted once).

    At TP=1 it is exactly :func:`~modelgen.runtime.ops.norm.rms_norm` (HF's ``mean``). ``weight_loader`` (rocm) takes
    the full checkpoint vector; the neuron template sets its own closure loader on ``weight``.
    """

    def __init__(self, num_heads: int, head_dim: int, eps: float, kv: bool = False, zero_centred: bool = False,
                 weight_float32: bool = False):
        super().__init__()
        world = dist.tp_size()
        self.num_heads, self.head_dim, self.kv = num_heads, head_dim, kv
        if kv:
            local, self.replicas = dist.kv_heads_per_rank(num_heads, world)
        else:
            local, self.replicas = dist.divide(num_heads, world, "num_attention_heads"), 1
        self.eps, self.zero_centred, self.weight_float32 = eps, zero_centred, weight_float32
        self.width, self.size = num_heads * head_dim, local * head_dim
        init = torch.zeros(self.size) if zero_centred else torch.ones(self.size)
        self.weight = nn.Parameter(init, requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def start(self, rank: int) -> int:
        """Offset of ``rank``'s heads in the full vector (as QKVParallelLinear shards q and k)."""
        if self.kv:
            return dist.kv_head_offset(rank, self.num_heads, dist.tp_size()) * self.head_dim
        return rank * self.size

    def _check(self, shape: tuple[int, ...]) -> None:
        if tuple(shape) != (self.width,):
            raise ValueError(f"checkpoint tensor has shape {tuple(shape)}, expected ({self.width},)")

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        """rocm: the full checkpoint vector -> this rank's slice."""
        self._check(loaded.shape)
        param.data.copy_(loaded.narrow(0, self.start(dist.tp_rank()), self.size))

    def neuron_loader(self):
        """neuron: a closure loader reading only ``rank``'s slice of the checkpoint vector."""
        from ..neuron.weight_loader import SafetensorsWeightLoader

        def transform(slices, rank: int) -> torch.Tensor:
            self._check(slices[0].get_shape())
            start = self.start(rank)
            return slices[0][start:start + self.size]

        return SafetensorsWeightLoader(transform)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if dist.tp_size() == 1:
            return torch_norm.rms_norm(x, self.weight, self.eps, self.zero_centred, self.weight_float32)
        h = x.float()
        sum_sq = dist.all_reduce(h.pow(2).sum(-1, keepdim=True)) / self.replicas
        h = h * torch.rsqrt(sum_sq / self.width + self.eps)
        return torch_norm.apply_rms_weight(h, self.weight, x.dtype, self.zero_centred, self.weight_float32)


class StackedHeadLayerNorm(nn.Module):
    """A LayerNorm over head_dim per head whose weights are one tensor ``[heads, head_dim]`` (Command R+'s
    ``CohereLayerNorm((heads, head_dim))``: mean-subtracted, no bias, computed in float32), over ``[tokens, heads, D]``.

    Under tensor parallelism each rank holds the rows of its own heads (as QKVParallelLinear shards q and k; a KV head
    replicated on several ranks is held by each). ``rank`` / ``world`` default to modelgen's tensor-parallel group (the
    vllm target passes vLLM's). ``weight_loader`` (rocm, vllm) takes the full checkpoint tensor; the neuron template
    sets :meth:`neuron_loader` on ``weight``.
    """

    def __init__(self, num_heads: int, head_dim: int, eps: float, kv: bool = False, rank: int | None = None,
                 world: int | None = None):
        super().__init__()
        self.world = dist.tp_size() if world is None else world
        self.rank = dist.tp_rank() if rank is None else rank
        self.num_heads, self.head_dim, self.kv, self.eps = num_heads, head_dim, kv, eps
        if kv:
            self.local, _ = dist.kv_heads_per_rank(num_heads, self.world)
        else:
            self.local = dist.divide(num_heads, self.world, "num_attention_heads")
        self.weight = nn.Parameter(torch.ones(self.local, head_dim), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def start(self, rank: int) -> int:
        """First head (row of the checkpoint tensor) held by ``rank``."""
        if self.kv:
            return dist.kv_head_offset(rank, self.num_heads, self.world)
        return rank * self.local

    def _check(self, shape: tuple[int, ...]) -> None:
        if tuple(shape) != (self.num_heads, self.head_dim):
            raise ValueError(f"checkpoint tensor has shape {tuple(shape)}, expected ({self.num_heads}, {self.head_dim})")

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        """The full ``[heads, head_dim]`` checkpoint tensor -> this rank's rows."""
        self._check(loaded.shape)
        param.data.copy_(loaded.narrow(0, self.start(self.rank), self.local))

    def neuron_loader(self):
        """neuron: a closure loader reading only ``rank``'s rows of the checkpoint tensor."""
        from ..neuron.weight_loader import SafetensorsWeightLoader

        def transform(slices, rank: int) -> torch.Tensor:
            self._check(slices[0].get_shape())
            start = self.start(rank)
            return slices[0][start:start + self.local]

        return SafetensorsWeightLoader(transform)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h - h.mean(-1, keepdim=True)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * h).to(x.dtype)
