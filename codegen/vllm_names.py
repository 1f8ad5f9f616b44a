"""What the vllm target's templates construct: the vLLM layer (or modelgen's vLLM-side layer) for an IR fact.

vLLM's layer library has RMSNorm kinds but no LayerNorm that takes the residual the way its RMSNorms do
(``norm(x, residual) -> (normed, x + residual)``), so LayerNorm specs use modelgen's own torch ``LayerNorm``
(``runtime/layers/norm.py``), which does.
"""
from __future__ import annotations

from .ir import ModelIR, Norm

VLLM_LAYERNORM = "vllm.model_executor.layers.layernorm"
MODELGEN_NORMS = "modelgen.runtime.layers.norm"


def vllm_norm_class(norm: Norm) -> tuple[str, str]:
    """(module, class) of the norm layer the vllm target builds for ``norm``."""
    if norm.kind == "layer_norm":
        return MODELGEN_NORMS, "LayerNorm"
    if norm.kind == "zero_centred_rms":
        # x * (1 + w), HF Gemma / Qwen3-Next; vLLM's GemmaRMSNorm has no weightless form
        return VLLM_LAYERNORM, "GemmaRMSNorm"
    # rms and rms_float32 (OLMo 2: weight applied in float32): vLLM's RMSNorm reduces in float32 either way
    return VLLM_LAYERNORM, "RMSNorm"


def vllm_norm_module(norm: Norm, dim_py: str) -> str:
    """Constructor source of the vllm target's norm over ``dim_py`` features."""
    _, cls = vllm_norm_class(norm)
    if norm.kind == "layer_norm":
        bias = "" if norm.bias.always or not norm.affine else f", bias={norm.bias.py}"
        extra = "" if norm.affine else ", affine=False"
        return f"{cls}({dim_py}, eps={norm.eps.py}{bias}{extra})"
    if not norm.affine:
        return f"{cls}({dim_py}, eps={norm.eps.py}, has_weight=False)"
    return f"{cls}({dim_py}, eps={norm.eps.py})"


def _qk(qk) -> Norm:
    return qk.norm(qk.q_name)


def vllm_qk_norm(qk, dim_py: str) -> str:
    """Constructor source of a q or k norm (codegen/blocks/gqa.py ``QKNorm``) over ``dim_py`` features."""
    return vllm_norm_module(_qk(qk), dim_py)


def vllm_qk_norm_import(qk) -> str:
    """``from M import C`` of the class :func:`vllm_qk_norm` constructs."""
    return "from {} import {}".format(*vllm_norm_class(_qk(qk)))


def vllm_norm_imports(ir: ModelIR) -> str:
    """``from M import C`` lines of the norms the decoder layers and the final norm build."""
    norms = [n for b in ir.blocks for n, _ in b.norms()] + [ir.final_norm]
    return "\n".join(f"from {m} import {c}" for m, c in sorted({vllm_norm_class(n) for n in norms}))
