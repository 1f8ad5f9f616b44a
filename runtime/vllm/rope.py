"""The ``rope_parameters`` dict vLLM's ``get_rope`` takes, from the spec's RoPE fields.

vLLM reads the HF v5 ``rope_parameters`` layout: ``rope_type`` (default, linear, dynamic, yarn, llama3, ...), its
scaling fields, ``rope_theta``, and the rotated width as ``rope_dim`` (partial RoPE). The generated config already
normalised ``rope_scaling`` / ``rope_parameters`` into one dict with ``rope_type`` (None for plain RoPE:
``runtime/hf_config.read_rope_scaling``), so this only joins the pieces.
"""
from __future__ import annotations

from typing import Any, Mapping


def rope_parameters(theta: float, scaling: Mapping[str, Any] | None, rotary_dim: int) -> dict[str, Any]:
    """vLLM ``rope_parameters`` for base ``theta``, HF scaling dict ``scaling`` (None: none) rotating ``rotary_dim``."""
    params: dict[str, Any] = {"rope_type": "default"}
    if scaling:
        params.update(scaling)
    params["rope_theta"] = float(theta)
    params["rope_dim"] = int(rotary_dim)
    params.pop("partial_rotary_factor", None)  # rope_dim says it; vLLM would otherwise scale head_size again
    return params
