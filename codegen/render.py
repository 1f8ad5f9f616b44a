"""IR -> file contents, through the Jinja2 templates of ``templates/<target>/`` and ``templates/common/``.

Every Python file is parsed with libcst before it is returned: a template that renders invalid Python is a generator
bug, reported as :class:`CodegenError` naming the template and line. Output is normalised (no trailing whitespace,
at most two blank lines in a row, one final newline) so rebuilds are byte-identical and diffs stay clean.
"""
from __future__ import annotations

import re

import jinja2
import libcst

from . import GENERATOR_VERSION
from .errors import CodegenError
from .ir import Attention, ModelIR
from .lower import TEMPLATES_DIR

TARGETS = ("rocm", "neuron")

# Files of one generated model package: output name -> template.
PACKAGE_FILES = {
    "rocm": {
        "__init__.py": "rocm/__init__.py.j2",
        "config.py": "common/config.py.j2",
        "model.py": "rocm/model.py.j2",
        "weights.py": "rocm/weights.py.j2",
        "README.md": "common/README.md.j2",
    },
    "neuron": {
        "__init__.py": "neuron/__init__.py.j2",
        "config.py": "common/config.py.j2",
        "factory.py": "neuron/factory.py.j2",
        "model.py": "neuron/model.py.j2",
        "weights.py": "neuron/weights.py.j2",
        "README.md": "common/README.md.j2",
    },
}

# Fixed files around the model packages (package markers).
TARGET_INIT = '"""Generated model packages for the {target} target (one per spec in specs/). Do not edit."""\n'
ROOT_INIT = '"""Generated model code: generated/<target>/<model>/. Rebuild with `modelgen build --all`. Do not edit."""\n'


def _pytuple(items) -> str:
    items = list(items)
    if not items:
        return "()"
    return "(" + ", ".join(repr(tuple(i) if isinstance(i, (list, tuple)) else i) for i in items) + ("," if len(items) == 1 else "") + ")"


def _rotary_dim(a: Attention) -> str:
    if a.rope.partial_factor in ("1.0", "1"):
        return "self.head_dim"
    return f"int(self.head_dim * {a.rope.partial_factor})"


def _constructor(module) -> str:
    """Source that builds one attention / MLP / MoE module inside a decoder layer's ``__init__``."""
    if module.kind == "gated":
        return f"{module.class_name}(config, {module.intermediate_size})"
    if module.kind == "moe":
        return f"{module.class_name}(config)"
    return f"{module.class_name}(config, layer_idx)"


def _submodules(ir: ModelIR, indent: str) -> str:
    """Decoder-layer lines choosing each sub-module; a layer schedule with several blocks dispatches on
    ``config.layer_block(layer_idx)`` only for the slots whose module differs between blocks."""
    lines: list[str] = []
    slots = [(ir.blocks[0].attention.name, [(b.key, b.attention) for b in ir.blocks]),
             (ir.blocks[0].mlp.name, [(b.key, b.mlp) for b in ir.blocks])]
    if ir.layer_block_rule and any(len({m for _, m in mods}) > 1 for _, mods in slots):
        lines.append("block = config.layer_block(layer_idx)")
    for attr, mods in slots:
        distinct = list(dict.fromkeys(m for _, m in mods))
        if len(distinct) == 1:
            lines.append(f"self.{attr} = {_constructor(distinct[0])}")
            continue
        for n, (key, m) in enumerate(mods):
            if n == len(mods) - 1:
                lines.append("else:")
            else:
                lines.append(f"{'if' if n == 0 else 'elif'} block == \"{key}\":")
            lines.append(f"    self.{attr} = {_constructor(m)}")
    return "\n".join(indent + line for line in lines)


def _activation_class(mlp) -> str:
    return {"silu": "SiluAndMul", "gelu_tanh": "GeluTanhAndMul"}[mlp.activation]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["pytuple"] = _pytuple
    env.filters["cfg"] = lambda src: src.replace("config.", "")
    env.globals["rotary_dim"] = _rotary_dim
    env.globals["submodules"] = _submodules
    env.globals["dict"] = dict
    env.globals["activation_class"] = _activation_class
    return env


def _normalise(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    out = re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines)).strip("\n")
    return out + "\n"


def _context(ir: ModelIR, target: str) -> dict:
    fusions = {f.param: {eval_shard(s): m for s, m in f.shards} for f in ir.checkpoint.fusions}
    qkv = fusions.get("qkv_proj", {"q": "q_proj", "k": "k_proj", "v": "v_proj"})
    gate_up = fusions.get("gate_up_proj", {0: "gate_proj", 1: "up_proj"})
    readers = sorted({"as_dict"} | {v.reader for v in ir.config_values if v.kind == "read"}
                     | ({"require"} if any(v.required for v in ir.config_values) else set())
                     | ({"ConfigError"} if ir.requires else set()))
    return {
        "ir": ir, "target": target, "version": GENERATOR_VERSION, "P": ir.class_prefix, "pre": ir.checkpoint.prefix,
        "readers": readers,
        "qkv": [qkv["q"], qkv["k"], qkv["v"]], "gate_up": [gate_up[0], gate_up[1]],
        "activation_classes": sorted({_activation_class(m) for m in ir.mlps if m.kind == "gated"}),
    }


def eval_shard(src: str) -> object:
    """Shard ids are rendered as Python literals in the IR ('q', 0); read them back without eval."""
    import ast

    return ast.literal_eval(src)


def render_package(ir: ModelIR, target: str) -> dict[str, str]:
    """Relative path (under generated/) -> content, for one model on one target."""
    if target not in PACKAGE_FILES:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    env = _environment()
    ctx = _context(ir, target)
    files: dict[str, str] = {}
    for out_name, template_name in PACKAGE_FILES[target].items():
        try:
            text = env.get_template(template_name).render(**ctx)
        except jinja2.TemplateError as e:
            line = getattr(e, "lineno", None)
            raise CodegenError(f"templates/{template_name}{f':{line}' if line else ''}: {type(e).__name__}: {e}") from None
        text = _normalise(text)
        if out_name.endswith(".py"):
            try:
                libcst.parse_module(text)
            except libcst.ParserSyntaxError as e:
                raise CodegenError(
                    f"templates/{template_name} rendered invalid Python for {ir.spec_path} ({target}/{ir.name}/"
                    f"{out_name}:{e.raw_line}:{e.raw_column}): {e.message}"
                ) from None
        files[f"{target}/{ir.name}/{out_name}"] = text
    return files


def render_fixed(targets: tuple[str, ...] = TARGETS) -> dict[str, str]:
    files = {"__init__.py": ROOT_INIT}
    for t in targets:
        files[f"{t}/__init__.py"] = TARGET_INIT.format(target=t)
    return files
