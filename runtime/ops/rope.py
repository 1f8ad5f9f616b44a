"""Rotary position embeddings (Su et al. 2021) and the context-extension variants of HF ``modeling_rope_utils``.

``inv_freq`` follows HF exactly for rope_type default / linear / dynamic / llama3 / yarn, so a checkpoint's
``rope_scaling`` (v4) or ``rope_parameters`` (v5) gives the frequencies transformers would use. The cos/sin table is
precomputed in float32 for every position up to ``max_position`` and indexed by position ids, so the apply step is a
gather + elementwise ops (static shapes, traceable).

Dynamic NTK: HF rescales the base from the *current sequence length* once it exceeds the original context. A paged
engine has no single sequence length, so positions below ``max_position_embeddings`` use the unscaled frequencies (as
HF does for short sequences) and each position beyond uses the base HF would compute for a sequence ending there.

Layouts (``style``): ``rotate_half`` pairs element i with i + d/2 (HF Llama, Qwen, Mixtral);
``pairwise`` pairs 2i with 2i + 1 (GPT-J, Meta's original Llama code, llama.cpp).
"""
from __future__ import annotations

import math
from typing import Any

import torch


def _base_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def compute_inv_freq(
    rotary_dim: int, base: float, scaling: dict[str, Any] | None, max_position: int
) -> tuple[torch.Tensor, float]:
    """(inv_freq [rotary_dim / 2] float32, attention_factor applied to cos/sin) for HF's rope types."""
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type in ("default", "dynamic"):
        return _base_inv_freq(base, rotary_dim), 1.0
    factor = float(scaling["factor"]) if scaling.get("factor") is not None else None
    if rope_type == "linear":
        return _base_inv_freq(base, rotary_dim) / factor, 1.0
    if rope_type == "llama3":
        inv_freq = _base_inv_freq(base, rotary_dim)
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old_ctx = float(scaling["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    if rope_type == "yarn":
        original = scaling.get("original_max_position_embeddings") or max_position
        if factor is None:
            factor = max_position / original
        attention_factor = scaling.get("attention_factor")
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")

        def get_mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
            else:
                attention_factor = get_mscale(factor)
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1

        def correction_dim(rot: float) -> float:
            return (rotary_dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))

        lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
        if scaling.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, rotary_dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        pos_freqs = base ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        keep = 1 - ramp
        return interpolation * (1 - keep) + extrapolation * keep, float(attention_factor)
    raise ValueError(f"unsupported rope_type {rope_type!r} (supported: default, linear, dynamic, llama3, yarn)")


def cos_sin_cache(
    rotary_dim: int, base: float, scaling: dict[str, Any] | None, max_position: int, cache_len: int | None = None
) -> torch.Tensor:
    """float32 ``[cache_len, rotary_dim]``: cos in the first half, sin in the second (attention factor applied).

    The default length covers ``max_position``, extended by ``factor`` for dynamic NTK (which exists to run past it).
    """
    if cache_len is None:
        extend = (scaling or {}).get("rope_type") == "dynamic"
        cache_len = int(max_position * max(float(scaling.get("factor") or 1.0), 1.0)) if extend else max_position
    inv_freq, attention_factor = compute_inv_freq(rotary_dim, base, scaling, max_position)
    positions = torch.arange(cache_len, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    if (scaling or {}).get("rope_type") == "dynamic" and cache_len > max_position:
        factor = float(scaling["factor"])
        for start in range(max_position, cache_len, 256):  # per-position NTK base (see module docstring)
            pos = torch.arange(start, min(start + 256, cache_len))
            seq_len = (pos + 1).float()
            b = base * ((factor * seq_len / max_position) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
            exps = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
            freqs[start : start + len(pos)] = pos.float()[:, None] / (b[:, None] ** exps[None, :])
    return torch.cat([freqs.cos() * attention_factor, freqs.sin() * attention_factor], dim=-1)


def apply_rope(
    x: torch.Tensor, cos_sin: torch.Tensor, positions: torch.Tensor, rotary_dim: int, style: str
) -> torch.Tensor:
    """Rotate ``x [tokens, heads, head_dim]`` at ``positions [tokens]``; dims past ``rotary_dim`` pass through.

    Matches HF's precision: cos/sin are cast to ``x.dtype`` and the rotation is done in that dtype.
    """
    cs = cos_sin.index_select(0, positions.reshape(-1).long()).to(x.dtype)
    cos, sin = cs.chunk(2, dim=-1)  # [tokens, rotary_dim / 2]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if style == "rotate_half":
        cos = torch.cat([cos, cos], dim=-1)[:, None, :]
        sin = torch.cat([sin, sin], dim=-1)[:, None, :]
        x1, x2 = rot.chunk(2, dim=-1)
        rotated = rot * cos + torch.cat([-x2, x1], dim=-1) * sin
    elif style == "pairwise":
        cos = cos.repeat_interleave(2, dim=-1)[:, None, :]
        sin = sin.repeat_interleave(2, dim=-1)[:, None, :]
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = rot * cos + torch.stack([-x2, x1], dim=-1).flatten(-2) * sin
    else:
        raise ValueError(f"unknown rope style {style!r}")
    return torch.cat([rotated, rest], dim=-1) if rest.shape[-1] else rotated
