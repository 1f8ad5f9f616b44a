# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mamba2.yaml --target neuron
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Mamba2Config: the HF ``config.json`` fields specs/mamba2.yaml reads, typed, with the spec's defaults.

Serves: Mamba2ForCausalLM (model_type ``mamba2``). Reference: transformers/models/mamba2/modeling_mamba2.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelgen.runtime.hf_config import (
    ConfigError,
    as_dict,
    read_bool,
    read_float,
    read_float_list,
    read_int,
    read_str,
    require,
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("Mamba2ForCausalLM",)


@dataclass(frozen=True)
class Mamba2Config(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_heads: int
    head_dim: int
    state_size: int
    expand: int
    n_groups: int
    conv_kernel: int
    chunk_size: int
    use_bias: bool
    use_conv_bias: bool
    hidden_act: str
    layer_norm_epsilon: float
    time_step_limit: list[float]
    tie_word_embeddings: bool

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_heads",
        "head_dim",
        "state_size",
        "expand",
        "n_groups",
        "conv_kernel",
        "chunk_size",
        "use_bias",
        "use_conv_bias",
        "hidden_act",
        "layer_norm_epsilon",
        "time_step_limit",
        "tie_word_embeddings",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "time_step_rank",
        "time_step_min",
        "time_step_max",
        "time_step_floor",
        "rescale_prenorm_residual",
        "residual_in_fp32",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Mamba2Config":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = require("vocab_size", ("vocab_size",), read_int(cfg, "vocab_size", ("vocab_size",)))
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
        num_hidden_layers = require(
            "num_hidden_layers", ("num_hidden_layers",), read_int(cfg, "num_hidden_layers", ("num_hidden_layers",))
        )
        num_heads = read_int(cfg, "num_heads", ("num_heads",))
        if num_heads is None:
            num_heads = 128
        head_dim = read_int(cfg, "head_dim", ("head_dim",))
        if head_dim is None:
            head_dim = 64
        state_size = read_int(cfg, "state_size", ("state_size",))
        if state_size is None:
            state_size = 128
        expand = read_int(cfg, "expand", ("expand",))
        if expand is None:
            expand = 2
        n_groups = read_int(cfg, "n_groups", ("n_groups",))
        if n_groups is None:
            n_groups = 8
        conv_kernel = read_int(cfg, "conv_kernel", ("conv_kernel",))
        if conv_kernel is None:
            conv_kernel = 4
        chunk_size = read_int(cfg, "chunk_size", ("chunk_size",))
        if chunk_size is None:
            chunk_size = 256
        use_bias = read_bool(cfg, "use_bias", ("use_bias",))
        if use_bias is None:
            use_bias = False
        use_conv_bias = read_bool(cfg, "use_conv_bias", ("use_conv_bias",))
        if use_conv_bias is None:
            use_conv_bias = True
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        layer_norm_epsilon = read_float(cfg, "layer_norm_epsilon", ("layer_norm_epsilon",))
        if layer_norm_epsilon is None:
            layer_norm_epsilon = 1e-05
        time_step_limit = read_float_list(cfg, "time_step_limit", ("time_step_limit",))
        if time_step_limit is None:
            time_step_limit = [0.0, float('inf')]
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        if not (hidden_act in ('silu', 'swish')):
            raise ConfigError(
                "specs/mamba2.yaml: hidden_act other than silu (the Mamba-2 conv's activation) is not generated by "
                "this spec",
            )
        if not (num_heads * head_dim == expand * hidden_size):
            raise ConfigError(
                "specs/mamba2.yaml: num_heads * head_dim must equal expand * hidden_size (Mamba2Config's own check)"
            )
        if not (num_heads % n_groups == 0):
            raise ConfigError(
                "specs/mamba2.yaml: num_heads must be a multiple of n_groups (each group of B / C serves whole heads)"
            )
        if not (conv_kernel >= 2):
            raise ConfigError(
                "specs/mamba2.yaml: conv_kernel below 2 leaves the conv no history to keep (a one-tap kernel is not "
                "generated)",
            )
        if not (len(time_step_limit) == 2):
            raise ConfigError("specs/mamba2.yaml: time_step_limit must be a (min, max) pair")
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_heads=num_heads,
            head_dim=head_dim,
            state_size=state_size,
            expand=expand,
            n_groups=n_groups,
            conv_kernel=conv_kernel,
            chunk_size=chunk_size,
            use_bias=use_bias,
            use_conv_bias=use_conv_bias,
            hidden_act=hidden_act,
            layer_norm_epsilon=layer_norm_epsilon,
            time_step_limit=time_step_limit,
            tie_word_embeddings=tie_word_embeddings,
        )
