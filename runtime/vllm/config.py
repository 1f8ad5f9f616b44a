"""The generated config of a spec, from the config vLLM parsed (``vllm_config.model_config.hf_config``).

The same reader modelgen's engine uses (``<Model>Config.from_hf_config``) reads vLLM's transformers config, with
multimodal wrappers' ``text_config`` lifted as ``CheckpointDir`` lifts it, so the vllm target honours every field
the spec reads exactly as the other targets do.
"""
from __future__ import annotations

from typing import Any, TypeVar

from ..checkpoint_dir import flatten_text_config
from ..hf_config import ConfigError, as_dict

C = TypeVar("C")

# quant_method values the generated vllm models load: vLLM's quantized layers (built from the same
# quantization_config) own the format; load_weights routes their scale tensors by the checkpoint's names. FP8
# (DeepSeek-style block scales, ``*.weight_scale_inv``) runs on vLLM's CPU build in bf16 (tests/vllm/); anything else
# is refused here in one line rather than failing somewhere inside vLLM's loader.
SUPPORTED_QUANT_METHODS: frozenset[str] = frozenset({"fp8"})


def spec_config(config_class: type[C], vllm_config: Any) -> C:
    """``config_class`` (a generated ``<Model>Config``) read from the model vLLM is building."""
    raw = dict(as_dict(vllm_config.model_config.hf_config))
    quant = raw.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method") not in SUPPORTED_QUANT_METHODS:
        # MXFP4 (GPT-OSS): vLLM's CPU build runs it for its own GptOssForCausalLM, whose loader hands vLLM's MXFP4
        # MoE method whole pre-sharded block tensors; the generated tables do not route *_blocks / *_scales yet.
        raise ConfigError(
            f"{vllm_config.model_config.model}: quantization_config.quant_method {quant.get('quant_method')!r} is not "
            f"supported by modelgen's vllm target (supported: {', '.join(sorted(SUPPORTED_QUANT_METHODS))}); "
            "dequantize the checkpoint, or serve it with vLLM's own model (MODELGEN_VLLM_MODELS=missing)"
        )
    return config_class.from_hf_config(flatten_text_config(raw))
