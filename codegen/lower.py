"""Spec file -> validated :class:`~modelgen.codegen.ir.ModelIR`.

Three passes, each reporting every problem it finds (not just the first) as ``file:line:col: field: message``:
  1. YAML syntax (codegen/yaml_source.py);
  2. the schema (codegen/schema.py), pydantic errors mapped back to source positions, unknown keys with a suggestion;
  3. semantics: expressions parse and use only defined config fields, the config binding has no cycles, the layer
     schedule names existing blocks, fusions match the parameters the templates create.
"""
from __future__ import annotations

import difflib
import hashlib
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from . import GENERATOR_VERSION, ir
from .errors import SpecError, SpecIssue
from .expr import Expr, ExprError, parse_expr
from .schema import Spec
from .yaml_source import SourceMap, load_yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = REPO_ROOT / "templates"
SPECS_DIR = REPO_ROOT / "specs"

# The fused parameters the templates create per block kind, with the shard ids their weight loaders accept.
FUSED_PARAMS = {
    ("attention", "gqa"): {"qkv_proj": {"q", "k", "v"}},
    ("mlp", "gated"): {"gate_up_proj": {0, 1}},
}
_PY_TYPES = {
    "int": "int", "float": "float", "bool": "bool", "str": "str", "rope_scaling": "dict[str, Any] | None",
    "int_list": "list[int]", "str_list": "list[str]",
}


def display_path(path: Path) -> str:
    """Repo-relative path for banners and error messages (absolute when outside the repo)."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------- schema error mapping
def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        out = []
        for a in typing.get_args(tp):
            out += _unwrap(a)
        return out
    return [tp]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the last element of ``loc`` (for 'did you mean')."""
    current: list[Any] = [Spec]
    for part in loc[:-1]:
        nxt: list[Any] = []
        for tp in current:
            if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
                nxt += _unwrap(tp.model_fields[part].annotation)
            elif typing.get_origin(tp) is dict:
                nxt += _unwrap(typing.get_args(tp)[1])
            elif typing.get_origin(tp) is list:
                nxt += _unwrap(typing.get_args(tp)[0])
        current = nxt
    for tp in current:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
    return None


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop the parts of a pydantic ``loc`` that are not in the data (union tags, validator names)."""
    path: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
    return tuple(path)


def _schema_issues(err: ValidationError, data: Any, smap: SourceMap) -> list[SpecIssue]:
    issues = []
    seen = set()
    for e in err.errors():
        loc = tuple(e["loc"])
        path = _data_path(data, loc)
        if e["type"] == "extra_forbidden":
            model = _model_at(loc)
            key = loc[-1]
            msg = f"unknown key '{key}'"
            if model is not None:
                close = difflib.get_close_matches(str(key), list(model.model_fields), n=1)
                msg += f" (did you mean '{close[0]}'?)" if close else f"; allowed: {', '.join(model.model_fields)}"
            issue = smap.issue(path, msg, at_key=True)
        elif e["type"] == "missing":
            issue = smap.issue(path, f"missing required key '{loc[-1]}'")
            issue.field = ".".join(str(p) for p in path + (loc[-1],))
        else:
            msg = e["msg"]
            if e["type"] == "literal_error":
                msg = f"got {e.get('input')!r}; {msg.lower()}"
            issue = smap.issue(path, msg)
        if str(issue) not in seen:
            seen.add(str(issue))
            issues.append(issue)
    return issues


def load_spec(path: str | Path) -> tuple[Spec, SourceMap, str]:
    """Parse + schema-validate a spec file; returns (spec, source map, raw text)."""
    path = Path(path)
    name = display_path(path)
    data, smap = load_yaml(path, name)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_schema_issues(err, data, smap)) from None
    return spec, smap, path.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------- semantic lowering
class _Lowerer:
    def __init__(self, spec: Spec, smap: SourceMap):
        self.spec = spec
        self.smap = smap
        self.issues: list[SpecIssue] = []
        self.known = list(spec.config) + list(spec.derived)

    def error(self, path: tuple[Any, ...], message: str, col_offset: int = 0) -> None:
        issue = self.smap.issue(path, message)
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

    def src(self, path: tuple[Any, ...], value: Any) -> str:
        """Python source of an expression over ``config.<field>``."""
        expr = self.parse(path, value)
        return expr.to_python(lambda n: f"config.{n}") if expr else "None"

    # -- config binding
    def config_values(self) -> tuple[ir.ConfigValue, ...]:
        values: dict[str, ir.ConfigValue] = {}
        deps: dict[str, set[str]] = {}
        for name, f in self.spec.config.items():
            default_src = None
            deps[name] = set()
            if f.default is not None:
                expr = self.parse(("config", name, "default"), f.default)
                if expr is not None:
                    default_src = expr.to_python()
                    deps[name] = set(expr.names)
            keys = tuple(f.read) if f.read else (name,)
            values[name] = ir.ConfigValue(
                name=name, py_type=_PY_TYPES[f.type], kind="read", reader=f"read_{f.type}", keys=keys,
                required=f.required, nullable=f.nullable, default_src=default_src, doc=f.doc or "",
            )
        for name, value in self.spec.derived.items():
            if name in self.spec.config:
                self.error(("derived", name), f"'{name}' is already a config field")
                continue
            expr = self.parse(("derived", name), value)
            deps[name] = set(expr.names) if expr else set()
            values[name] = ir.ConfigValue(
                name=name, py_type="Any", kind="derived", default_src=expr.to_python() if expr else "None"
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
    def norm(self, path: tuple[Any, ...], n: Any) -> ir.Norm:
        return ir.Norm(name=n.name, kind=n.kind, eps=self.src(path + ("eps",), n.eps))

    def attention(self, p: tuple[Any, ...], a: Any) -> ir.Attention:
        rope = ir.Rope(
            style=a.rope.style,
            theta=self.src(p + ("rope", "theta"), a.rope.theta),
            scaling=self.src(p + ("rope", "scaling"), a.rope.scaling) if a.rope.scaling is not None else "None",
            max_position=self.src(p + ("rope", "max_position"), a.rope.max_position),
            partial_factor=self.src(p + ("rope", "partial_factor"), a.rope.partial_factor),
        )
        qk = None
        if a.qk_norm is not None:
            q = a.qk_norm
            qk = ir.QKNorm(
                kind=q.kind, eps=self.src(p + ("qk_norm", "eps"), q.eps),
                enabled=self.src(p + ("qk_norm", "enabled"), q.enabled), q_name=q.q_name, k_name=q.k_name,
            )
        return ir.Attention(
            class_name="", name=a.name, kind=a.kind,
            num_heads=self.src(p + ("num_heads",), a.num_heads),
            num_kv_heads=self.src(p + ("num_kv_heads",), a.num_kv_heads),
            head_dim=self.src(p + ("head_dim",), a.head_dim),
            qkv_bias=self.src(p + ("qkv_bias",), a.qkv_bias),
            o_bias=self.src(p + ("o_bias",), a.o_bias),
            scale=self.src(p + ("scale",), a.scale) if a.scale is not None else "",
            qk_norm=qk, rope=rope, kv_cache_kind=a.kv_cache.kind,
        )

    def mlp(self, p: tuple[Any, ...], m: Any) -> ir.MLP | ir.MoE:
        if m.kind == "gated":
            return ir.MLP(
                class_name="", name=m.name, kind=m.kind, activation=m.activation,
                intermediate_size=self.src(p + ("intermediate_size",), m.intermediate_size),
                bias=self.src(p + ("bias",), m.bias),
            )
        r, rp = m.router, p + ("router",)
        if (r.n_group is None) != (r.topk_group is None):
            self.error(rp, "grouped top-k needs both n_group and topk_group")
        router = ir.Router(
            name=r.name, scoring=r.scoring, top_k=self.src(rp + ("top_k",), r.top_k),
            renormalize=self.src(rp + ("renormalize",), r.renormalize),
            n_group=self.src(rp + ("n_group",), r.n_group) if r.n_group is not None else "None",
            topk_group=self.src(rp + ("topk_group",), r.topk_group) if r.topk_group is not None else "None",
            correction_bias=r.correction_bias,
            routed_scaling_factor=self.src(rp + ("routed_scaling_factor",), r.routed_scaling_factor),
            float32=r.float32, weights_in_model_dtype=r.weights_in_model_dtype,
        )
        shared = None
        if m.shared_experts is not None:
            se, sp = m.shared_experts, p + ("shared_experts",)
            shared = ir.SharedExperts(
                name=se.name, count=self.src(sp + ("count",), se.count),
                intermediate_size=self.src(sp + ("intermediate_size",), se.intermediate_size), fuse=se.fuse,
            )
        return ir.MoE(
            class_name="", name=m.name, kind=m.kind, num_experts=self.src(p + ("num_experts",), m.num_experts),
            intermediate_size=self.src(p + ("intermediate_size",), m.intermediate_size), activation=m.activation,
            router=router, shared=shared, experts_name=m.experts_name, mlp_class="",
        )

    def blocks(self) -> tuple[tuple[ir.Block, ...], tuple[ir.Attention, ...], tuple[Any, ...]]:
        """Lower every block. Blocks share classes: one attention class per distinct attention, one gated-MLP class
        (it takes its width at construction, so dense layers and shared experts use the same class), one MoE class.
        Returns (blocks, distinct attentions, distinct MLPs with the gated class first)."""
        P = self.spec.class_prefix
        lowered = []
        for key, b in self.spec.blocks.items():
            p = ("blocks", key)
            lowered.append((key, b, self.attention(p + ("attention",), b.attention), self.mlp(p + ("mlp",), b.mlp)))
        self._check_same_layout(lowered)

        distinct_attn = list(dict.fromkeys(a for _, _, a, _ in lowered))
        attn_class = {a: f"{P}Attention" if len(distinct_attn) == 1 else f"{P}Attention{n}"
                      for n, a in enumerate(distinct_attn)}
        gated_shapes = {replace(m, intermediate_size="") for *_, m in lowered if isinstance(m, ir.MLP)}
        moes = list(dict.fromkeys(m for *_, m in lowered if isinstance(m, ir.MoE)))
        if len(gated_shapes) > 1:
            self.error(("blocks",), "dense MLPs of different blocks must agree in activation and bias")
        if len(moes) > 1:
            self.error(("blocks",), "MoE blocks of different layers must be identical")
        if not gated_shapes and any(m.shared is not None for m in moes):
            # Shared experts with no dense layer still need the gated-MLP class.
            gated_shapes = {ir.MLP(class_name="", name="mlp", kind="gated", activation="silu", intermediate_size="",
                                   bias="False")}

        blocks = []
        for key, b, a, m in lowered:
            if isinstance(m, ir.MLP):
                m = replace(m, class_name=f"{P}MLP")
            else:
                m = replace(m, class_name=f"{P}SparseMoeBlock", mlp_class=f"{P}MLP")
            p = ("blocks", key)
            blocks.append(ir.Block(
                key=key, residual=b.residual, attention_norm=self.norm(p + ("attention_norm",), b.attention_norm),
                attention=replace(a, class_name=attn_class[a]), mlp_norm=self.norm(p + ("mlp_norm",), b.mlp_norm),
                mlp=m,
            ))
        gated = [replace(g, class_name=f"{P}MLP") for g in gated_shapes]
        sparse = list(dict.fromkeys(b.mlp for b in blocks if isinstance(b.mlp, ir.MoE)))
        return tuple(blocks), tuple(dict.fromkeys(b.attention for b in blocks)), tuple(gated + sparse)

    def _check_same_layout(self, lowered: list[tuple[str, Any, Any, Any]]) -> None:
        """One decoder-layer class serves every block, so norms and module names must agree across blocks."""
        first = lowered[0][1]
        for key, b, _, _ in lowered:
            for field_ in ("attention_norm", "mlp_norm"):
                if getattr(b, field_) != getattr(first, field_):
                    self.error(("blocks", key, field_), f"{field_} must be the same in every block")
            if b.attention.name != first.attention.name or b.mlp.name != first.mlp.name:
                self.error(("blocks", key), "attention / mlp module names must be the same in every block")

    def checkpoint(self) -> ir.Checkpoint:
        ck = self.spec.checkpoint
        allowed: dict[str, set[Any]] = {}
        for b in self.spec.blocks.values():
            allowed.update(FUSED_PARAMS.get(("attention", b.attention.kind), {}))
            allowed.update(FUSED_PARAMS.get(("mlp", "gated"), {}))  # dense MLPs and shared experts
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
            fusions.append(ir.Fusion(param=param, shards=tuple((repr(k), v) for k, v in shards.items())))
        has_moe = any(b.mlp.kind == "moe" for b in self.spec.blocks.values())
        experts = None
        if ck.experts is not None:
            if not has_moe:
                self.error(("checkpoint", "experts"), "expert names given but no block has an moe mlp")
            pe = ck.experts.per_expert
            if set(pe) != {"gate", "up", "down"}:
                self.error(("checkpoint", "experts", "per_expert"), "needs gate, up and down")
            for k, v in pe.items():
                if "{e}" not in v:
                    self.error(("checkpoint", "experts", "per_expert", k), "pattern must contain {e} (expert index)")
            fused = ck.experts.fused or {}
            if fused and set(fused) != {"gate_up", "down"}:
                self.error(("checkpoint", "experts", "fused"), "needs gate_up and down")
            experts = ir.Experts(
                per_expert=tuple((k, pe[k]) for k in ("gate", "up", "down") if k in pe),
                fused=tuple((k, fused[k]) for k in ("gate_up", "down") if k in fused),
            )
        elif has_moe:
            self.error(("checkpoint",), "an moe block needs checkpoint.experts (per-expert checkpoint names)")
        return ir.Checkpoint(
            prefix=ck.prefix, fusions=tuple(fusions), ignore=tuple(ck.ignore), rename=tuple(ck.rename.items()),
            experts=experts,
        )

    def lower(self, spec_path: str, source_hash: str, text: str) -> ir.ModelIR:
        s = self.spec
        config_values = self.config_values()
        blocks, attentions, mlps = self.blocks()
        rule_src = None
        if s.layers.block is not None and s.layers.block not in s.blocks:
            self.error(("layers", "block"), f"no block named '{s.layers.block}'; blocks: {', '.join(s.blocks)}")
        if s.layers.block_rule is not None:
            expr = self.parse(("layers", "block_rule"), s.layers.block_rule, extra_names=("i",))
            if expr is not None:
                rule_src = expr.to_python(lambda n: n if n == "i" else f"self.{n}")
                for lit in _string_literals(expr):
                    if lit not in s.blocks:
                        self.error(("layers", "block_rule"), f"rule yields '{lit}', which is not a block ({', '.join(s.blocks)})")
        requires = []
        for n, req in enumerate(s.requires):
            expr = self.parse(("requires", n, "check"), req.check)
            if expr is not None:
                requires.append((expr.to_python(), req.message))
        model = ir.ModelIR(
            spec_path=spec_path, source_hash=source_hash, name=s.name, class_prefix=s.class_prefix,
            description=s.description, architectures=tuple(s.hf.architectures), model_type=s.hf.model_type,
            modeling=s.hf.modeling, config_values=config_values,
            num_layers=self.src(("layers", "count"), s.layers.count),
            layer_block=s.layers.block, layer_block_rule=rule_src, blocks=blocks,
            attentions=attentions, mlps=mlps, decoder_class=f"{s.class_prefix}DecoderLayer",
            requires=tuple(requires),
            embedding_name=s.embedding.name,
            vocab_size=self.src(("embedding", "vocab_size"), s.embedding.vocab_size),
            hidden_size=self.src(("embedding", "hidden_size"), s.embedding.hidden_size),
            final_norm=self.norm(("final_norm",), s.final_norm),
            lm_head_name=s.lm_head.name, tie_embeddings=self.src(("lm_head", "tie"), s.lm_head.tie),
            checkpoint=self.checkpoint(), spec_text=text,
        )
        if self.issues:
            raise SpecError(self.issues)
        return model


def _string_literals(expr: Expr) -> list[str]:
    """The string constants a rule can *return* (branches of conditionals), not those it compares against."""
    import ast

    out: list[str] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.IfExp):
            walk(node.body)
            walk(node.orelse)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)

    walk(expr.tree.body)
    return out


def templates_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(TEMPLATES_DIR.rglob("*.j2")):
        h.update(p.relative_to(TEMPLATES_DIR).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def compile_spec(path: str | Path) -> ir.ModelIR:
    """Load, validate and lower one spec file."""
    path = Path(path)
    spec, smap, text = load_spec(path)
    digest = hashlib.sha256()
    for part in (text.encode(), templates_digest().encode(), GENERATOR_VERSION.encode()):
        digest.update(part)
    return _Lowerer(spec, smap).lower(display_path(path), digest.hexdigest()[:16], text)
