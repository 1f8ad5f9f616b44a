"""Spec file -> validated :class:`~modelgen.codegen.ir.ModelIR`.

Three passes, each reporting every problem it finds (not just the first) as ``file:line:col: field: message``:
  1. YAML syntax (codegen/yaml_source.py);
  2. the schema (codegen/schema.py), pydantic errors mapped back to source positions, unknown keys with a suggestion
     (1 and 2: :func:`~modelgen.codegen.spec_file.load_spec`);
  3. semantics: expressions parse and use only defined config fields, the config binding has no cycles, the layer
     schedule names existing blocks, fusions match the parameters the templates create.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from . import GENERATOR_VERSION, ir
from .blocks import KINDS
from .checkpoint_split import lower_splits
from .evaluate import evaluate_spec
from .errors import SpecError, SpecIssue
from .expr import Expr, ExprError, parse_expr, shared_budget
from .mtp import lower_mtp
from .reserved import CONFIG_CLASS_NAMES, GENERATED_IMPORTS, config_name_clash, module_name_clash
from .schema import Spec
from .spec_types import check_identifier
from .spec_file import REPO_ROOT, display_path, load_spec
from .yaml_source import SourceMap

TEMPLATES_DIR = REPO_ROOT / "templates"
SPECS_DIR = REPO_ROOT / "specs"

_PY_TYPES = {
    "int": "int", "float": "float", "bool": "bool", "str": "str", "rope_scaling": "dict[str, Any] | None",
    "int_list": "list[int]", "str_list": "list[str]", "float_list": "list[float]",
}


# ------------------------------------------------------------------------------------------------- semantic lowering
# A decoder layer's layout fields (``decoder:`` defaults, block overrides) and the norms each residual style applies.
NORM_FIELDS = ("attention_norm", "attention_post_norm", "mlp_norm", "mlp_post_norm")
LAYOUT_FIELDS = ("residual",) + NORM_FIELDS + ("parallel", "residual_multiplier", "parallel_mlp_norm")
RESIDUAL_NORMS = {
    "pre_norm": frozenset({"attention_norm", "mlp_norm"}),
    "sandwich": frozenset(NORM_FIELDS),
    "post_norm": frozenset({"attention_post_norm", "mlp_post_norm"}),
}
# Decoder-layer methods that return a slot's module when its name differs between blocks.
ACCESSORS = {"attention": "get_attention", "mlp": "get_mlp"}
# Names the generated config module binds itself: a config field of that name would shadow them.
RESERVED_CONFIG_NAMES = CONFIG_CLASS_NAMES | {f"read_{t}" for t in _PY_TYPES}  # builtins: config_name_clash
# Identifier-valued fields that are not module names: the package name, the class prefix, a block reference.
_NOT_MODULE_NAMES = frozenset({("name",), ("class_prefix",), ("layers", "block")})


def _identifier_values(node: Any, path: tuple[Any, ...]) -> typing.Iterator[tuple[tuple[Any, ...], str]]:
    """(path, value) of every ``Identifier``-typed field below ``node``: module names of every block kind,
    found by type so a new kind's sub-module names are checked without a list to keep."""
    if isinstance(node, BaseModel):
        for name, info in type(node).model_fields.items():
            value = getattr(node, name)
            if isinstance(value, str) and _is_identifier_field(info):
                yield path + (name,), value
            else:
                yield from _identifier_values(value, path + (name,))
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _identifier_values(value, path + (key,))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _identifier_values(value, path + (i,))


def _is_identifier_field(info: Any) -> bool:
    def checks(meta: Any) -> bool:
        return getattr(meta, "func", None) is check_identifier

    if any(checks(m) for m in info.metadata):
        return True
    return any(typing.get_origin(a) is typing.Annotated and any(checks(m) for m in typing.get_args(a)[1:])
               for a in typing.get_args(info.annotation))


class _Lowerer:
    """Spec -> IR. Implements the :class:`~modelgen.codegen.blocks.LoweringContext` the block kinds lower with."""

    def __init__(self, spec: Spec, smap: SourceMap):
        self.spec = spec
        self.smap = smap
        self.issues: list[SpecIssue] = []
        self.known = list(spec.config) + list(spec.derived)

    def error(self, path: tuple[Any, ...], message: str, col_offset: int = 0, at_key: bool = False) -> None:
        issue = self.smap.issue(path, message, at_key=at_key)
        issue.col += col_offset
        self.issues.append(issue)

    def parse(self, path: tuple[Any, ...], value: Any, extra_names: tuple[str, ...] = ()) -> Expr | None:
        try:
            expr = parse_expr(value)
        except ExprError as e:
            self.error(path, str(e), 0)
            return None
        for n in sorted(expr.names):
            if n not in self.known and n not in extra_names:
                close = difflib.get_close_matches(n, self.known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.error(path, f"undefined config field '{n}'{hint}; declare it under `config:` or `derived:`")
                return None
        return expr

    @staticmethod
    def _typed(expr: Expr, rename: Any = lambda n: f"config.{n}") -> ir.Value:
        """A literal stays a literal (``Const(False)`` is the bool False); anything else is source over config."""
        body = expr.tree.body
        if isinstance(body, ast.Constant):
            return ir.Const(body.value)
        return ir.Code(py=expr.to_python(rename), spec=expr.to_spec())

    # -- the LoweringContext of the block kinds
    def value(self, path: tuple[Any, ...], value: Any) -> ir.Value:
        expr = self.parse(path, value)
        return self._typed(expr) if expr is not None else ir.Const(None)

    def optional(self, path: tuple[Any, ...], value: Any) -> ir.Value | None:
        return None if value is None else self.value(path, value)

    def norm(self, path: tuple[Any, ...], n: Any) -> ir.Norm:
        bias = ir.Const(n.kind == "layer_norm" and n.affine)  # nn.LayerNorm's default: a bias
        if n.bias is not None:
            bias = self.value(path + ("bias",), n.bias)
        return ir.Norm(name=n.name, kind=n.kind, eps=self.value(path + ("eps",), n.eps), bias=bias, affine=n.affine)

    def rope(self, p: tuple[Any, ...], r: Any) -> ir.Rope:
        # A NoPE layer rotates none of head_dim: the same code path as a partial factor of 0 (cos 1, sin 0).
        partial = self.value(p + ("partial_factor",), r.partial_factor if r.enabled else 0.0)
        return ir.Rope(
            style=r.style, theta=self.value(p + ("theta",), r.theta),
            scaling=self.optional(p + ("scaling",), r.scaling) or ir.Const(None),
            max_position=self.value(p + ("max_position",), r.max_position),
            partial_factor=None if partial.is_literal(1) else partial,
        )

    # -- config binding
    def config_values(self) -> tuple[ir.ConfigValue, ...]:
        values: dict[str, ir.ConfigValue] = {}
        deps: dict[str, set[str]] = {}
        for section, names in (("config", self.spec.config), ("derived", self.spec.derived)):
            for name in names:
                why = ("it is a name the generated config class uses itself" if name in RESERVED_CONFIG_NAMES
                       else config_name_clash(name))
                if why:
                    self.error((section, name), f"'{name}' cannot be a config field: {why}; rename the field and "
                                                "read the config key with `read:`", at_key=True)
        for name, f in self.spec.config.items():
            default = None
            deps[name] = set()
            if f.default is not None:
                expr = self.parse(("config", name, "default"), f.default)
                if expr is not None:
                    default = self._typed(expr, rename=lambda n: n)
                    deps[name] = set(expr.names)
            keys = tuple(f.read) if f.read else (name,)
            values[name] = ir.ConfigValue(
                name=name, py_type=_PY_TYPES[f.type], kind="read", reader=f"read_{f.type}", keys=keys,
                required=f.required, default=None if default == ir.Const(None) else default,
                # An explicit null of a nullable field is a value (Gemma 2 final_logit_softcapping: null = no cap),
                # not "use the default"; told apart by the key's presence (nested keys too: DBRX's
                # ffn_config.moe_normalize_expert_weights: null = no renormalisation).
                null_keys=keys if f.nullable else (),
            )
        for name, value in self.spec.derived.items():
            if name in self.spec.config:
                self.error(("derived", name), f"'{name}' is already a config field")
                continue
            expr = self.parse(("derived", name), value)
            deps[name] = set(expr.names) if expr else set()
            values[name] = ir.ConfigValue(
                name=name, py_type="Any", kind="derived",
                default=self._typed(expr, rename=lambda n: n) if expr else ir.Const(None),
            )
        # Stable topological order: declaration order, each value after what it reads.
        ordered: list[str] = []
        state: dict[str, int] = {}

        def visit(n: str, chain: tuple[str, ...]) -> None:
            if state.get(n) == 2:
                return
            if state.get(n) == 1:
                section = "config" if n in self.spec.config else "derived"
                self.error((section, n), "circular definition: " + " -> ".join(chain + (n,)))
                return
            state[n] = 1
            for d in sorted(deps.get(n, ())):
                if d in values:
                    visit(d, chain + (n,))
            state[n] = 2
            ordered.append(n)

        for n in values:
            visit(n, ())
        return tuple(values[n] for n in ordered)

    # -- blocks
    def _decoder_part(self, block: Any, field_: str) -> Any:
        """A block's residual / norm / layout option, else the spec's ``decoder:`` default."""
        value = getattr(block, field_)
        return getattr(self.spec.decoder, field_) if value is None else value

    def _layout_parts(self, key: str, b: Any) -> dict[str, Any]:
        """The block's layout fields (own or inherited), checked against its residual style: each style names the
        norms it applies, and a norm it would never apply is an error rather than a silently unused parameter."""
        parts = {f: self._decoder_part(b, f) for f in LAYOUT_FIELDS}
        residual = parts["residual"]
        if residual is None:
            self.error(("blocks", key), "no residual: give it in this block or under `decoder:`")
            return parts
        # A literally parallel layer (``parallel: true``, Cohere) applies no mlp_norm: both sub-layers read
        # attention_norm(x), so it needs none (a config-expression ``parallel`` still needs it for the serial case).
        always_parallel = parts["parallel"] is True
        if b.mlp is None or b.attention is None:  # one sub-layer: out = x + f(attention_norm(x))
            missing = "an mlp" if b.mlp is None else "an attention"
            if residual != "pre_norm" or parts["parallel"] is not None:
                self.error(("blocks", key), f"a block without {missing} takes residual pre_norm (and no parallel)")
            for field_ in ("attention_post_norm", "mlp_norm", "mlp_post_norm"):
                if parts[field_] is not None:
                    where = ("blocks", key, field_) if getattr(b, field_) is not None else ("blocks", key)
                    self.error(where, f"a block without {missing} applies no {field_} (its one norm is "
                                      "attention_norm)")
            if parts["attention_norm"] is None:
                self.error(("blocks", key), "no attention_norm: give it in this block or under `decoder:`")
            return parts
        for field_ in NORM_FIELDS:
            where = ("blocks", key, field_) if getattr(b, field_) is not None else ("blocks", key)
            if field_ == "mlp_norm" and always_parallel and parts[field_] is None:
                continue
            if field_ in RESIDUAL_NORMS[residual] and parts[field_] is None:
                self.error(where, f"no {field_}: give it in this block or under `decoder:` (residual {residual} needs it)")
            elif field_ not in RESIDUAL_NORMS[residual] and parts[field_] is not None:
                self.error(where, f"residual {residual} applies no {field_} "
                                  f"(it uses {', '.join(sorted(RESIDUAL_NORMS[residual]))})")
        if parts["parallel"] is not None and residual != "pre_norm":
            self.error(("blocks", key), f"parallel applies to residual pre_norm only, not {residual}")
        scale = self._decoder_part(b, "residual_scale")
        if scale is not None and (residual != "pre_norm" or parts["parallel"] is not None
                                  or parts["residual_multiplier"] is not None):
            self.error(("blocks", key), "residual_scale applies to a serial pre_norm layer without "
                                        "residual_multiplier (its output factors play that part)")
        if parts["parallel_mlp_norm"] not in (None, False) and (parts["parallel"] in (None, False)
                                                              or parts["mlp_norm"] is None):
            self.error(("blocks", key), "parallel_mlp_norm needs parallel and an mlp_norm (the MLP's own norm)")
        return parts

    def _residual_scale(self, p: tuple[Any, ...], scale: Any) -> ir.ResidualScale | None:
        """A block's ``residual_scale`` (own or the decoder's) as (residual, output) values per sub-layer."""
        if scale is None:
            return None
        return ir.ResidualScale(stream=scale.stream, **{
            sub: (self.value(p + (sub, "residual"), getattr(scale, sub).residual),
                  self.value(p + (sub, "output"), getattr(scale, sub).output))
            for sub in ("attention", "mlp")})

    def _mixer_scale(self, p: tuple[Any, ...], b: Any) -> tuple[tuple[ir.Value, ir.Value], ...] | None:
        """A block with a parallel mixer: ((attention input, output), (parallel mixer input, output)) factors."""
        if b.parallel_mixer is None:
            return None
        scale = b.mixer_scale
        if scale is None:
            return ((ir.Const(1), ir.Const(1)), (ir.Const(1), ir.Const(1)))
        return tuple((self.value(p + (sub, "input"), getattr(scale, sub).input),
                      self.value(p + (sub, "output"), getattr(scale, sub).output))
                     for sub in ("attention", "parallel_mixer"))

    def blocks(self) -> tuple[tuple[ir.Block, ...], tuple[ir.Module, ...]]:
        """Lower every block through its kinds, then name the classes: modules with equal class keys share a class
        (``<Prefix><suffix>``, numbered when a kind needs several). Returns (blocks, classes in definition order)."""
        lowered = []
        shared_of: dict[str, ir.Module] = {}
        for key, b in self.spec.blocks.items():
            p = ("blocks", key)
            parts = self._layout_parts(key, b)
            attn = None if b.attention is None else KINDS[b.attention.kind].lower(self, p + ("attention",), b.attention)
            mlp = None if b.mlp is None else KINDS[b.mlp.kind].lower(self, p + ("mlp",), b.mlp)
            lowered.append((key, b, parts, attn, mlp))
            if b.shared is not None:
                shared_of[key] = KINDS[b.shared.kind].lower(self, p + ("shared",), b.shared)
                if b.attention is None or b.mlp is not None or parts["residual"] != "pre_norm":
                    self.error(p + ("shared",), "a shared block runs before a mixer: give it to a pre_norm block "
                                                "whose only sub-layer is its attention")
        self._check_same_layout(lowered)
        if len({s.class_key() for s in shared_of.values()}) > 1:
            self.error(("blocks",), "shared blocks of different blocks must be identical (one shared block per model)")
        side = {key: KINDS[b.parallel_mixer.kind].lower(self, ("blocks", key, "parallel_mixer"), b.parallel_mixer)
                for key, b, *_ in lowered if b.parallel_mixer is not None}

        # Definition order: attentions, parallel mixers, then MLP-slot classes with what they build first.
        modules: list[ir.Module] = [a for *_, a, _ in lowered if a is not None] + list(side.values())
        for *_, m in lowered:
            modules += [*m.dependencies(), m] if m is not None else []
        modules += list(shared_of.values())
        keys: dict[str, list[ir.Module]] = {}
        for m in modules:
            same_kind = keys.setdefault(m.kind, [])
            if m.class_key() not in same_kind:
                same_kind.append(m.class_key())
        for kind, distinct in keys.items():
            if len(distinct) > 1 and KINDS[kind].ir.single_class:
                self.error(("blocks",), f"{kind} modules of different blocks must be identical (one class per model)")
        P = self.spec.class_prefix

        def class_name(m: ir.Module) -> str:
            distinct = keys[m.kind]
            return P + m.class_suffix + (str(distinct.index(m.class_key())) if len(distinct) > 1 else "")

        blocks = []
        for key, _, parts, a, m in lowered:
            p = ("blocks", key)
            norms = {f: self.norm(p + (f,), parts[f]) if parts[f] else None for f in NORM_FIELDS}
            parallel = self.value(p + ("parallel",), parts["parallel"]) if parts["parallel"] is not None else None
            blocks.append(ir.Block(
                key=key, residual=parts["residual"] or "pre_norm", attention=a.named(class_name) if a else None,
                mlp=m.named(class_name) if m is not None else None, **norms, parallel=parallel or ir.Const(False),
                residual_multiplier=self.optional(p + ("residual_multiplier",), parts["residual_multiplier"]),
                residual_scale=self._residual_scale(p + ("residual_scale",),
                                                    self._decoder_part(self.spec.blocks[key], "residual_scale")),
                parallel_mlp_norm=self.optional(p + ("parallel_mlp_norm",), parts["parallel_mlp_norm"]) or ir.Const(False),
                shared=shared_of[key].named(class_name) if key in shared_of else None,
                parallel_mixer=side[key].named(class_name) if key in side else None,
                mixer_scale=self._mixer_scale(p + ("mixer_scale",), self.spec.blocks[key]),
            ))
        classes: dict[str, ir.Module] = {}
        for m in modules:
            named = m.named(class_name)
            classes.setdefault(named.class_name, named)
        return tuple(blocks), tuple(classes.values())

    def _check_same_layout(self, lowered: list[tuple[Any, ...]]) -> None:
        """One decoder-layer class serves every block, so residual and norms must agree (module names may differ,
        as Qwen3-Next's ``linear_attn`` / ``self_attn``: the layer then reaches its module through an accessor)."""
        first_parts = lowered[0][2]
        streams = {key: getattr(self._decoder_part(b, "residual_scale"), "stream", None) for key, b, *_ in lowered}
        if len(set(streams.values())) > 1:
            self.error(("blocks", lowered[-1][0], "residual_scale"), "residual_scale must be given in every block or "
                       f"none, with one stream (one decoder-layer class): {streams}")
        for key, b, parts, *_ in lowered:
            first = lowered[0][1]
            if (b.mlp is None or b.attention is None) != (first.mlp is None or first.attention is None):
                self.error(("blocks", key), "blocks with one sub-layer and blocks with two cannot mix (one "
                                            "decoder-layer class)")
            for field_ in LAYOUT_FIELDS:
                if parts[field_] != first_parts[field_]:
                    where = ("blocks", key, field_) if getattr(b, field_) is not None else ("blocks", key)
                    self.error(where, f"{field_} must be the same in every block (one decoder-layer class)")
            if (b.parallel_mixer is None) != (first.parallel_mixer is None) or (
                    b.parallel_mixer is not None and b.parallel_mixer.name != first.parallel_mixer.name):
                self.error(("blocks", key), "parallel_mixer must be given in every block or none, with one name "
                                            "(one decoder-layer class)")
            if b.parallel_mixer is not None and parts["residual"] != "pre_norm":
                self.error(("blocks", key, "parallel_mixer"), "a parallel mixer is generated in residual pre_norm "
                                                                "layers only")
            if b.parallel_mixer is not None and b.parallel_mixer.kind == b.attention.kind:
                self.error(("blocks", key, "parallel_mixer", "kind"), "a parallel mixer of the attention's own kind "
                                                                        "is not generated (one cache per kind a layer)")
            for slot, module in (("attention", b.attention), ("mlp", b.mlp), ("parallel_mixer", b.parallel_mixer)):
                if module is None:
                    continue
                if slot == "parallel_mixer" and module.name in {b.attention.name, b.mlp.name}:
                    self.error(("blocks", key, slot, "name"), f"'{module.name}' is taken in the decoder layer")
                if module.name in ACCESSORS.values() or module.name in {parts[f].name for f in NORM_FIELDS
                                                                         if parts[f]}:
                    self.error(("blocks", key, slot, "name"), f"'{module.name}' is taken in the decoder layer")

    @staticmethod
    def rope_tables(classes: tuple[ir.Module, ...]) -> tuple[ir.RopeTable, ...]:
        """The distinct cos|sin tables of the rotary attentions, in class order: neuron builds each once per model
        and hands a layer its own (Gemma 3's sliding layers rotate with another base than its full ones)."""
        tables: list[ir.RopeTable] = []
        for t in (m.rope_table() for m in classes):
            if t is not None and t not in tables:
                tables.append(t)
        return tuple(tables)

    def checkpoint(self, classes: tuple[ir.Module, ...]) -> ir.Checkpoint:
        ck = self.spec.checkpoint
        # Any kind's fusions are accepted (a spec extending another may keep a fusion its own kinds do not use).
        allowed: dict[str, frozenset[Any]] = {}
        for kind in KINDS.values():
            allowed.update(kind.ir.fused_params)
        fusions = []
        for param, shards in ck.fuse.items():
            path = ("checkpoint", "fuse", param)
            if param not in allowed:
                close = difflib.get_close_matches(param, list(allowed), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.error(path, f"no fused parameter '{param}' in the generated model{hint}; known: {sorted(allowed)}")
                continue
            ids = set(shards)
            if ids != allowed[param]:
                self.error(path, f"shard ids {sorted(map(str, ids))} do not match {sorted(map(str, allowed[param]))}")
                continue
            fusions.append(ir.Fusion(param=param, shards=tuple(shards.items())))
        has_moe = any(m.uses_expert_names for m in classes)
        experts = None
        if ck.experts is not None:
            if not has_moe:
                self.error(("checkpoint", "experts"), "expert names given but no block has an moe mlp")
            pe = ck.experts.per_expert
            if not pe and not ck.experts.fused:
                self.error(("checkpoint", "experts"), "needs per_expert patterns, fused names, or both")
            # non-gated experts (moe gated: false, Nemotron-H) have an up and a down projection only
            ungated = any(not getattr(m, "gated", True) for m in classes if m.uses_expert_names)
            parts = {"up", "down"} if ungated else {"gate", "up", "down"}
            if pe and set(pe) != parts:
                self.error(("checkpoint", "experts", "per_expert"), "needs " + ("up and down (non-gated experts)"
                                                                                if ungated else "gate, up and down"))
            for k, v in pe.items():
                if "{e}" not in v:
                    self.error(("checkpoint", "experts", "per_expert", k), "pattern must contain {e} (expert index)")
            fused = ck.experts.fused or {}
            if fused and ungated and set(fused) != {"up", "down"}:
                self.error(("checkpoint", "experts", "fused"), "needs up and down (non-gated experts)")
            elif fused and not ungated and set(fused) not in ({"gate_up", "down"}, {"gate", "up", "down"}):
                self.error(("checkpoint", "experts", "fused"), "needs gate_up and down (or gate, up and down)")
            experts = ir.Experts(
                per_expert=tuple((k, pe[k]) for k in ("gate", "up", "down") if k in pe),
                fused=tuple((k, fused[k]) for k in ("gate_up", "gate", "up", "down") if k in fused),
            )
        elif has_moe:
            self.error(("checkpoint",), "an moe block needs checkpoint.experts (per-expert checkpoint names)")
        return ir.Checkpoint(
            prefix=ck.prefix, fusions=tuple(fusions), ignore=tuple(ck.ignore), rename=tuple(ck.rename.items()),
            experts=experts, splits=lower_splits(self, ck.split),
        )

    def requirement(self, n: int, req: Any) -> ir.Requirement | None:
        """The generated check raises when ``fails`` is true: ``not X`` fails on ``X``, anything else on
        ``not (...)`` (so a spec's ``not use_sliding_window`` never renders as ``not (not ...)``)."""
        expr = self.parse(("requires", n, "check"), req.check)
        if expr is None:
            return None
        body = expr.tree.body
        if isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not):
            fails = replace(expr, tree=ast.Expression(body=body.operand))
            return ir.Requirement(fails=self._typed(fails, rename=lambda n: n), message=req.message)
        src = expr.to_python()
        return ir.Requirement(fails=ir.Code(py=f"not ({src})", spec=f"not ({expr.to_spec()})"), message=req.message)

    def module_names(self) -> None:
        """Every module name of the spec is free of nn.Module's, Python's and the generated classes' own names."""
        for path, name in _identifier_values(self.spec, ()):
            why = None if path in _NOT_MODULE_NAMES else module_name_clash(name)
            if why:
                self.error(path, f"'{name}' cannot be a module name: {why}")

    def class_names(self, classes: tuple[ir.Module, ...]) -> None:
        """No class the prefix makes shadows a name the generated modules import."""
        P = self.spec.class_prefix
        made = [P + suffix for suffix in ("Config", "Model", "ForCausalLM", "ForCausalLMFactory", "DecoderLayer")]
        for name in dict.fromkeys(made + [m.class_name for m in classes]):
            if name in GENERATED_IMPORTS:
                self.error(("class_prefix",), f"class_prefix '{P}' makes a class {name}, which would shadow the "
                                              f"{name} the generated code imports; pick another prefix")

    def lower(self, spec_path: str, source_hash: str) -> ir.ModelIR:
        s = self.spec
        self.module_names()
        config_values = self.config_values()
        blocks, classes = self.blocks()
        self.class_names(classes)
        rule = None
        if s.layers.block is not None and s.layers.block not in s.blocks:
            self.error(("layers", "block"), f"no block named '{s.layers.block}'; blocks: {', '.join(s.blocks)}")
        if s.layers.block_rule is not None:
            expr = self.parse(("layers", "block_rule"), s.layers.block_rule, extra_names=("i",))
            if expr is not None:
                rule = ir.Code(py=expr.to_python(lambda n: n if n == "i" else f"self.{n}"), spec=expr.to_spec())
                for lit in _string_literals(expr):
                    if lit not in s.blocks:
                        self.error(("layers", "block_rule"), f"rule yields '{lit}', which is not a block ({', '.join(s.blocks)})")
        requires = [self.requirement(n, req) for n, req in enumerate(s.requires)]
        model = ir.ModelIR(
            spec_path=spec_path, source_hash=source_hash, name=s.name, class_prefix=s.class_prefix,
            description=s.description, architectures=tuple(s.hf.architectures), model_type=s.hf.model_type,
            modeling=s.hf.modeling, config_values=config_values,
            num_layers=self.value(("layers", "count"), s.layers.count),
            layer_block_rule=rule, blocks=blocks, classes=classes, rope_tables=self.rope_tables(classes),
            decoder_class=f"{s.class_prefix}DecoderLayer",
            requires=tuple(r for r in requires if r is not None),
            embedding_name=s.embedding.name,
            vocab_size=self.value(("embedding", "vocab_size"), s.embedding.vocab_size),
            hidden_size=self.value(("embedding", "hidden_size"), s.embedding.hidden_size),
            final_norm=self.norm(("final_norm",), s.final_norm),
            lm_head_name=s.lm_head.name, tie_embeddings=self.value(("lm_head", "tie"), s.lm_head.tie),
            checkpoint=self.checkpoint(classes),
            mtp=lower_mtp(self, s.mtp),
            config_ignore=tuple(s.config_ignore),
            embedding_multiplier=self.optional(("embedding", "multiplier"), s.embedding.multiplier),
            embedding_multiplier_dtype=s.embedding.multiplier_dtype,
            logits_divisor=self.optional(("lm_head", "divide_by"), s.lm_head.divide_by),
            logits_softcap=self.optional(("lm_head", "softcap"), s.lm_head.softcap),
            lm_head_bias=s.lm_head.bias,
        )
        if not self.issues:  # every expression evaluated against a sample config: type errors fail the build
            self.issues += evaluate_spec(self.spec, self.smap)
        if self.issues:
            raise SpecError(self.issues)
        return model


def _string_literals(expr: Expr) -> list[str]:
    """The string constants a rule can *return* (branches of conditionals), not those it compares against."""
    out: list[str] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.IfExp):
            walk(node.body)
            walk(node.orelse)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)

    walk(expr.tree.body)
    return out


def templates_digest(kinds: tuple[str, ...]) -> str:
    """Hash of the templates a model renders with: every template outside ``blocks/`` plus its kinds' partials, so
    adding a block kind leaves the hashes (and files) of models that do not use it alone."""
    h = hashlib.sha256()
    for p in sorted(TEMPLATES_DIR.rglob("*.j2")):
        rel = p.relative_to(TEMPLATES_DIR)
        if "blocks" in rel.parts[:-1] and p.name.removesuffix(".py.j2") not in kinds:
            continue
        if "draft" in rel.parts[:-1] and "mtp" not in kinds:  # the MTP draft template (codegen/mtp.py)
            continue
        h.update(rel.as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def compile_spec(path: str | Path) -> ir.ModelIR:
    """Load, validate and lower one spec file."""
    path = Path(path)
    spec, smap, text = load_spec(path)
    with shared_budget():  # every expression of this spec, parsed and evaluated, within one bound
        model = _Lowerer(spec, smap).lower(display_path(path), source_hash="")
    # The spec's text and, when it extends others, theirs: editing a base spec changes its children's hash.
    source = smap.source_text() or text
    digest = hashlib.sha256()
    for part in (source.encode(), templates_digest(model.kinds + (("mtp",) if model.mtp else ())).encode(), GENERATOR_VERSION.encode()):
        digest.update(part)
    sources = tuple((name, hashlib.sha256(t.encode("utf-8")).hexdigest()) for name, t in smap.sources)
    return replace(model, source_hash=digest.hexdigest()[:16], sources=sources)
