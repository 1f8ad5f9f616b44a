"""Mixture-of-experts: top-k routing and the fused expert MLP, with plain-torch references.

Weight layouts (the same as transformers 5.x keeps in memory and as aiter's ``fused_moe`` expects)::

    w13 [E, 2I, H]   rows [0, I) are the gate projection, rows [I, 2I) the up projection of each expert
                     (= torch.cat([gate_proj.weight, up_proj.weight], dim=0) per expert; HF: ``experts.gate_up_proj``)
    w2  [E, H, I]    the down projection of each expert (HF: ``experts.down_proj``)

    expert e:  y = w2[e] @ (act(w13[e, :I] @ x) * (w13[e, I:] @ x))
    output:    out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(hidden[t])

Both are ``nn.Linear``-style ``[out_features, in_features]`` matrices, so ``F.linear(x, w13[e])`` gives
``[gate | up]``. Checkpoints store one matrix per expert (Mixtral ``experts.{e}.w1/w3/w2``, Qwen3/GLM/DeepSeek
``experts.{e}.gate_proj/up_proj/down_proj``); ``runtime/loader/experts.py`` stacks them into these tensors.

Routers mirror transformers 5.x exactly (order of operations and dtype casts):

* Mixtral ``MixtralTopKRouter``: ``softmax(logits.float())`` -> ``topk`` (sorted) -> always ``/= sum`` (no epsilon);
  weights stay float32.  ``route(..., scoring="softmax", renormalize=True)``.
* Qwen3-MoE ``Qwen3MoeTopKRouter``: ``softmax(logits, dtype=float)`` -> ``topk`` -> ``/= sum`` only when
  ``norm_topk_prob`` -> **cast to the logits dtype** (the model dtype). ``route`` returns float32; for bf16 parity
  the caller passes ``topk_weights.to(hidden.dtype)`` to ``fused_moe`` (Mixtral and GLM/DeepSeek do not cast).
* GLM4-MoE ``Glm4MoeTopkRouter`` / DeepSeek-V3 ``DeepseekV3TopkRouter``: logits computed in float32
  (``F.linear(hidden.float(), weight.float())`` -- the caller must do this), ``scores = sigmoid(logits)``; the
  ``e_score_correction_bias`` is added for *selection only*; group score = sum of the top-2 biased scores in each of
  ``n_group`` groups, keep ``topk_group`` groups (``topk(sorted=False)``), mask the others with -inf, pick
  ``topk(sorted=False)`` experts; weights = the *unbiased* scores of those experts, ``/ (sum + 1e-20)`` when
  ``norm_topk_prob``, then ``* routed_scaling_factor``; float32.
* Llama 4 ``Llama4Router``: ``topk`` over the raw logits, each selected expert's weight the sigmoid of its own logit
  (``sigmoid(x.float()).to(x.dtype)``; the others 0), never renormalised: ``scoring="topk_sigmoid"``. Its weight
  multiplies the expert's *input* (``Llama4TextMoe``: ``routed_in = x * score``): ``fused_moe(weight_on_input=True)``.
* DBRX ``DbrxFFN.route_tokens_to_experts``: softmax, top-k, the k weights divided by their ``p``-norm
  (``moe_normalize_expert_weights``; ``p = 1`` is the sum): ``route(..., renormalize=True, renormalize_p=p)``.
* DeepSeek-V2 ``DeepseekV2TopkRouter`` with ``topk_method="group_limited_greedy"``: float32 logits, softmax scores,
  group score = the *maximum* score in each group (``group_score="max"``), keep ``topk_group`` groups, zero the other
  groups' scores, top-k of what is left; weights = those scores (never renormalised) ``* routed_scaling_factor``.
  ``topk_method="greedy"`` is the plain softmax path without groups.

Expert combine mirrors HF's eager ``*Experts.forward``: each expert's output is computed in the model dtype, multiplied
by its routing weight (ordinary type promotion: a float32 weight makes the product float32, which HF then rounds),
cast to the hidden dtype and ``index_add_``-ed into a hidden-dtype accumulator, experts in ascending id order.
(A full HF model loaded with ``from_pretrained``/``from_config`` defaults to ``experts_implementation="grouped_mm"``,
which instead sums the k weighted products in the product dtype and casts once: pass ``accumulate="sum"`` to
mirror that path. In float32 both agree to rounding.)

Backends: ``backend="aiter"`` (ROCm, bf16/fp16 tensors on the GPU) routes ``route`` to ``aiter.topk_softmax`` /
``aiter.biased_grouped_topk`` and ``fused_moe`` to ``aiter.fused_moe.fused_moe`` (signatures as in ROCm/aiter's
``aiter/ops/moe_op.py``, ``aiter/ops/topk.py`` and ``aiter/fused_moe.py``); every other case, including any option aiter
does not cover, runs the torch reference below. aiter is imported lazily, only on that branch, and has not been
exercised in this repository's CPU tests.

Non-gated experts (``gated=False``, Nemotron-H ``NemotronHExperts``: ``down(act(up(x)))``): ``w13 [E, I, H]`` holds
the up projection alone and ``activation`` is an elementwise one of ``runtime/layers/mlp.py`` (``relu2``).

``fused_moe_static`` is the shape-static variant for traced graphs (neuron target, ``torch.compile(fullgraph=True)``):
it runs every local expert densely on all tokens and combines with a dense ``[T, E_local]`` weight matrix.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...ops.activation import gated_activation
from ..mlp import ACTIVATIONS as UNGATED_ACTIVATIONS

__all__ = ["route", "fused_moe", "fused_moe_static", "stacked_from_fused", "experts_from_flat"]


# ------------------------------------------------------------------------------------------------------------ router
SCORINGS = ("softmax", "sigmoid", "topk_softmax", "topk_sigmoid")


def route(
    router_logits: torch.Tensor,
    top_k: int,
    *,
    scoring: str = "softmax",
    renormalize: bool,
    n_group: int | None = None,
    topk_group: int | None = None,
    e_score_correction_bias: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0,
    group_score: str = "top2_sum",
    backend: str = "torch",
    renormalize_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``router_logits [T, E]`` -> ``(topk_weights [T, k] float32, topk_ids [T, k] int64)``.

    ``scoring="softmax"``: Mixtral (``renormalize=True``) and Qwen3-MoE (``renormalize=norm_topk_prob``).
    ``scoring="sigmoid"``: GLM4-MoE / DeepSeek-V3 (``n_group``, ``topk_group``, ``e_score_correction_bias``,
    ``renormalize=norm_topk_prob``, ``routed_scaling_factor``). Group-limited selection runs when ``n_group > 1``
    (with ``n_group`` 1 or None the group mask keeps every expert, so the result is the same as HF's).
    ``group_score``: how a group is ranked, ``"top2_sum"`` (DeepSeek-V3 / GLM4-MoE ``noaux_tc``: the sum of its two
    best selection scores) or ``"max"`` (DeepSeek-V2 ``group_limited_greedy``: its best score); grouping applies to
    ``scoring="softmax"`` too (V2), where the experts outside the kept groups are never picked.
    The ids of the sigmoid router come in ``topk(sorted=False)`` order, as HF's do; compare them as sets.
    ``scoring="topk_softmax"``: GPT-OSS (``GptOssTopKRouter``): top-k over the raw logits, then a softmax over the k
    selected logits in their own dtype (so the weights always sum to 1; ``renormalize`` changes nothing).
    ``scoring="topk_sigmoid"``: Llama 4 (``Llama4Router``): top-k over the raw logits, each weight the sigmoid of its
    own logit in float32 rounded to the logits' dtype (``renormalize`` changes nothing).
    ``renormalize_p``: with ``renormalize`` and softmax scoring, the weights are divided by their p-norm
    (``torch.norm(p=...)``, DBRX) instead of their sum (p = 1).
    """
    if router_logits.dim() != 2:
        raise ValueError(f"route: router_logits must be [tokens, experts], got {tuple(router_logits.shape)}")
    if scoring not in SCORINGS:
        raise ValueError(f"route: scoring must be one of {SCORINGS}, got {scoring!r}")
    if renormalize_p != 1.0 and scoring != "softmax":
        raise ValueError(f"route: renormalize_p={renormalize_p} (a p-norm) is defined for scoring 'softmax' only")
    num_experts = router_logits.shape[-1]
    grouped = n_group is not None and n_group > 1
    if grouped:
        if topk_group is None:
            raise ValueError("route: n_group > 1 needs topk_group")
        if num_experts % n_group:
            raise ValueError(f"route: {num_experts} experts do not split into n_group={n_group} groups")
        if scoring in ("topk_softmax", "topk_sigmoid"):
            raise NotImplementedError(f"route: group-limited selection is not defined for scoring={scoring!r}")
    if group_score not in ("top2_sum", "max"):
        raise ValueError(f"route: group_score must be 'top2_sum' or 'max', got {group_score!r}")

    if backend == "aiter" and router_logits.is_cuda and scoring in ("softmax", "sigmoid") and renormalize_p == 1.0:
        out = _aiter_route(
            router_logits, top_k, scoring, renormalize, n_group, topk_group, e_score_correction_bias,
            routed_scaling_factor, group_score,
        )
        if out is not None:
            return out

    if scoring == "topk_softmax":
        values, ids = torch.topk(router_logits, top_k, dim=-1)
        weights = torch.softmax(values, dim=-1, dtype=values.dtype).float()
        if routed_scaling_factor != 1.0:
            weights = weights * routed_scaling_factor
        return weights, ids

    if scoring == "topk_sigmoid":  # Llama4Router: sigmoid of the selected logits, in float32, rounded to their dtype
        values, ids = torch.topk(router_logits, top_k, dim=-1)
        weights = torch.sigmoid(values.float()).to(values.dtype).float()
        if routed_scaling_factor != 1.0:
            weights = weights * routed_scaling_factor
        return weights, ids

    if scoring == "softmax":
        probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
        if grouped:  # DeepSeek-V2 group_limited_greedy: other groups' scores are zeroed (HF masked_fill 0.0)
            probs = probs.masked_fill(~_group_mask(probs, n_group, topk_group, group_score), 0.0)
        weights, ids = torch.topk(probs, top_k, dim=-1)
        if renormalize and renormalize_p != 1.0:  # DBRX: divided by the p-norm of the k weights
            weights = weights / torch.norm(weights, p=renormalize_p, dim=-1, keepdim=True)
        elif renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if routed_scaling_factor != 1.0:
            weights = weights * routed_scaling_factor
        return weights, ids

    scores = router_logits.float().sigmoid()
    choice = scores if e_score_correction_bias is None else scores + e_score_correction_bias.float()
    if grouped:
        choice = choice.masked_fill(~_group_mask(choice, n_group, topk_group, group_score), float("-inf"))
    ids = torch.topk(choice, k=top_k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    weights = weights * routed_scaling_factor
    return weights, ids


def _group_mask(scores: torch.Tensor, n_group: int, topk_group: int, group_score: str) -> torch.Tensor:
    """``[T, E]`` bool: experts of the ``topk_group`` best groups per token, groups ranked by ``group_score``."""
    num_experts = scores.shape[-1]
    per_group = num_experts // n_group
    grouped = scores.view(-1, n_group, per_group)
    if group_score == "max":  # DeepSeek-V2 group_limited_greedy
        group_scores = grouped.max(dim=-1).values
    else:  # DeepSeek-V3 / GLM4-MoE noaux_tc: sum of the two best
        group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    return group_mask.unsqueeze(-1).expand(-1, n_group, per_group).reshape(-1, num_experts).bool()


# -------------------------------------------------------------------------------------------------------- fused MoE
def _local_ids(topk_ids: torch.Tensor, expert_offset: int, num_local: int, ep: bool) -> torch.Tensor:
    """Global ids -> local ids in [0, num_local); ids this rank does not hold become the sentinel ``num_local``."""
    if not ep:
        return topk_ids
    local = topk_ids - expert_offset
    return torch.where((local >= 0) & (local < num_local), local, torch.full_like(local, num_local))


def expert_activation(activation: str | Callable, params: dict[str, float] | None = None,
                      gated: bool = True) -> Callable:
    """The experts' activation: a gated one on ``[..., 2I]`` (``runtime/ops/activation.py``), or with
    ``gated=False`` an elementwise one on ``[..., I]`` (``runtime/layers/mlp.py``: relu2, gelu, gelu_tanh)."""
    if gated or callable(activation):
        return gated_activation(activation, params)
    if activation not in UNGATED_ACTIVATIONS:
        raise ValueError(f"non-gated expert activation {activation!r} not in {sorted(UNGATED_ACTIVATIONS)}")
    return UNGATED_ACTIVATIONS[activation]


def _check(hidden, w13, w2, topk_weights, topk_ids, activation, expert_offset, num_local_experts, w13_bias, w2_bias,
           gated=True):
    try:
        expert_activation(activation, gated=gated)
    except ValueError as e:
        raise ValueError(f"fused_moe: {e}") from None
    if hidden.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise ValueError(
            f"fused_moe: expected hidden [T, H], w13 [E, 2I, H], w2 [E, H, I]; got {tuple(hidden.shape)}, "
            f"{tuple(w13.shape)}, {tuple(w2.shape)}"
        )
    E, two_i, H = w13.shape
    if not gated:  # w13 is the up projection alone, [E, I, H]
        two_i *= 2
    if hidden.shape[1] != H or w2.shape != (E, H, two_i // 2) or two_i % 2:
        raise ValueError(
            f"fused_moe: shape mismatch hidden {tuple(hidden.shape)}, w13 {tuple(w13.shape)}, w2 {tuple(w2.shape)}"
        )
    if topk_ids.shape != topk_weights.shape or topk_ids.shape[0] != hidden.shape[0]:
        raise ValueError(
            f"fused_moe: topk_ids {tuple(topk_ids.shape)} / topk_weights {tuple(topk_weights.shape)} do not match "
            f"{hidden.shape[0]} tokens"
        )
    if (w13_bias is not None and tuple(w13_bias.shape) != (E, two_i)) or (
            w2_bias is not None and tuple(w2_bias.shape) != (E, H)):
        raise ValueError(
            f"fused_moe: expert biases must be w13_bias [E, 2I] = {(E, two_i)} and w2_bias [E, H] = {(E, H)}; got "
            f"{None if w13_bias is None else tuple(w13_bias.shape)}, {None if w2_bias is None else tuple(w2_bias.shape)}"
        )
    num_local = E if num_local_experts is None else num_local_experts
    if num_local > E:
        raise ValueError(f"fused_moe: num_local_experts={num_local} but w13 holds {E} experts")
    ep = expert_offset != 0 or num_local_experts is not None
    return num_local, ep


def fused_moe(
    hidden: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str | Callable = "silu",
    *,
    expert_offset: int = 0,
    num_local_experts: int | None = None,
    accumulate: str = "index_add",
    backend: str = "torch",
    global_num_experts: int | None = None,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    weight_on_input: bool = False,
    gated: bool = True,
) -> torch.Tensor:
    """``sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(hidden[t])`` -> ``[T, H]`` in ``hidden.dtype``.

    Torch path: the ``T * k`` (token, slot) pairs are sorted by expert (``argsort``), counted (``bincount``), and a
    Python loop visits only the experts that received tokens, running one gate/up matmul and one down matmul on each
    contiguous slice; the weighted results are ``index_add_``-ed into the output (``accumulate="index_add"``, HF
    eager numerics) or summed over the k slots per token (``accumulate="sum"``, HF ``grouped_mm`` numerics).

    Expert parallelism: this rank holds global experts ``[expert_offset, expert_offset + num_local_experts)`` as
    ``w13[0:L]``/``w2[0:L]`` and returns only their contribution (other ids are skipped); the caller all-reduces.
    ``global_num_experts`` is only needed by the aiter branch under expert parallelism (its expert mask is global).
    ``activation``: a name of ``runtime/ops/activation.py`` or a callable (a parametric one bound with its parameters).
    ``w13_bias [E, 2I]`` / ``w2_bias [E, H]`` (GPT-OSS): added to each expert's gate-up / down output, the down bias
    before the routing weight (as ``GptOssExperts``: ``(g @ down + b) * weight``).
    ``weight_on_input``: ``sum_j expert_{topk_ids[t, j]}(topk_weights[t, j] * hidden[t])`` instead (Llama 4: the
    weight, rounded to the hidden dtype, scales the expert's input; the outputs are summed unweighted).
    ``gated=False``: non-gated experts, ``w13 [E, I, H]`` the up projection (Nemotron-H).
    """
    num_local, ep = _check(hidden, w13, w2, topk_weights, topk_ids, activation, expert_offset, num_local_experts,
                           w13_bias, w2_bias, gated)
    if accumulate not in ("index_add", "sum"):
        raise ValueError(f"fused_moe: accumulate must be 'index_add' or 'sum', got {accumulate!r}")

    if (backend == "aiter" and hidden.is_cuda and isinstance(activation, str) and w13_bias is None and w2_bias is None
            and not weight_on_input and gated):
        out = _aiter_fused_moe(
            hidden, w13, w2, topk_weights, topk_ids, activation, expert_offset, num_local, ep, global_num_experts
        )
        if out is not None:
            return out

    T, H = hidden.shape
    k = topk_ids.shape[1]
    act = expert_activation(activation, gated=gated)
    flat_local = _local_ids(topk_ids, expert_offset, num_local, ep).reshape(-1)
    order = torch.argsort(flat_local, stable=True)  # pairs grouped by expert, ascending; sentinel (EP) last
    counts = torch.bincount(flat_local, minlength=num_local + 1)[:num_local].tolist()  # the one host sync
    token_of = order // k
    weight_of = topk_weights.reshape(-1)[order]

    if accumulate == "index_add":
        out = torch.zeros_like(hidden)
    else:
        rows = torch.zeros(T * k, H, dtype=torch.promote_types(hidden.dtype, topk_weights.dtype), device=hidden.device)
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        end = start + n
        tokens = token_of[start:end]
        b13, b2 = (None if w13_bias is None else w13_bias[e]), (None if w2_bias is None else w2_bias[e])
        x = hidden[tokens]
        if weight_on_input:  # Llama4TextMoe: routed_in = x * score, in the hidden dtype
            x = x * weight_of[start:end, None].to(x.dtype)
        y = F.linear(act(F.linear(x, w13[e], b13)), w2[e], b2)
        if not weight_on_input:
            y = y * weight_of[start:end, None]
        if accumulate == "index_add":
            out.index_add_(0, tokens, y.to(out.dtype))
        else:
            rows[order[start:end]] = y.to(rows.dtype)
        start = end
    if accumulate == "index_add":
        return out
    return rows.view(T, k, H).sum(dim=1).to(hidden.dtype)


def fused_moe_static(
    hidden: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str | Callable = "silu",
    *,
    expert_offset: int = 0,
    num_local_experts: int | None = None,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    weight_on_input: bool = False,
    gated: bool = True,
) -> torch.Tensor:
    """Shape-static ``fused_moe`` for traced graphs: no ``.item()``, ``nonzero`` or boolean indexing.

    Every local expert runs on every token (batched matmuls ``[L, T, 2I]`` and ``[L, T, H]``, so cost and memory grow
    with ``L * T``: meant for decode-sized T or small expert counts); a dense combine matrix ``[T, L]`` built by
    ``scatter_add`` (ids outside this rank's range land in a dropped sentinel column) weights and sums them.
    Products are formed with HF's promotion (``expert_out * weight``) and summed over experts in that dtype.
    ``weight_on_input``: each expert's input is the hidden states times its combine column (Llama 4), its output is
    kept only for the tokens routed to it (a dense 0/1 mask, so experts with biases add nothing elsewhere).
    ``gated=False``: non-gated experts (``w13 [E, I, H]`` the up projection).
    """
    num_local, ep = _check(hidden, w13, w2, topk_weights, topk_ids, activation, expert_offset, num_local_experts,
                           w13_bias, w2_bias, gated)
    T = hidden.shape[0]
    local = _local_ids(topk_ids, expert_offset, num_local, True)
    combine = torch.zeros(T, num_local + 1, dtype=topk_weights.dtype, device=hidden.device)
    combine = combine.scatter_add(1, local, topk_weights)[:, :num_local]  # [T, L]
    w13_local, w2_local = w13[:num_local], w2[:num_local]
    x = hidden.unsqueeze(0)
    if weight_on_input:  # [L, T, H]: each expert sees the tokens scaled by their weight for it (0 if not routed)
        x = x * combine.t().unsqueeze(-1).to(hidden.dtype)
    gate_up = torch.matmul(x, w13_local.transpose(1, 2))  # [L, T, 2I]
    if w13_bias is not None:
        gate_up = gate_up + w13_bias[:num_local, None, :]
    y = torch.matmul(expert_activation(activation, gated=gated)(gate_up), w2_local.transpose(1, 2))  # [L, T, H]
    if w2_bias is not None:
        y = y + w2_bias[:num_local, None, :]
    if weight_on_input:
        routed = torch.zeros(T, num_local + 1, dtype=y.dtype, device=hidden.device)
        routed = routed.scatter_add(1, local, torch.ones_like(topk_weights, dtype=y.dtype))[:, :num_local]
        y = y * routed.t().unsqueeze(-1)
    else:
        y = y * combine.t().unsqueeze(-1)
    return y.sum(dim=0).to(hidden.dtype)


# ----------------------------------------------------------------------------------------------- checkpoint layouts
EXPERT_LAYOUTS = ("stacked", "interleaved_transposed", "flat", "transposed")


def experts_from_flat(tensor: torch.Tensor, part: str, num_experts: int) -> torch.Tensor:
    """One DBRX-style flat expert tensor (``DbrxExpertGLU`` ``w1`` / ``v1`` / ``w2``, each ``[E * I, H]``: expert e's
    rows ``e*I .. (e+1)*I``) -> ``[E, I, H]`` for ``part`` w1 (gate, used as ``x @ w1_e.T``) / w3 (up, ``v1``), or
    ``[E, H, I]`` for w2 (down, stored transposed: used as ``h @ w2_e``). ValueError naming the shape otherwise."""
    if tensor.dim() != 2 or tensor.shape[0] % num_experts:
        raise ValueError(f"flat experts ({part}): checkpoint tensor has shape {tuple(tensor.shape)}, expected "
                         f"[{num_experts} * intermediate, hidden]")
    per_expert = tensor.unflatten(0, (num_experts, -1))
    return per_expert.transpose(1, 2) if part == "w2" else per_expert


def stacked_from_fused(tensor: torch.Tensor, part: str, layout: str) -> torch.Tensor:
    """A fused all-experts checkpoint tensor -> the stacked layout of ``fused_moe`` (gate rows, then up rows).

    ``part``: ``w13`` / ``w2`` (weights) or ``w13_bias`` / ``w2_bias``. ``layout="stacked"``: transformers v5's MoE
    layout, already ``w13 [E, 2I, H]``, ``w2 [E, H, I]``: returned as is. ``layout="interleaved_transposed"``: GPT-OSS
    (``GptOssExperts``, used as ``x @ W``): ``gate_up_proj [E, H, 2I]`` with gate/up interleaved on the last dim
    (``[..., ::2]`` gate, ``[..., 1::2]`` up), ``gate_up_proj_bias [E, 2I]`` interleaved alike, ``down_proj [E, I, H]``,
    ``down_proj_bias [E, H]``. ``layout="transposed"``: Llama 4 (``Llama4TextExperts``, used as ``x @ W``):
    ``gate_up_proj [E, H, 2I]`` (gate columns, then up columns: ``chunk(2, dim=-1)``), ``down_proj [E, I, H]``.
    """
    if layout == "stacked" or part == "w2_bias":
        return tensor
    if layout == "transposed":
        if part not in ("w13", "w2"):
            raise ValueError(f"transposed experts: no {part!r} tensor (Llama 4's experts have no biases)")
        return tensor.transpose(1, 2)
    if layout != "interleaved_transposed":
        raise ValueError(f"unknown expert layout {layout!r}; expected one of {EXPERT_LAYOUTS}")
    if part == "w2":
        return tensor.transpose(1, 2)
    if part == "w13":
        tensor = tensor.transpose(1, 2)  # [E, 2I, H], rows interleaved gate_0, up_0, gate_1, ...
    elif part != "w13_bias":
        raise ValueError(f"unknown expert tensor {part!r}; expected w13, w2, w13_bias or w2_bias")
    return torch.cat([tensor[:, 0::2], tensor[:, 1::2]], dim=1)


# ------------------------------------------------------------------------------------------------------------ aiter
def _aiter_route(logits, top_k, scoring, renormalize, n_group, topk_group, bias, scaling, group_score="top2_sum"):
    """aiter's routing kernels, or None where they do not cover the request (the torch path then runs)."""
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    import aiter  # noqa: PLC0415 - ROCm only

    T = logits.shape[0]
    weights = torch.empty(T, top_k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(T, top_k, dtype=torch.int32, device=logits.device)
    if scoring == "softmax" and n_group in (None, 1):
        # aiter.topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, need_renorm)
        token_expert = torch.empty(T, top_k, dtype=torch.int32, device=logits.device)
        aiter.topk_softmax(weights, ids, token_expert, logits, renormalize)
        if scaling != 1.0:
            weights = weights * scaling
        return weights, ids.long()
    if scoring == "sigmoid" and bias is not None and renormalize and n_group and topk_group and group_score == "top2_sum":
        # aiter.biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids,
        #                           num_expert_group, topk_group, need_renorm, routed_scaling_factor)
        aiter.biased_grouped_topk(logits, bias, weights, ids, n_group, topk_group, True, float(scaling))
        return weights, ids.long()
    return None


def _aiter_fused_moe(hidden, w13, w2, topk_weights, topk_ids, activation, expert_offset, num_local, ep, global_e):
    """``aiter.fused_moe.fused_moe`` for bf16/fp16 silu experts, or None (the torch path then runs)."""
    if activation != "silu" or hidden.dtype not in (torch.bfloat16, torch.float16) or w13.dtype != hidden.dtype:
        return None
    if ep and (global_e is None or num_local != w13.shape[0]):
        return None
    from aiter import ActivationType  # noqa: PLC0415 - ROCm only
    from aiter.fused_moe import fused_moe as aiter_fused_moe  # noqa: PLC0415

    expert_mask = None
    if ep:  # aiter takes global ids plus an int32 mask over all experts marking the ones this rank holds
        expert_mask = torch.zeros(global_e, dtype=torch.int32, device=hidden.device)
        expert_mask[expert_offset : expert_offset + num_local] = 1
    return aiter_fused_moe(
        hidden, w13, w2, topk_weights.float(), topk_ids.to(torch.int32),
        expert_mask=expert_mask, activation=ActivationType.Silu,
    )
