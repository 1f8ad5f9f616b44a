"""vLLM Neuron's framework config: :class:`NeuronConfig` (parallel degrees, buckets, batch and sequence sizes,
on-device sampling) and the config mixin generated neuron config classes derive from.

The vLLM Neuron guide's contract (section 1a/1c): a model config is built with ``Config.from_configs(hf_config,
neuron_config)`` and carries the ``neuron_config``; the factory ``Factory(hf_config, neuron_config)`` validates both
(``_validate_config``), picks the implementation (``_select_implementation``) and delegates ``forward``. ``LLM`` on
the neuron target builds its NeuronConfig from its own arguments and goes through the factory
(``NeuronTarget.build_model``). This module imports no torch, so generated config modules stay light.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OnDeviceSamplingConfig:
    """Sampling inside the compiled graph (``NF.sample``): top-k / top-p / temperature per request from
    ``sampling_params [num_reqs, 3]``; ``do_sample=False`` would be greedy-only (not generated separately here)."""

    do_sample: bool = True
    dynamic: bool = True  # per-request parameters as a tensor input (one graph for every setting)


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"NeuronConfig.{name} = {value!r}: expected a positive integer")


def _buckets(name: str, value: Any, limit: int | None, limit_name: str) -> None:
    if value is None:
        return
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"NeuronConfig.{name} = {value!r}: expected a non-empty list of positive integers")
    for b in value:
        _positive(name, b)
    if limit is not None and max(value) > limit:
        raise ValueError(f"NeuronConfig.{name}: bucket {max(value)} exceeds {limit_name} {limit}")


@dataclass(frozen=True)
class NeuronConfig:
    """Neuron-specific settings (the plugin's ``vllm_neuron.model.neuron_config.NeuronConfig`` fields this runtime
    honours). Degrees multiply into the world: attention/MLP/embedding/LM-head data parallelism replicate a component
    over ``*_dp_size`` groups of ``tp_degree / *_dp_size`` ranks; ``ep_degree`` is the experts' parallel degree
    (None: every rank, whole experts)."""

    tp_degree: int = 1
    ep_degree: int | None = None
    attention_dp_size: int = 1
    mlp_dp_size: int = 1
    embedding_dp_size: int = 1
    lm_head_dp_size: int = 1
    max_num_seqs: int = 8
    max_model_len: int = 2048
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    num_batched_tokens_buckets: tuple[int, ...] | None = None  # prefill buckets (tokens per step)
    num_seqs_buckets: tuple[int, ...] | None = None  # decode buckets (requests per step)
    decode_context_buckets: tuple[int, ...] | None = None  # decode block-table widths, in tokens
    on_device_sampling_config: OnDeviceSamplingConfig | None = None
    pad_token_id: int = 0  # input_ids of bucket padding (the guide: padding uses pad_token_id)
    torch_dtype: str = "bfloat16"
    compile: bool = False
    quantization_config: dict | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("tp_degree", "attention_dp_size", "mlp_dp_size", "embedding_dp_size", "lm_head_dp_size",
                     "max_num_seqs", "max_model_len", "block_size"):
            _positive(name, getattr(self, name))
        if self.ep_degree is not None:
            _positive("ep_degree", self.ep_degree)
            if self.tp_degree % self.ep_degree:
                raise ValueError(f"NeuronConfig.ep_degree {self.ep_degree} does not divide tp_degree {self.tp_degree}")
        for name in ("attention_dp_size", "mlp_dp_size", "embedding_dp_size", "lm_head_dp_size"):
            if self.tp_degree % getattr(self, name):
                raise ValueError(f"NeuronConfig.{name} {getattr(self, name)} does not divide tp_degree "
                                 f"{self.tp_degree}")
        if self.max_num_batched_tokens is not None:
            _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _buckets("num_batched_tokens_buckets", self.num_batched_tokens_buckets, self.max_model_len, "max_model_len")
        _buckets("num_seqs_buckets", self.num_seqs_buckets, self.max_num_seqs, "max_num_seqs")
        _buckets("decode_context_buckets", self.decode_context_buckets, None, "")
        if isinstance(self.pad_token_id, bool) or not isinstance(self.pad_token_id, int) or self.pad_token_id < 0:
            raise ValueError(f"NeuronConfig.pad_token_id = {self.pad_token_id!r}: expected a token id >= 0")

    @property
    def on_device_sampling(self) -> bool:
        return self.on_device_sampling_config is not None

    @property
    def data_parallel(self) -> dict[str, int]:
        """The component data-parallel sizes above 1."""
        return {n: getattr(self, n) for n in ("attention_dp_size", "mlp_dp_size", "embedding_dp_size",
                                              "lm_head_dp_size") if getattr(self, n) > 1}

    @classmethod
    def from_engine(cls, args: dict, hf_config: dict, *, tp_degree: int, ep_degree: int | None,
                    dtype: str) -> "NeuronConfig":
        """The NeuronConfig of an ``LLM(...)`` call on the neuron target (its keyword arguments as a dict)."""
        max_model_len = args.get("max_model_len") or min(hf_config.get("max_position_embeddings") or 2048, 4096)
        pad = hf_config.get("pad_token_id")
        vocab = hf_config.get("vocab_size")
        # A pad id outside the vocabulary (some configs write -1 or vocab_size) would index past the embedding.
        valid_pad = isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < (vocab or pad + 1)
        tup = lambda v: tuple(v) if v is not None else None  # noqa: E731
        return cls(
            tp_degree=tp_degree, ep_degree=ep_degree, mlp_dp_size=args.get("mlp_data_parallel_size") or 1,
            max_num_seqs=args.get("max_num_seqs", 8),
            max_model_len=max_model_len, max_num_batched_tokens=args.get("max_num_batched_tokens"),
            block_size=args.get("block_size", 16), num_batched_tokens_buckets=tup(args.get("prefill_buckets")),
            num_seqs_buckets=tup(args.get("decode_buckets")),
            decode_context_buckets=tup(args.get("decode_context_buckets")),
            on_device_sampling_config=OnDeviceSamplingConfig() if args.get("on_device_sampling") else None,
            pad_token_id=pad if valid_pad else 0, torch_dtype=dtype, compile=bool(args.get("compile")),
            quantization_config=hf_config.get("quantization_config"),
        )


@dataclass(frozen=True)
class NeuronModelConfig:
    """Base of generated neuron config classes: the ``neuron_config`` field (keyword-only, so the generated fields
    keep their order) and the guide's ``from_configs`` constructor over the generated ``from_hf_config``."""

    neuron_config: NeuronConfig | None = field(default=None, kw_only=True, compare=False, repr=False)

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: NeuronConfig | None = None):
        """The HF config's fields (``from_hf_config``: typed, defaults, ``requires:`` checks) plus ``neuron_config``."""
        typed = cls.from_hf_config(hf_config)  # type: ignore[attr-defined]
        return dataclasses.replace(typed, neuron_config=neuron_config)
