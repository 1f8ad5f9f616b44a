# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5_moe.yaml --target rocm
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Multi-token-prediction (MTP) draft head of Qwen35MoeForCausalLM for the rocm target (speculative decoding).

Checkpoint layout (Qwen3-Next / Qwen3.5): ``mtp.fc``, ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``,
``mtp.layers.N.*`` (full-attention decoder layers) and ``mtp.norm``; the embedding and LM head are the target's.

For the token at position ``i`` the head computes ``norm(layer(proj([norm_e(embed(t[i+1])); norm_h(h[i])])))``:
``h[i]`` is the target's final hidden state at ``i`` (after its last norm) and the result both feeds the target's LM
head (a draft for ``t[i+2]``) and, chained, the next draft step. Only the first MTP layer is built (every released
checkpoint has one); the engine chains it for K > 1 draft tokens.

The runner calls ``forward(input_ids, positions, attn_metadata)`` like the target's; the target hidden states of the
same tokens are handed over first with :meth:`Qwen35MoeMTP.bind_hidden_states` (the runners' signature has no slot for
them). The layer's attention keeps its own paged cache, indexed by the target's block tables.
"""
from __future__ import annotations

import torch
from torch import nn

from modelgen.runtime.kv_cache import KVSpec
from modelgen.runtime.layers.attention import AttentionMetadata
from modelgen.runtime.layers.linear import ReplicatedLinear
from modelgen.runtime.layers.mtp import DraftCheckpoint, load_draft, mtp_layer_config
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import Checkpoint
from modelgen.runtime.loader.packed import load_packed_weights

from .config import Qwen35MoeConfig
from .model import Qwen35MoeDecoderLayer, Qwen35MoeForCausalLM

# The MTP decoder layer's block (spec mtp.block): full attention, the model's MLP kind.
MTP_BLOCK = "full"


def num_mtp_layers(config: Qwen35MoeConfig) -> int:
    """MTP layers the checkpoint declares (spec mtp.num_layers: mtp_num_hidden_layers); 0: it has none."""
    return config.mtp_num_hidden_layers


SHARED_KEYS = ()


class Qwen35MoeMultiTokenPredictor(nn.Module):
    """``mtp.*``: input projection, one full-attention decoder layer of the target's kind, final norm."""

    def __init__(self, config: Qwen35MoeConfig, layer_idx: int):
        super().__init__()
        self.pre_fc_norm_embedding = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, zero_centred=True)
        self.pre_fc_norm_hidden = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, zero_centred=True)
        self.fc = ReplicatedLinear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.layers = nn.ModuleList([Qwen35MoeDecoderLayer(mtp_layer_config(config, MTP_BLOCK, layer_idx), layer_idx)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, zero_centred=True)

    def predict(
        self, positions: torch.Tensor, embeds: torch.Tensor, previous: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        # [norm(embedding); norm(hidden)]: the embedding first (vLLM's Qwen3NextMultiTokenPredictor).
        x = torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(previous)], dim=-1)
        hidden_states, residual = self.layers[0](positions, self.fc(x), None, attn_metadata)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class Qwen35MoeMTP(nn.Module):
    """The draft model the speculative engine runs: ``forward`` -> MTP hidden states, ``compute_logits`` through the
    target's LM head, its own paged cache, and a strict loader over the checkpoint's MTP tensors."""

    # The target's tables: the MTP layer's tensors are named and fused like a main-model layer's.
    packed_modules_mapping = Qwen35MoeForCausalLM.packed_modules_mapping
    renames = Qwen35MoeForCausalLM.renames
    # The target's ignore rules, less the one that hides the MTP head from the main loader.
    ignored_keys = tuple(p for p in Qwen35MoeForCausalLM.ignored_keys if not p.startswith("mtp."))

    def __init__(self, config: Qwen35MoeConfig, target: Qwen35MoeForCausalLM):
        super().__init__()
        self.config = config
        self.layer_idx = config.num_hidden_layers  # the first MTP layer's index (its cache's and its attention's name)
        self.mtp = Qwen35MoeMultiTokenPredictor(config, self.layer_idx)
        self.predictor = self.mtp
        self.checkpoint_prefix = "mtp."
        # Not submodules: the target owns (and loads) its embedding and LM head.
        self._target = (target,)
        get_experts = getattr(target, "get_expert_mapping", None)
        if get_experts is not None:
            self.get_expert_mapping = get_experts
        self._hidden: torch.Tensor | None = None
        self.last_hidden_states: torch.Tensor | None = None

    def bind_hidden_states(self, hidden_states: torch.Tensor) -> None:
        """The target's final hidden states ``[num_tokens, hidden]`` paired with the next call's tokens."""
        self._hidden = hidden_states

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        """``input_ids`` = t[i+1], ``positions`` = i, with the bound hidden states h[i] -> MTP hidden states."""
        if self._hidden is None or self._hidden.shape[0] != input_ids.shape[0]:
            raise ValueError("Qwen35MoeMTP.forward: bind_hidden_states() with one row per token first")
        embeds = self._target[0].model.embed_tokens(input_ids)
        hidden_states = self.predictor.predict(positions, embeds, self._hidden, attn_metadata)
        self.last_hidden_states = hidden_states  # the engine chains the next draft step on these
        return hidden_states

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self._target[0].compute_logits(hidden_states)

    def get_kv_spec(self) -> KVSpec:
        return KVSpec(layers=[self._layer().self_attn.kv_spec()])

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self._layer().self_attn.bind_kv_cache(kv_caches)

    def _layer(self) -> Qwen35MoeDecoderLayer:
        return self.mtp.layers[0]

    def load_weights(self, checkpoint: Checkpoint) -> None:
        """Fill every parameter from the checkpoint's MTP tensors (strict: a missing one is a MissingDraftWeights)."""
        view = DraftCheckpoint(checkpoint, [self.checkpoint_prefix], shared=SHARED_KEYS)
        load_draft(lambda ckpt: load_packed_weights(self, ckpt), view)


# The class the speculative engine instantiates (runtime/engine/speculative.py).
DRAFT_CLASS = Qwen35MoeMTP
