# ==================================================================================================================
# GENERATED FROM specs/deepseek_v32.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v32.yaml --target neuron
# source hash (spec + templates + generator): cc55a073c0906176
# ==================================================================================================================
"""Multi-token-prediction (MTP) draft head of DeepseekV32ForCausalLM for the neuron target (speculative decoding).

Checkpoint layout (DeepSeek-V3 / GLM-4.5): the MTP layer is ``model.layers.{num_hidden_layers}.*``, a decoder layer of
the main model's kind plus ``enorm``, ``hnorm``, ``eh_proj`` and ``shared_head.norm``; its ``embed_tokens`` and
``shared_head.head`` copies are not loaded (the target's embedding and LM head are used, as transformers' MtpModel
does and the DeepSeek-V3 report describes).

For the token at position ``i`` the head computes ``norm(layer(proj([norm_e(embed(t[i+1])); norm_h(h[i])])))`` with
``h[i]`` the target's final hidden state at ``i``; the result feeds the target's LM head and, chained, the next draft
step. Only the first MTP layer is built; the engine chains it for K > 1 draft tokens (a static K: every draft step is
one more call of the same bucketed graphs).

``forward`` has the target's fixed signature, so the neuron runner pads and calls it unchanged; the target hidden
states of the same tokens are handed over first with ``bind_hidden_states`` (zero rows pad them to the bucket) and
the padded MTP hidden states of the last call are left in ``last_hidden_states``.
"""
from __future__ import annotations

import torch
from torch import nn

import modelgen.runtime.targets.neuron.functional as NF
from modelgen.runtime.kv_cache import KVSpec
from modelgen.runtime.layers.mtp import DraftCheckpoint, layer_mappings, load_draft, mtp_layer_config
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.mapped import load_mapped_weights
from modelgen.runtime.neuron.weight_loader import set_weight_loader, transposed_loader

from .config import DeepseekV32Config
from .model import DeepseekV32DecoderLayer, DeepseekV32ForCausalLM, _param
from .weights import checkpoint_mappings

# The MTP decoder layer's block (spec mtp.block): full attention, the model's MLP kind.
MTP_BLOCK = "sparse"


def num_mtp_layers(config: DeepseekV32Config) -> int:
    """MTP layers the checkpoint declares (spec mtp.num_layers: num_nextn_predict_layers); 0: it has none."""
    return config.num_nextn_predict_layers


# Copies of the target's embedding and LM head inside the MTP layer: read from the target instead.
SHARED_KEYS = ("embed_tokens.weight", "shared_head.head.weight")


class DeepseekV32SharedHead(nn.Module):
    """``shared_head``: the final norm of the MTP layer (its ``head`` is the target's LM head)."""

    def __init__(self, config: DeepseekV32Config):
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)


class DeepseekV32MTPLayer(DeepseekV32DecoderLayer):
    """``model.layers.{num_hidden_layers}``: the target's decoder layer (block sparse) with the MTP input
    projection in front and ``shared_head.norm`` behind."""

    def __init__(self, config: DeepseekV32Config, layer_idx: int):
        super().__init__(mtp_layer_config(config, MTP_BLOCK, layer_idx), layer_idx)
        self.enorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.eh_proj_weight = _param(2 * config.hidden_size, config.hidden_size)  # [in, out], replicated
        set_weight_loader(self.eh_proj_weight, transposed_loader())
        self.shared_head = DeepseekV32SharedHead(config)

    def predict(
        self, embeds: torch.Tensor, previous: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
        attn_metadata: dict,
    ) -> torch.Tensor:
        # [enorm(embedding); hnorm(hidden)]: the embedding first (transformers' MtpLayer, DeepSeek-V3 report eq. 21).
        hidden_states = NF.linear(torch.cat([self.enorm(embeds), self.hnorm(previous)], dim=-1), self.eh_proj_weight)
        hidden_states = super().forward(hidden_states, positions, cos_sin, attn_metadata)
        return self.shared_head.norm(hidden_states)


class DeepseekV32MTPModel(nn.Module):
    """``model.layers``: the MTP layer under its checkpoint index, so parameter names are the checkpoint's."""

    def __init__(self, config: DeepseekV32Config, layer_idx: int):
        super().__init__()
        self.layers = nn.ModuleDict({str(layer_idx): DeepseekV32MTPLayer(config, layer_idx)})


class DeepseekV32MTP(nn.Module):
    """The draft model the speculative engine runs: the target's forward signature, the target's LM head, its own
    paged cache, and a strict loader over the checkpoint's MTP tensors."""

    renames = DeepseekV32ForCausalLM.renames
    # The target's ignore rules, less the one that hides the MTP head from the main loader.
    ignored_keys = tuple(p for p in DeepseekV32ForCausalLM.ignored_keys if not p.startswith("mtp."))

    def __init__(self, config: DeepseekV32Config, target: DeepseekV32ForCausalLM):
        super().__init__()
        self.config = config
        self.layer_idx = config.num_hidden_layers  # the first MTP layer's index (its cache's and its attention's name)
        self.model = DeepseekV32MTPModel(config, self.layer_idx)
        self.predictor = self.model.layers[str(self.layer_idx)]
        self.checkpoint_prefix = f"model.layers.{self.layer_idx}."
        self.layer_prefix = self.checkpoint_prefix
        # Not submodules: the target owns (and loads) its embedding, LM head and RoPE table.
        self._target = (target,)
        self._hidden: torch.Tensor | None = None
        self.last_hidden_states: torch.Tensor | None = None

    def bind_hidden_states(self, hidden_states: torch.Tensor) -> None:
        """The target's final hidden states ``[num_tokens, hidden]`` paired with the next call's real tokens."""
        self._hidden = hidden_states

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: dict,
        sampling_positions: torch.Tensor,
        sampling_params: torch.Tensor | None = None,
        spec_decode_metadata=None,
        logit_mask: torch.Tensor | None = None,
        rank: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        is_token_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Padded tokens t[i+1] at positions i (with the bound h[i]) -> draft logits at ``sampling_positions``."""
        target = self._target[0]
        if rank is None:
            rank = torch.zeros((), dtype=torch.int64, device=input_ids.device)
        if self._hidden is None or self._hidden.shape[0] > input_ids.shape[0]:
            raise ValueError("DeepseekV32MTP.forward: bind_hidden_states() with one row per real token first")
        previous = torch.zeros(input_ids.shape[0], self._hidden.shape[1], dtype=self._hidden.dtype,
                               device=self._hidden.device)
        previous[: self._hidden.shape[0]] = self._hidden  # padding rows: zeros (their cache slot is -1)
        embeds = NF.embedding(input_ids, target.model.embed_tokens_weight, rank)
        hidden_states = self.predictor.predict(embeds, previous, positions, target.model.rope_cos_sin, attn_metadata)
        self.last_hidden_states = hidden_states
        logits = NF.lm_head(torch.index_select(hidden_states, 0, sampling_positions),
                            target.lm_head_weight, target.vocab_size)
        if logit_mask is not None:
            logits = logits.masked_fill(~logit_mask, float("-inf"))
        if sampling_params is not None:  # on-device sampling: (sampled_token_ids, gathered_logits)
            return NF.sample(logits, sampling_params), logits
        return logits

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Target LM-head logits of hidden states (the target's verify rows, or the draft's own)."""
        target = self._target[0]
        return NF.lm_head(hidden_states, target.lm_head_weight, target.vocab_size)

    def get_kv_spec(self) -> KVSpec:
        return KVSpec(layers=[self._layer().self_attn.kv_spec()])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self._layer().self_attn.bind_kv_cache(kv_caches)

    def _layer(self) -> DeepseekV32DecoderLayer:
        return self.predictor

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        """Parameter -> checkpoint key(s): the decoder layer's from the target's mappings, plus the MTP projection."""
        mappings = layer_mappings(checkpoint_mappings, self.config, MTP_BLOCK, self.layer_idx, available,
                                  self.layer_prefix)
        head = self.checkpoint_prefix
        mappings[head + "eh_proj_weight"] = [head + "eh_proj.weight"]
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            mappings[f"{head}{norm}.weight"] = [f"{head}{norm}.weight"]
        return mappings

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from the checkpoint's MTP tensors (strict: a missing one is a MissingDraftWeights)."""
        view = DraftCheckpoint(checkpoint, [self.checkpoint_prefix], shared=SHARED_KEYS)
        load_draft(lambda ckpt: load_mapped_weights(self, ckpt), view)


# The class the speculative engine instantiates (runtime/engine/speculative.py).
DRAFT_CLASS = DeepseekV32MTP
