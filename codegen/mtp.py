"""Spec vocabulary for a multi-token-prediction (MTP) draft head, and the draft module it generates.

A spec declares its checkpoint's MTP head in an ``mtp:`` section::

    mtp:
      style: deepseek                    # deepseek: model.layers.{num_hidden_layers}.{enorm,hnorm,eh_proj,shared_head}
                                         # qwen3_next: mtp.{fc,pre_fc_norm_embedding,pre_fc_norm_hidden,layers.N,norm}
      num_layers: num_nextn_predict_layers   # expression over config: MTP layers the checkpoint has (0: none)
      block: sparse                      # the block (from blocks:) of the MTP decoder layer

Both styles compute ``norm(block(proj([norm_e(embed(t[i+1])); norm_h(h[i])])))`` (transformers' ``MtpModel``, which maps
either layout onto ``enorm``/``hnorm``/``eh_proj``/``post_norm``); the norms are the spec's ``final_norm`` kind. The
package gets ``mtp.py`` (``templates/<target>/draft/mtp.py.j2``) with ``<Prefix>MTP``, the draft model the speculative
engine loads (``runtime/engine/speculative.py``). The section is inherited through ``extends`` like any other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from .spec_types import Expression, Identifier, Strict

DRAFT_TEMPLATE = "{target}/draft/mtp.py.j2"


class MTPSpec(Strict):
    """The checkpoint's multi-token-prediction head (speculative decoding's draft model)."""

    style: Literal["deepseek", "qwen3_next"] = Field(
        description="tensor layout: deepseek = model.layers.{num_hidden_layers}.{enorm,hnorm,eh_proj,shared_head.norm} "
                    "+ a decoder layer; qwen3_next = mtp.{fc,pre_fc_norm_embedding,pre_fc_norm_hidden,layers.N,norm}"
    )
    num_layers: Expression = Field(description="MTP layers the checkpoint has (config expression; 0 = none)")
    block: Identifier = Field(description="block (a key of blocks:) of the MTP decoder layer: full attention")


@dataclass(frozen=True)
class MTP:
    style: str
    num_layers: Any  # ir.Value over config
    block: str


# final_norm kinds an MTP head may use -> the RMSNorm flag that builds it (DeepSeek / GLM: plain; Qwen3-Next: 1 + w)
MTP_NORMS = {"rms": "", "zero_centred_rms": ", zero_centred=True"}


def lower_mtp(lowerer: Any, spec: MTPSpec | None) -> MTP | None:
    """The ``mtp:`` section checked against the spec: the block exists and is not a recurrent one, the final norm is
    an RMSNorm the draft's norms can copy."""
    if spec is None:
        return None
    kind = lowerer.spec.final_norm.kind
    if kind not in MTP_NORMS:
        lowerer.error(("mtp",), f"final_norm kind '{kind}': MTP heads are generated for {', '.join(MTP_NORMS)} only")
    blocks = lowerer.spec.blocks
    if spec.block not in blocks:
        lowerer.error(("mtp", "block"), f"no block named '{spec.block}'; blocks: {', '.join(blocks)}")
    elif getattr(blocks[spec.block].attention, "state_cache", None) is not None:
        lowerer.error(("mtp", "block"), f"block '{spec.block}' has a recurrent state; MTP layers are full attention")
    return MTP(style=spec.style, num_layers=lowerer.value(("mtp", "num_layers"), spec.num_layers), block=spec.block)


def render_mtp(ir: Any, target: str, env: Any, ctx: dict) -> tuple[str, str] | None:
    """(template name, text) of the package's ``mtp.py``, or None when the spec declares no MTP head."""
    mtp = getattr(ir, "mtp", None)
    if mtp is None or target == "vllm":  # vLLM runs MTP drafts through its own speculative-decoding models
        return None
    name = DRAFT_TEMPLATE.format(target=target)
    norm = ir.final_norm  # the MTP norms are of the model's final-norm kind (transformers' MtpModel: its norm class)
    ctor = f"RMSNorm(config.hidden_size, eps={norm.eps.py}{MTP_NORMS[norm.kind]})"
    text = env.get_template(name).render(**ctx, mtp=mtp, norm_ctor=ctor, norm_class="RMSNorm")
    return name, text
