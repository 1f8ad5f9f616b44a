"""The loader protocol: what a model exposes so a loader can fill it without knowing any layer's internal names.

Every generated model, on either target, has one entry point, ``load_weights(checkpoint)``; the engine's target
calls nothing else. Behind it each target's loader reads tables the model exposes as data:

rocm (ATOM's ``loading_core`` reads the same names)
    ``packed_modules_mapping``  class attribute: HF module name -> (fused parameter, shard id)
    ``get_expert_mapping()``    an :class:`ExpertMapping`: per-expert, fused-expert and shared-expert slot tables
    ``ignored_keys``            checkpoint keys dropped on purpose ("*" = one dotted segment, "**" = any)
    ``renames``                 (old, new) substring renames applied to every checkpoint key first
    ``tied_parameters``         parameter -> twin it shares storage with when the config ties them (filled
                                through the twin; the loader checks the two really are one tensor)

neuron (the vLLM Neuron guide's ``load_weights``)
    ``ignored_keys``, ``renames`` as above
    ``checkpoint_mappings(available)``  parameter -> [checkpoint keys], ``available`` = the renamed keys present

Parameters carry their own ``weight_loader`` (rocm: ``loader(param, tensor[, shard[, expert]])``; neuron: a closure
with ``transform(slices, rank)``); the shard ids in the tables are opaque data passed through to them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

# One expert-table row: (stacked parameter relative to the MoE block, checkpoint name relative to it, shard id).
ExpertRow = tuple[str, str, str]


@runtime_checkable
class LoadsWeights(Protocol):
    """What a target's ``load`` calls: one signature on every target."""

    def load_weights(self, checkpoint: Any) -> None: ...


@dataclass(frozen=True)
class ExpertMapping:
    """Expert tables of a model, as its MoE partial generates them (empty for dense models).

    ``per_expert``: checkpoint name with ``{e}`` = expert index -> stacked parameter + shard (``w1``/``w3``/``w2``);
    ``fused``: one tensor holding every expert (transformers v5 ``save_original_format=False``);
    ``shared``: shared-expert tensors that fill extra slots of the stacked parameter (coverage slot = the shard id).
    """

    per_expert: Sequence[ExpertRow] = ()
    fused: Sequence[ExpertRow] = ()
    shared: Sequence[ExpertRow] = ()

    def stacked_params(self) -> list[str]:
        """Every stacked parameter (relative name) any table fills, in first-seen order."""
        return list(dict.fromkeys(row[0] for table in (self.per_expert, self.fused, self.shared) for row in table))

    def per_expert_shards(self, param: str) -> tuple[str, ...]:
        """Shard ids one expert's tensors fill in ``param`` (``("w1", "w3")`` for w13), in table order."""
        return tuple(dict.fromkeys(shard for p, _, shard in self.per_expert if p == param))

    def shared_slots(self, param: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(shard for p, _, shard in self.shared if p == param))

    def fused_up_slots(self, param: str) -> tuple[str, ...]:
        """``("w3",)`` when a fused row fills ``param``'s up half on its own (DBRX's flat ``v1``, beside the gate
        ``w1`` that fills the experts slot): its own coverage slot, so each tensor is counted once."""
        return tuple(dict.fromkeys(shard for p, _, shard in self.fused if p == param and shard == "w3"))


NO_EXPERTS = ExpertMapping()


@dataclass(frozen=True)
class PackedTables:
    """The rocm tables of one model, read once from it (:meth:`of`); keyword overrides serve hand-built models."""

    packed_modules_mapping: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()
    tied: Mapping[str, str] = field(default_factory=dict)
    experts: ExpertMapping = NO_EXPERTS

    @classmethod
    def of(cls, model: Any, **overrides: Any) -> "PackedTables":
        """The model's tables (absent ones empty, as ATOM's loader treats a model without ``packed_modules_mapping``),
        then ``overrides`` by field name."""
        get_experts = getattr(model, "get_expert_mapping", None)
        tables = cls(
            packed_modules_mapping=dict(getattr(model, "packed_modules_mapping", None) or {}),
            ignored=tuple(getattr(model, "ignored_keys", ())),
            renames=tuple(getattr(model, "renames", ())),
            tied=dict(getattr(model, "tied_parameters", None) or {}),
            experts=get_experts() if callable(get_experts) else NO_EXPERTS,
        )
        return replace(tables, **overrides)
