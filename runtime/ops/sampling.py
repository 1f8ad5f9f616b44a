"""Shape-static token sampling for traced graphs (the neuron target's on-device sampling).

``sampling_params [num_reqs, 3]`` holds ``[top_k, top_p, temperature]`` per request, as the vLLM Neuron runner passes
them. Rows with temperature 0 are greedy. Sampling uses the Gumbel-max trick (``argmax(logp - log(-log U))``), so
there is no ``multinomial`` and no data-dependent shape: one static graph per bucket. top-k 0 means off, top-p 1 off.
Host-side sampling with per-request seeded generators stays in ``runtime/engine/sampler.py``.
"""
from __future__ import annotations

import torch


def sample_static(logits: torch.Tensor, sampling_params: torch.Tensor) -> torch.Tensor:
    """``logits [R, V]`` -> token ids ``[R]`` (int64)."""
    logits = logits.float()
    V = logits.shape[-1]
    top_k = sampling_params[:, 0].round().long()
    top_p = sampling_params[:, 1].float()
    temperature = sampling_params[:, 2].float()
    greedy = logits.argmax(-1)

    scaled = logits / temperature.clamp(min=1e-5)[:, None]
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
    rank = torch.arange(V, device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k.clamp(max=V), torch.full_like(top_k, V))
    keep = rank < k[:, None]  # top-k on the sorted row
    probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
    keep &= (probs.cumsum(-1) - probs) < top_p[:, None]  # top-p: drop once the better tokens reach top_p
    masked = sorted_logits.masked_fill(~keep, float("-inf"))
    uniform = torch.rand_like(masked).clamp_(min=1e-10, max=1.0 - 1e-7)
    choice = torch.argmax(masked - torch.log(-torch.log(uniform)), dim=-1)  # Gumbel-max over the kept tokens
    sampled = order.gather(1, choice[:, None])[:, 0]
    return torch.where(temperature > 0, sampled, greedy)
