"""The lowered model: everything templates need, already checked, as typed values.

A spec value becomes a :class:`Const` (a literal decided at build time: ``Const(False)`` is the bool False) or a
:class:`Code` (Python source over ``config.<field>``); an absent optional value is ``None``. Templates render a value
with ``.py`` (its Python source) or ``.spec`` (its spec text, for READMEs) and branch on typed facts (``.always``,
``.never``, ``is none``), never on rendered strings. Block sub-modules are :class:`Module` subclasses defined by the
block kinds (codegen/blocks/); the model-level IR below knows no kind.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar

from .literal import pylit, spec_literal


class Value:
    """A lowered spec value; render it with ``.py`` (``str()`` is refused so a template cannot forget to)."""

    py: str
    spec: str

    @property
    def always(self) -> bool:
        return isinstance(self, Const) and self.value is True

    @property
    def never(self) -> bool:
        return isinstance(self, Const) and self.value is False

    def is_literal(self, value: Any) -> bool:
        """A non-bool literal equal to ``value`` (``1.0`` is 1, ``True`` is not)."""
        return isinstance(self, Const) and not isinstance(self.value, bool) and self.value == value

    def __str__(self) -> str:
        raise TypeError(f"render {self!r} with .py or .spec")


@dataclass(frozen=True)
class Const(Value):
    value: bool | int | float | str | None

    @property
    def py(self) -> str:  # type: ignore[override]
        return pylit(self.value)

    @property
    def spec(self) -> str:  # type: ignore[override]
        return spec_literal(self.value)  # markup characters escaped: spec text goes into Markdown code spans


@dataclass(frozen=True)
class Code(Value):
    py: str  # Python source over config.<field> (or over the locals of the generated config class)
    spec: str  # the same expression over the spec's names, for documentation


@dataclass(frozen=True)
class ConfigValue:
    """A field of the generated config class: read from config.json, or derived from other fields."""

    name: str
    py_type: str  # annotation in the generated dataclass
    kind: str  # "read" | "derived"
    reader: str = ""  # runtime.hf_config reader name for kind == "read": read_int / read_float / ...
    keys: tuple[str, ...] = ()  # config.json keys tried in order (dotted = nested)
    required: bool = False
    default: Value | None = None  # over already-computed locals; None = no default
    null_keys: tuple[str, ...] = ()  # nullable: keys whose explicit null overrides the default

    @property
    def null_keys_nested(self) -> bool:
        """A null key is dotted: its presence is tested with ``config_has`` (``key in cfg`` for top-level keys)."""
        return any("." in k for k in self.null_keys)


@dataclass(frozen=True)
class Norm:
    name: str
    kind: str  # spec_types.NormKind
    eps: Value
    bias: Value = Const(False)  # layer_norm: whether it has a learned bias
    affine: bool = True  # False: no learned weight (nor bias)

    @property
    def params(self) -> tuple[tuple[str, Value], ...]:
        """(parameter, condition) of its learned tensors: ``weight`` when affine, ``bias`` when it may have one."""
        if not self.affine:
            return ()
        return (("weight", Const(True)),) + ((("bias", self.bias),) if not self.bias.never else ())


def norm_module(norm: Norm, dim_py: str) -> str:
    """Constructor source of the runtime norm layer of ``norm`` over ``dim_py`` features (``runtime/layers/norm.py``)."""
    extra = "" if norm.affine else ", affine=False"
    if norm.kind == "layer_norm":
        bias = "" if norm.bias.always or not norm.affine else f", bias={norm.bias.py}"
        return f"LayerNorm({dim_py}, eps={norm.eps.py}{bias}{extra})"
    flag = {"zero_centred_rms": ", zero_centred=True", "rms_float32": ", weight_float32=True"}.get(norm.kind, "")
    return f"RMSNorm({dim_py}, eps={norm.eps.py}{flag}{extra})"


def norm_class(norm: Norm) -> str:
    """The runtime class :func:`norm_module` constructs (for imports)."""
    return "LayerNorm" if norm.kind == "layer_norm" else "RMSNorm"


@dataclass(frozen=True)
class Rope:
    style: str
    theta: Value
    scaling: Value  # Const(None) when the spec gives none
    max_position: Value
    partial_factor: Value | None  # None: the whole head is rotated

    @property
    def nope(self) -> bool:
        """No rotary embedding (the spec's ``rope: {enabled: false}``): a NoPE layer."""
        return self.partial_factor is not None and self.partial_factor.is_literal(0.0)

    def rotary_dim_py(self, head_dim_py: str) -> str:
        if self.partial_factor is None:
            return head_dim_py
        return f"int({head_dim_py} * {self.partial_factor.py})"


@dataclass(frozen=True)
class RopeTable:
    """The cos|sin table a target shares across layers (neuron): one per model."""

    rotary_dim: Value
    rope: Rope


@dataclass(frozen=True, kw_only=True)
class Module:
    """One sub-module of a decoder block, of one kind. Kinds subclass it (codegen/blocks/<kind>.py)."""

    kind: ClassVar[str] = ""
    slot: ClassVar[str] = ""  # "attention" | "mlp": its place in a block, so its forward signature per target
    class_suffix: ClassVar[str] = ""  # generated class name = class prefix + suffix (+ n when several)
    fused_params: ClassVar[dict[str, frozenset[Any]]] = {}  # fused parameter -> shard ids its weight loader takes
    single_class: ClassVar[bool] = False  # at most one generated class of this kind per model
    uses_expert_names: ClassVar[bool] = False  # its weights load through checkpoint.experts (routed experts)
    # Its output is one row-parallel linear's partial sums, so under TP the all-reduce can move into the RMSNorm that
    # follows (runtime/layers/norm.py fuse_all_reduce): GQA's o_proj, the gated MLP's down_proj.
    output_reduce_deferrable: ClassVar[bool] = False
    qk_norm_in_kernel: ClassVar[bool] = False  # per-head QK norms run inside the RoPE/cache-write kernels (GQA)

    name: str  # attribute and checkpoint module name, e.g. self_attn
    class_name: str = ""  # set in lowering

    def class_key(self) -> "Module":
        """What makes its class: modules with equal keys share one generated class."""
        return replace(self, class_name="")

    def dependencies(self) -> tuple["Module", ...]:
        """Other classes this one builds (the MoE block builds the shared experts' MLP)."""
        return ()

    def named(self, class_name: Callable[["Module"], str]) -> "Module":
        return replace(self, class_name=class_name(self))

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        """(parameter, markdown) rows for the generated README's architecture table."""
        return []

    def rope_table(self) -> "RopeTable | None":
        """The cos|sin table this module reads, when it rotates positions (None otherwise)."""
        return None


@dataclass(frozen=True)
class ResidualScale:
    """Residual-side scaling of a pre-norm layer (spec ``residual_scale``): each join is ``stream * residual +
    f(norm(stream)) * output``, ``stream`` being the norm's input (``input``) or its output (``normed``, MiniMax)."""

    stream: str
    attention: tuple[Value, Value]  # (residual, output) factors of the attention's join
    mlp: tuple[Value, Value]

    @property
    def normed(self) -> bool:
        return self.stream == "normed"


@dataclass(frozen=True)
class Block:
    """A decoder layer's sub-modules and how they meet the residual stream (spec ``residual``):

    pre_norm   ``h = x + attn(attention_norm(x)); out = h + mlp(mlp_norm(h))``; with ``parallel`` (StableLM
               ``use_parallel_residual``, GPT-NeoX) ``out = x + attn(n) + mlp(n)`` with ``n = attention_norm(x)`` and
               no mlp_norm built;
    sandwich   pre- and post-norms around each sub-layer (Gemma 2/3):
               ``h = x + attention_post_norm(attn(attention_norm(x)))``, the same for the MLP;
    post_norm  only post-norms (OLMo 2): ``h = x + attention_post_norm(attn(x))``, the same for the MLP.
    ``residual_multiplier`` (Granite) scales each sub-layer's output before it joins the stream;
    ``parallel_mlp_norm`` (GPT-NeoX, Falcon-40B) gives the parallel MLP its own norm: ``x + attn(attention_norm(x))
    + mlp(mlp_norm(x))``.
    """

    key: str  # block name in the spec
    residual: str
    attention_norm: Norm | None
    attention: Module | None  # None: the MLP is the block's only sub-layer (out = x + mlp(attention_norm(x)))
    mlp_norm: Norm | None
    mlp: Module | None  # None: the mixer is the block's only sub-layer (pre_norm: out = x + attn(attention_norm(x)))
    attention_post_norm: Norm | None = None
    mlp_post_norm: Norm | None = None
    parallel: Value = Const(False)
    residual_multiplier: Value | None = None
    residual_scale: ResidualScale | None = None  # per block: the layer sets its block's factors
    parallel_mlp_norm: Value = Const(False)
    shared: Module | None = None  # a shared block run before the mixer (codegen/blocks/shared_block.py)
    # Falcon-H1: a second token mixer on the same attention_norm(x), summed with the attention:
    # attention(n * a_in) * a_out + parallel_mixer(n * p_in) * p_out; factors ((a_in, a_out), (p_in, p_out)).
    parallel_mixer: Module | None = None
    mixer_scale: tuple[tuple[Value, Value], tuple[Value, Value]] | None = None

    @property
    def layout(self) -> tuple:
        """What the one decoder-layer class depends on (must agree across blocks)."""
        return (self.residual, self.attention_norm, self.attention_post_norm, self.mlp_norm, self.mlp_post_norm,
                self.parallel, self.residual_multiplier, self.parallel_mlp_norm,
                self.single, self.parallel_mixer is not None)

    @property
    def single(self) -> bool:
        """One sub-layer (a mixer without an MLP, or an MLP without a mixer) behind ``attention_norm``."""
        return self.attention is None or self.mlp is None

    @property
    def only(self) -> Module:
        """The sub-layer of a :attr:`single` block."""
        return self.attention if self.attention is not None else self.mlp

    def norms(self) -> list[tuple[Norm, bool]]:
        """Every norm of the layer, each with whether it exists only under a config condition (the mlp_norm of a
        layer whose ``parallel`` is a config expression and whose MLP has no norm of its own when parallel; a
        literally parallel layer sharing its norm has none). The condition: :attr:`optional_norm_test`."""
        out = [(n, False) for n in (self.attention_norm, self.attention_post_norm) if n is not None]
        if self.mlp_norm is not None and self.parallel_mlp_norm.always:
            out.append((self.mlp_norm, False))
        elif self.mlp_norm is not None and not self.parallel.always:
            out.append((self.mlp_norm, not self.parallel.never))
        elif self.mlp_norm is not None and not self.parallel_mlp_norm.never:
            out.append((self.mlp_norm, True))
        if self.mlp_post_norm is not None:
            out.append((self.mlp_post_norm, False))
        return out


    @property
    def optional_norm_test(self) -> str:
        """The decoder layer's test (over its own attributes) for building a norm :meth:`norms` marks conditional."""
        if self.parallel_mlp_norm.never:
            return "not self.parallel_residual"
        if self.parallel.always:
            return "self.parallel_mlp_norm"
        return "not self.parallel_residual or self.parallel_mlp_norm"

    def norm_params(self) -> list[tuple[str, Value]]:
        """(``<norm>.<param>``, condition over the config) of every learned norm tensor of the layer."""
        out: list[tuple[str, Value]] = []
        for n, only_serial in self.norms():
            for param, cond in n.params:
                if only_serial:
                    serial = Code(py=f"not ({self.parallel.py})", spec=f"not ({self.parallel.spec})")
                    if not self.parallel_mlp_norm.never:
                        serial = Code(py=f"not ({self.parallel.py}) or ({self.parallel_mlp_norm.py})", spec="")
                    cond = serial if cond.always else Code(py=f"{cond.py} and {serial.py}", spec="")
                out.append((f"{n.name}.{param}", cond))
        return out


@dataclass(frozen=True)
class Fusion:
    param: str  # fused parameter, e.g. qkv_proj
    shards: tuple[tuple[str | int, str], ...]  # (shard id, checkpoint module)


@dataclass(frozen=True)
class Experts:
    per_expert: tuple[tuple[str, str], ...]  # (gate|up|down, pattern with {e}) relative to the MoE module
    fused: tuple[tuple[str, str], ...]  # (gate_up|gate|up|down, name) relative to the MoE module; () when absent

    def pattern(self, part: str) -> str:
        return dict(self.per_expert)[part]

    def fused_name(self, part: str) -> str:
        return dict(self.fused)[part]


@dataclass(frozen=True)
class Checkpoint:
    prefix: str
    fusions: tuple[Fusion, ...]
    ignore: tuple[str, ...]
    rename: tuple[tuple[str, str], ...]
    experts: Experts | None
    splits: tuple[Any, ...] = ()  # checkpoint_split.Split: modules stored already fused (checkpoint.split)

    def modules(self, param: str, default: dict[Any, str]) -> dict[Any, str]:
        """Shard id -> checkpoint module of a fused parameter (``default`` when the spec does not fuse it)."""
        return next((dict(f.shards) for f in self.fusions if f.param == param), default)


@dataclass(frozen=True)
class Requirement:
    fails: Value  # true when the config is unsupported
    message: str


@dataclass(frozen=True)
class ModelIR:
    spec_path: str  # as shown in banners, relative to the repo (specs/llama.yaml)
    source_hash: str  # hash of spec + templates + generator version
    name: str
    class_prefix: str
    description: str
    architectures: tuple[str, ...]
    model_type: str
    modeling: str
    config_values: tuple[ConfigValue, ...]  # topologically ordered
    num_layers: Value
    layer_block_rule: Code | None  # source over self.<field> and `i`; None when every layer uses one block
    blocks: tuple[Block, ...]
    classes: tuple[Module, ...]  # distinct block sub-module classes, in definition order
    rope_tables: tuple[RopeTable, ...]  # distinct cos|sin tables, in class order; the first is the model's primary
    decoder_class: str
    requires: tuple[Requirement, ...]
    embedding_name: str
    vocab_size: Value
    hidden_size: Value
    final_norm: Norm
    lm_head_name: str
    tie_embeddings: Value
    checkpoint: Checkpoint
    mtp: Any = None  # codegen/mtp.MTP: the spec's multi-token-prediction draft head; None without one
    config_ignore: tuple[str, ...] = ()  # spec `config_ignore:`: config.json keys known not to change the forward
    embedding_multiplier: Value | None = None  # None: embeddings used as looked up
    embedding_multiplier_dtype: str = "float32"  # "model": the multiplier rounded to the hidden dtype first (Gemma)
    logits_divisor: Value | None = None  # Granite logits_scaling: logits / divisor
    logits_softcap: Value | None = None  # Gemma 2 final_logit_softcapping: cap * tanh(logits / cap)
    lm_head_bias: bool = False  # Phi-2: lm_head.bias [vocab] added to the logits
    # (display path, sha256 of its text) of the spec and each base it extends, most derived first (codegen/cache.py)
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def rope_table(self) -> RopeTable | None:
        """The primary cos|sin table (the only one unless attentions rotate with different settings)."""
        return self.rope_tables[0] if self.rope_tables else None

    def rope_index(self, block: Block) -> int:
        """Index into :attr:`rope_tables` of the table ``block``'s attention reads (0 when it reads none)."""
        table = block.attention.rope_table() if block.attention is not None else None
        return self.rope_tables.index(table) if table in self.rope_tables else 0

    @property
    def norm_classes(self) -> tuple[str, ...]:
        """Runtime norm classes the decoder layers and the final norm construct (for imports)."""
        norms = [n for b in self.blocks for n, _ in b.norms()] + [self.final_norm]
        return tuple(sorted({norm_class(n) for n in norms}))

    def slot_name(self, slot: str) -> str | None:
        """The module name of ``slot`` ("attention" | "mlp") when every block uses the same, else None."""
        names = {getattr(b, slot).name for b in self.blocks if getattr(b, slot) is not None}
        return names.pop() if len(names) == 1 else None

    @property
    def shared_blocks(self) -> tuple[Block, ...]:
        """The blocks with a shared block before their mixer (spec ``shared:``)."""
        return tuple(b for b in self.blocks if b.shared is not None)

    @property
    def shared(self) -> Module | None:
        """The shared block (one per model), or None."""
        return self.shared_blocks[0].shared if self.shared_blocks else None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({m.kind for m in self.classes}))

    @property
    def fuse_attention_all_reduce(self) -> bool:
        """The layers hand the attention output's all-reduce to the norm after it (fused all-reduce + add + RMSNorm
        under TP): only in the plain serial pre-norm layout, where that norm's residual add is the attention output's
        only use, with an affine RMS-kind norm and an attention kind whose output is one row-parallel linear's."""
        b = self.blocks[0]
        return (b.residual == "pre_norm" and b.mlp is not None and b.parallel.never and b.residual_multiplier is None
                and b.residual_scale is None and b.parallel_mixer is None
                and self.slot_name("attention") is not None and b.mlp_norm.kind != "layer_norm" and b.mlp_norm.affine
                and all(blk.attention is not None and blk.attention.output_reduce_deferrable for blk in self.blocks))

    @property
    def fuse_mlp_all_reduce(self) -> bool:
        """And every MLP's output is its down_proj's, so the next layer's input norm (the final norm after the last)
        reduces it too."""
        return (self.fuse_attention_all_reduce and self.slot_name("mlp") is not None
                and all(blk.mlp.output_reduce_deferrable for blk in self.blocks))

    @property
    def mapping_needs_keys(self) -> bool:
        """The checkpoint may hold experts in either layout, so the neuron mappings look at its keys."""
        return self.checkpoint.experts is not None and bool(self.checkpoint.experts.fused)

    @property
    def moe(self) -> Module | None:
        """The MoE class (its expert tables are checkpoint-level data), or None for a dense model."""
        return next((m for m in self.classes if m.uses_expert_names), None)
