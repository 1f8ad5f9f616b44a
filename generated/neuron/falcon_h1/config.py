# ==================================================================================================================
# GENERATED FROM specs/falcon_h1.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon_h1.yaml --target neuron
# source hash (spec + templates + generator): c6d883bdd38a51b9
# ==================================================================================================================
"""FalconH1Config: the HF ``config.json`` fields specs/falcon_h1.yaml reads, typed, with the spec's defaults.

Serves: FalconH1ForCausalLM (model_type ``falcon_h1``). Reference: transformers/models/falcon_h1/modeling_falcon_h1.py.
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
    read_rope_scaling,
    read_str,
    require,
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("FalconH1ForCausalLM",)


@dataclass(frozen=True)
class FalconH1Config(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    hidden_act: str
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    attention_bias: bool
    mlp_bias: bool
    mamba_proj_bias: bool
    projectors_bias: bool
    mamba_conv_bias: bool
    tie_word_embeddings: bool
    mamba_d_ssm: int
    mamba_expand: int
    mamba_n_heads: int
    mamba_d_head: int
    mamba_n_groups: int
    mamba_d_state: int
    mamba_d_conv: int
    mamba_chunk_size: int
    mamba_rms_norm: bool
    mamba_norm_before_gate: bool
    time_step_limit: list[float]
    embedding_multiplier: float
    lm_head_multiplier: float
    attention_in_multiplier: float
    attention_out_multiplier: float
    key_multiplier: float
    ssm_in_multiplier: float
    ssm_out_multiplier: float
    ssm_multipliers: list[float]
    mlp_multipliers: list[float]
    mamba_intermediate: Any  # derived: mamba_d_ssm if mamba_d_ssm is not None else mamba_expand * hidden_size

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "hidden_act",
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "attention_bias",
        "mlp_bias",
        "mamba_proj_bias",
        "projectors_bias",
        "mamba_conv_bias",
        "tie_word_embeddings",
        "mamba_d_ssm",
        "mamba_expand",
        "mamba_n_heads",
        "mamba_d_head",
        "mamba_n_groups",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_chunk_size",
        "mamba_rms_norm",
        "mamba_norm_before_gate",
        "time_step_limit",
        "embedding_multiplier",
        "lm_head_multiplier",
        "attention_in_multiplier",
        "attention_out_multiplier",
        "key_multiplier",
        "ssm_in_multiplier",
        "ssm_out_multiplier",
        "ssm_multipliers",
        "mlp_multipliers",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "num_logits_to_keep",
        "attention_dropout",
        "mamba_use_mlp",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "FalconH1Config":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = require("vocab_size", ("vocab_size",), read_int(cfg, "vocab_size", ("vocab_size",)))
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
        intermediate_size = read_int(cfg, "intermediate_size", ("intermediate_size",))
        if intermediate_size is None:
            intermediate_size = 14336
        num_hidden_layers = read_int(cfg, "num_hidden_layers", ("num_hidden_layers",))
        if num_hidden_layers is None:
            num_hidden_layers = 32
        num_attention_heads = read_int(cfg, "num_attention_heads", ("num_attention_heads",))
        if num_attention_heads is None:
            num_attention_heads = 32
        num_key_value_heads = read_int(cfg, "num_key_value_heads", ("num_key_value_heads",))
        if num_key_value_heads is None:
            num_key_value_heads = num_attention_heads
        head_dim = read_int(cfg, "head_dim", ("head_dim",))
        if head_dim is None:
            head_dim = hidden_size // num_attention_heads
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 8192
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        attention_bias = read_bool(cfg, "attention_bias", ("attention_bias",))
        if attention_bias is None:
            attention_bias = False
        mlp_bias = read_bool(cfg, "mlp_bias", ("mlp_bias",))
        if mlp_bias is None:
            mlp_bias = False
        mamba_proj_bias = read_bool(cfg, "mamba_proj_bias", ("mamba_proj_bias",))
        if mamba_proj_bias is None:
            mamba_proj_bias = False
        projectors_bias = read_bool(cfg, "projectors_bias", ("projectors_bias",))
        if projectors_bias is None:
            projectors_bias = False
        mamba_conv_bias = read_bool(cfg, "mamba_conv_bias", ("mamba_conv_bias",))
        if mamba_conv_bias is None:
            mamba_conv_bias = True
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        mamba_d_ssm = read_int(cfg, "mamba_d_ssm", ("mamba_d_ssm",))
        mamba_expand = read_int(cfg, "mamba_expand", ("mamba_expand",))
        if mamba_expand is None:
            mamba_expand = 2
        mamba_n_heads = read_int(cfg, "mamba_n_heads", ("mamba_n_heads",))
        if mamba_n_heads is None:
            mamba_n_heads = 128
        mamba_d_head = read_int(cfg, "mamba_d_head", ("mamba_d_head",))
        if mamba_d_head is None:
            mamba_d_head = (mamba_d_ssm if mamba_d_ssm is not None else mamba_expand * hidden_size) // mamba_n_heads
        mamba_n_groups = read_int(cfg, "mamba_n_groups", ("mamba_n_groups",))
        if mamba_n_groups is None:
            mamba_n_groups = 1
        mamba_d_state = read_int(cfg, "mamba_d_state", ("mamba_d_state",))
        if mamba_d_state is None:
            mamba_d_state = 256
        mamba_d_conv = read_int(cfg, "mamba_d_conv", ("mamba_d_conv",))
        if mamba_d_conv is None:
            mamba_d_conv = 4
        mamba_chunk_size = read_int(cfg, "mamba_chunk_size", ("mamba_chunk_size",))
        if mamba_chunk_size is None:
            mamba_chunk_size = 256
        mamba_rms_norm = read_bool(cfg, "mamba_rms_norm", ("mamba_rms_norm",))
        if mamba_rms_norm is None:
            mamba_rms_norm = False
        mamba_norm_before_gate = read_bool(cfg, "mamba_norm_before_gate", ("mamba_norm_before_gate",))
        if mamba_norm_before_gate is None:
            mamba_norm_before_gate = True
        time_step_limit = read_float_list(cfg, "time_step_limit", ("time_step_limit",))
        if time_step_limit is None:
            time_step_limit = [0.0, float('inf')]
        embedding_multiplier = read_float(cfg, "embedding_multiplier", ("embedding_multiplier",))
        if embedding_multiplier is None:
            embedding_multiplier = 1.0
        lm_head_multiplier = read_float(cfg, "lm_head_multiplier", ("lm_head_multiplier",))
        if lm_head_multiplier is None:
            lm_head_multiplier = 1.0
        attention_in_multiplier = read_float(cfg, "attention_in_multiplier", ("attention_in_multiplier",))
        if attention_in_multiplier is None:
            attention_in_multiplier = 1.0
        attention_out_multiplier = read_float(cfg, "attention_out_multiplier", ("attention_out_multiplier",))
        if attention_out_multiplier is None:
            attention_out_multiplier = 1.0
        key_multiplier = read_float(cfg, "key_multiplier", ("key_multiplier",))
        if key_multiplier is None:
            key_multiplier = 1.0
        ssm_in_multiplier = read_float(cfg, "ssm_in_multiplier", ("ssm_in_multiplier",))
        if ssm_in_multiplier is None:
            ssm_in_multiplier = 1.0
        ssm_out_multiplier = read_float(cfg, "ssm_out_multiplier", ("ssm_out_multiplier",))
        if ssm_out_multiplier is None:
            ssm_out_multiplier = 1.0
        ssm_multipliers = read_float_list(cfg, "ssm_multipliers", ("ssm_multipliers",))
        if ssm_multipliers is None:
            ssm_multipliers = [1.0, 1.0, 1.0, 1.0, 1.0]
        mlp_multipliers = read_float_list(cfg, "mlp_multipliers", ("mlp_multipliers",))
        if mlp_multipliers is None:
            mlp_multipliers = [1.0, 1.0]
        mamba_intermediate = mamba_d_ssm if mamba_d_ssm is not None else mamba_expand * hidden_size
        if not (hidden_act in ('silu', 'swish')):
            raise ConfigError(
                "specs/falcon_h1.yaml: hidden_act other than silu (the MLP's and the Mamba-2 conv's activation) is "
                "not generated by this spec",
            )
        if not (mamba_n_heads * mamba_d_head == mamba_intermediate):
            raise ConfigError(
                "specs/falcon_h1.yaml: mamba_n_heads * mamba_d_head must be mamba_d_ssm (or mamba_expand * "
                "hidden_size), FalconH1Config's rule",
            )
        if not (mamba_n_heads % mamba_n_groups == 0):
            raise ConfigError(
                "specs/falcon_h1.yaml: mamba_n_heads must be a multiple of mamba_n_groups (each group of B / C "
                "serves whole heads)",
            )
        if not (mamba_intermediate % mamba_n_groups == 0):
            raise ConfigError(
                "specs/falcon_h1.yaml: mamba_n_groups must divide the mixer's width (the gated RMSNorm's groups)"
            )
        if not (mamba_d_conv >= 2):
            raise ConfigError(
                "specs/falcon_h1.yaml: mamba_d_conv below 2 leaves the conv no history to keep (a one-tap kernel is "
                "not generated)",
            )
        if not (len(time_step_limit) == 2):
            raise ConfigError("specs/falcon_h1.yaml: time_step_limit must be a (min, max) pair")
        if not (len(ssm_multipliers) == 5):
            raise ConfigError(
                "specs/falcon_h1.yaml: ssm_multipliers must hold five factors (z, x, B, C, dt: compute_mup_vector's "
                "parts)",
            )
        if not (len(mlp_multipliers) == 2):
            raise ConfigError("specs/falcon_h1.yaml: mlp_multipliers must hold two factors (gate, down)")
        if not (lm_head_multiplier != 0):
            raise ConfigError(
                "specs/falcon_h1.yaml: lm_head_multiplier 0 is not generated (the logits are divided by 1 / "
                "lm_head_multiplier)",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            max_position_embeddings=max_position_embeddings,
            rms_norm_eps=rms_norm_eps,
            hidden_act=hidden_act,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            attention_bias=attention_bias,
            mlp_bias=mlp_bias,
            mamba_proj_bias=mamba_proj_bias,
            projectors_bias=projectors_bias,
            mamba_conv_bias=mamba_conv_bias,
            tie_word_embeddings=tie_word_embeddings,
            mamba_d_ssm=mamba_d_ssm,
            mamba_expand=mamba_expand,
            mamba_n_heads=mamba_n_heads,
            mamba_d_head=mamba_d_head,
            mamba_n_groups=mamba_n_groups,
            mamba_d_state=mamba_d_state,
            mamba_d_conv=mamba_d_conv,
            mamba_chunk_size=mamba_chunk_size,
            mamba_rms_norm=mamba_rms_norm,
            mamba_norm_before_gate=mamba_norm_before_gate,
            time_step_limit=time_step_limit,
            embedding_multiplier=embedding_multiplier,
            lm_head_multiplier=lm_head_multiplier,
            attention_in_multiplier=attention_in_multiplier,
            attention_out_multiplier=attention_out_multiplier,
            key_multiplier=key_multiplier,
            ssm_in_multiplier=ssm_in_multiplier,
            ssm_out_multiplier=ssm_out_multiplier,
            ssm_multipliers=ssm_multipliers,
            mlp_multipliers=mlp_multipliers,
            mamba_intermediate=mamba_intermediate,
        )
