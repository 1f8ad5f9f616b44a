"""IR -> file contents, through the Jinja2 templates of ``templates/<target>/`` and ``templates/common/``.

Block kinds render through their partials, ``templates/<target>/blocks/<kind>.py.j2``: each is loaded as a module
whose macros the package templates call (codegen/blocks/_kind.py lists them), so the package templates never
branch on a kind.

Spec-derived text reaches Python source through exactly three filters (codegen/literal.py): ``lit`` (a Python
literal), ``doc`` (docstring text) and ``comment``; names go through ``ident``, which refuses anything that is not a
plain identifier (the schema already validated them; this is the generator's own guard). Values of the IR render
with ``.py``. Spec text in the README goes through the ``md_*`` filters (codegen/markdown.py).

Every Python file is parsed with libcst before it is returned: a template that renders invalid Python is a generator
bug, reported as :class:`CodegenError` naming the template and line. Output is normalised (no trailing whitespace,
at most two blank lines in a row, one final newline) so rebuilds are byte-identical and diffs stay clean.
"""
from __future__ import annotations

import ast
import functools
import re
import textwrap
from pathlib import Path
from typing import Callable, Iterable

import jinja2
import libcst

# The one list of targets (modelgen/targets.py, below compiler and runtime); build.py and the tests read it from here.
from modelgen.targets import TARGETS, check_target

from . import GENERATOR_VERSION
from .blocks import KINDS
from .errors import CodegenError
from .ir import Block, ModelIR, norm_module
from .literal import comment_text, docstring_text, pylit
from .markdown import md_code, md_comment, md_text, md_url
from .lower import ACCESSORS, SPECS_DIR, TEMPLATES_DIR, compile_spec
from .mtp import render_mtp
from .spec_types import check_identifier
from .vllm_names import vllm_norm_imports, vllm_norm_module, vllm_qk_norm, vllm_qk_norm_import

MAX_LINE = 120

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
    "vllm": {
        "__init__.py": "vllm/__init__.py.j2",
        "config.py": "common/config.py.j2",
        "model.py": "vllm/model.py.j2",
        "weights.py": "vllm/weights.py.j2",
        "README.md": "common/README.md.j2",
    },
}

ROOT_INIT = '"""Generated model code: generated/<target>/<model>/. Rebuild with `modelgen build --all`. Do not edit."""\n'


# ------------------------------------------------------------------------------------------------------------ filters
def _ident(name: str) -> str:
    try:
        return check_identifier(name)
    except ValueError as e:
        raise CodegenError(f"refusing to render a non-identifier as a name: {e}") from None


_FROM_IMPORT = re.compile(r"from ([\w.]+) import ([\w, ]+)")


def _merge_imports(text: str) -> str:
    """``from M import a, b`` lines (one per kind, repeats allowed) -> one sorted line per module, wrapped past
    MAX_LINE columns, so partials declare what they use and the model imports each name once."""
    names: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _FROM_IMPORT.fullmatch(line.strip())
        if m is None:
            raise CodegenError(f"import block: expected 'from MODULE import NAMES', got {line!r}")
        names.setdefault(m.group(1), set()).update(n.strip() for n in m.group(2).split(","))
    out = []
    for module in sorted(names):
        line = f"from {module} import {', '.join(sorted(names[module]))}"
        if len(line) > MAX_LINE:
            line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in sorted(names[module])) + ")"
        out.append(line)
    return "\n".join(out) + "\n"


def _per_block(ir: ModelIR, text_of: Callable[[Block], str], select: str, indent: str) -> str:
    """Lines doing ``text_of(block)`` for the layer's block: one line when every block renders the same, otherwise
    an if/elif/else over ``select`` (the layer's block name, from ``layers.block_rule``) with one branch per distinct
    line, in the blocks' order (``select in ("a", "b")`` where several blocks share it; the last is the ``else``)."""
    keys_of: dict[str, list[str]] = {}
    for b in ir.blocks:
        keys_of.setdefault(str(text_of(b)), []).append(b.key)
    if len(keys_of) == 1:
        lines = list(keys_of)
    else:
        lines = []
        for n, (text, keys) in enumerate(keys_of.items()):
            test = f"{select} == {pylit(keys[0])}" if len(keys) == 1 else f"{select} in {pylit(tuple(keys))}"
            lines.append("else:" if n == len(keys_of) - 1 else f"{'if' if n == 0 else 'elif'} {test}:")
            lines.append("    " + text)
    return "\n".join(indent + line for line in lines)


def _slot(ir: ModelIR, slot: str, owner: str) -> str:
    """How code reaches a layer's attention / MLP: ``owner.name``, or the layer's accessor when blocks name it
    differently (Qwen3-Next's ``linear_attn`` / ``self_attn``, as HF and vLLM name them per layer type)."""
    name = ir.slot_name(slot)
    return f"{owner}.{name}" if name else f"{owner}.{ACCESSORS[slot]}()"


def _accessors(ir: ModelIR) -> str:
    """Decoder-layer methods returning the module of each slot whose name differs between blocks."""
    methods = []
    for slot, method in ACCESSORS.items():
        if ir.slot_name(slot) is None and all(getattr(b, slot) is not None for b in ir.blocks):
            body = _per_block(ir, lambda b, slot=slot: f"return self.{getattr(b, slot).name}", "self.block", " " * 8)
            methods.append(f"    def {method}(self) -> nn.Module:\n"
                           f'        """This layer\'s {slot} module (its name depends on the layer\'s block)."""\n{body}\n')
    return "\n".join(methods).rstrip("\n")


def _blocks_differ(ir: ModelIR, text_of: Callable[[Block], str]) -> bool:
    return len({str(text_of(b)) for b in ir.blocks}) > 1


def _call(head: str, args: list[str], indent: int, tail: str = "", at: int = 0) -> str:
    """``head(arg, ...)tail`` at ``indent``: on one line when it fits MAX_LINE, else the arguments on one line of
    their own, else one argument per line (Black's three shapes); a string literal or list comprehension still too
    long for its line is split too (:func:`_split_arg`). ``at``: the columns a caller's block filter will add."""
    pad, inner = " " * indent, " " * (indent + 4)
    line = f"{pad}{head}({', '.join(args)}){tail}"
    if at + len(line) <= MAX_LINE:
        return line
    if at + len(inner) + len(", ".join(args)) <= MAX_LINE:
        return f"{pad}{head}(\n{inner}{', '.join(args)}\n{pad}){tail}"
    return f"{pad}{head}(\n" + "".join(f"{inner}{_split_arg(a, indent + 4, at)},\n" for a in args) + f"{pad}){tail}"


def _split_arg(arg: str, indent: int, at: int = 0) -> str:
    """``arg`` unchanged unless it is longer than its line and is one string literal (then adjacent literals of whole
    words, one per line, each made by the same literal writer, so escaping is unchanged) or a list comprehension
    (then its element and its ``for`` clause on lines of their own)."""
    if at + indent + len(arg) + 1 <= MAX_LINE:
        return arg
    comp = libcst.parse_expression(arg)
    if isinstance(comp, libcst.ListComp):
        # libcst's nodes carry their own text, parentheses included (ast's source segment of `(x.y)` is `x.y`); the
        # for_in clause holds every nested `for` and `if` of the comprehension
        code = libcst.Module([]).code_for_node
        inner, pad = " " * (indent + 4), " " * indent
        return f"[\n{inner}{code(comp.elt).strip()}\n{inner}{code(comp.for_in).strip()}\n{pad}]"
    node = ast.parse(arg, mode="eval").body
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return arg
    indent += at
    room = MAX_LINE - indent - 3  # quotes and the trailing comma
    parts, current = [], ""
    for word in re.split(r"(?<= )", node.value):  # keep each space with the word before it
        if current and len(pylit(current + word)) > room:
            parts.append(current)
            current = ""
        current += word
    parts.append(current)
    return ("\n" + " " * indent).join(pylit(p) for p in parts)


def _assign(target: str, expr: str, indent: int = 0, at: int = 0) -> str:
    """``target = expr`` at ``indent``; a call or tuple/list too long for the line is wrapped with :func:`_call`'s
    shapes (``expr`` is generated Python, parsed only to find where its arguments or elements split). ``at``: the
    columns a caller's block filter will add."""
    pad = " " * indent
    line = f"{pad}{target} = {expr}"
    if at + len(line) <= MAX_LINE:
        return line
    node = ast.parse(expr, mode="eval").body
    if isinstance(node, ast.Call):
        src = functools.partial(ast.get_source_segment, expr)  # the generated text itself, quotes and all
        args = [src(a) for a in node.args] + [f"{k.arg}={src(k.value)}" for k in node.keywords]
        return _call(f"{target} = {src(node.func)}", args, indent, at=at)
    if isinstance(node, (ast.Tuple, ast.List)):
        open_, close = ("(", ")") if isinstance(node, ast.Tuple) else ("[", "]")
        inner = " " * (indent + 4)
        elements = "".join(f"{inner}{ast.get_source_segment(expr, e)},\n" for e in node.elts)
        return f"{pad}{target} = {open_}\n{elements}{pad}{close}"
    return line


def _return_expr(py: str, indent: int) -> str:
    """``return <py>`` at ``indent``; a conditional expression too long for one line is split at ``if``/``else``,
    nested conditionals too (each in its own parentheses: ``a if c else b`` binds loosest), until the lines fit."""
    pad = " " * indent
    line = f"{pad}return {py}"
    node = ast.parse(py, mode="eval").body
    if len(line) <= MAX_LINE:
        return line
    if isinstance(node, ast.IfExp):
        return f"{pad}return (\n" + "\n".join(_conditional_lines(node, indent + 4)) + f"\n{pad})"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return f"{pad}return (\n" + "\n".join(_sum_lines(node, indent + 4)) + f"\n{pad})"
    return line


def _sum_lines(node: ast.BinOp, indent: int) -> list[str]:
    """``a + b + ...`` one operand a line (``+ b``), a conditional operand in parentheses and split as
    :func:`_conditional_lines` does when it does not fit (Llama 4's block rule: rotating-or-NoPE + dense-or-MoE)."""
    operands: list[ast.expr] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        operands.insert(0, node.right)
        node = node.left
    operands.insert(0, node)
    pad = " " * indent
    lines: list[str] = []
    for n, part in enumerate(operands):
        prefix, text = ("+ " if n else ""), ast.unparse(part)
        if not isinstance(part, (ast.IfExp, ast.BoolOp, ast.Compare)):
            lines.append(f"{pad}{prefix}{text}")
        elif len(pad) + len(prefix) + len(text) + 2 <= MAX_LINE or not isinstance(part, ast.IfExp):
            lines.append(f"{pad}{prefix}({text})")
        else:
            lines += [f"{pad}{prefix}(", *_conditional_lines(part, indent + 4), f"{pad})"]
    return lines


def _conditional_lines(node: ast.IfExp, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for prefix, part in (("", node.body), ("if ", node.test), ("else ", node.orelse)):
        text = ast.unparse(part)
        if not isinstance(part, ast.IfExp):
            lines.append(f"{pad}{prefix}{text}")
        elif len(pad) + len(prefix) + len(text) + 2 <= MAX_LINE:
            lines.append(f"{pad}{prefix}({text})")
        else:
            lines += [f"{pad}{prefix}(", *_conditional_lines(part, indent + 4), f"{pad})"]
    return lines


def _wrap_text(text: str, indent: int = 0) -> str:
    """Prose (already escaped by ``doc``) filled to MAX_LINE; escapes hold no spaces, so none is split."""
    return textwrap.fill(str(text), width=MAX_LINE - indent, break_long_words=False, break_on_hyphens=False,
                         subsequent_indent=" " * indent)


def _block(text: str, indent: int) -> str:
    """A macro's lines indented by ``indent`` spaces, without the macro's trailing newline."""
    pad = " " * indent
    return "\n".join(pad + line if line.strip() else "" for line in str(text).strip("\n").split("\n"))


# loader_tables keyword of a kind's partial -> field of runtime/loader/protocol.ExpertMapping.
EXPERT_TABLE_FIELDS = {"expert_mapping": "per_expert", "fused_expert_mapping": "fused",
                       "shared_expert_mapping": "shared"}


def _loader_tables(ir: ModelIR, partials: dict) -> dict[str, str]:
    """ExpertMapping field -> weights.py table, from the ``loader_tables`` macro of every kind that defines one
    (MoE's expert tables), so the package template builds ``get_expert_mapping()`` without knowing the kind."""
    tables: dict[str, str] = {}
    for m in ir.classes:
        macro = getattr(partials[m.kind], "loader_tables", None)
        for line in str(macro(m)).split() if macro else ():
            keyword, table = line.split("=")
            if keyword not in EXPERT_TABLE_FIELDS:
                raise CodegenError(f"templates/{KINDS[m.kind].partial('rocm')}: loader_tables: unknown table "
                                   f"keyword {keyword!r}; expected one of {', '.join(EXPERT_TABLE_FIELDS)}")
            tables[EXPERT_TABLE_FIELDS[keyword]] = _ident(table)
    return tables


def _readme_rows(ir: ModelIR, target: str) -> list[tuple[str, str]]:
    """Architecture rows of every block sub-module, each row once (a label repeats when blocks differ)."""
    rows: dict[tuple[str, str], None] = {}
    for b in ir.blocks:
        for m in (x for x in (b.attention, b.parallel_mixer, b.mlp) if x is not None):
            for row in m.readme_rows(target):
                rows.setdefault(row)
    return list(rows)


def _environment() -> jinja2.Environment:
    return _cached_environment(str(TEMPLATES_DIR))  # read at call time: tests point it at a copy


@functools.lru_cache(maxsize=4)
def _cached_environment(templates_dir: str) -> jinja2.Environment:
    """One environment per template folder: templates compile once per process (Jinja reloads edited files)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(
        lit=pylit, doc=docstring_text, comment=comment_text, wrap=_wrap_text, ident=_ident, imports=_merge_imports,
        block=_block, snake=lambda name: re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower(),
        md_text=md_text, md_code=md_code, md_comment=md_comment, md_url=md_url,
    )
    env.filters["tuple"] = tuple
    env.tests["endswith"] = lambda value, suffix: str(value).endswith(suffix)
    env.globals.update(
        per_block=_per_block, blocks_differ=_blocks_differ, readme_rows=_readme_rows, call=_call, assign=_assign,
        return_expr=_return_expr, loader_tables=_loader_tables, slot=_slot, accessors=_accessors,
        norm_module=norm_module, vllm_norm_module=vllm_norm_module, vllm_norm_imports=vllm_norm_imports,
        vllm_qk_norm=vllm_qk_norm, vllm_qk_norm_import=vllm_qk_norm_import,
    )
    return env


def _normalise(text: str) -> str:
    # split("\n"), not splitlines(): the literal filters escape every other line break, so none can reach here, and
    # splitting on U+2028 & co. would be a second, silent, opinion about where lines end.
    lines = [line.rstrip() for line in text.split("\n")]
    out = re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines)).strip("\n")
    return out + "\n"


def _context(ir: ModelIR, target: str, env: jinja2.Environment) -> dict:
    ck = ir.checkpoint
    qkv = ck.modules("qkv_proj", {"q": "q_proj", "k": "k_proj", "v": "v_proj"})
    gate_up = ck.modules("gate_up_proj", {0: "gate_proj", 1: "up_proj"})
    readers = sorted({"as_dict"} | {v.reader for v in ir.config_values if v.kind == "read"}
                     | ({"require"} if any(v.required for v in ir.config_values) else set())
                     | ({"ConfigError"} if ir.requires else set())
                     | ({"config_has"} if any(v.null_keys_nested and v.default is not None for v in ir.config_values)
                        else set()))
    ctx = {
        "ir": ir, "target": target, "version": GENERATOR_VERSION, "P": ir.class_prefix, "pre": ck.prefix,
        "readers": readers, "qkv": [qkv["q"], qkv["k"], qkv["v"]], "gate_up": [gate_up[0], gate_up[1]],
    }
    # Filled after the context exists: partials see each other through it (the MoE block builds the gated MLP).
    ctx["partials"] = partials = {}
    for kind in ir.kinds:
        partials[kind] = _partial(env, KINDS[kind].partial(target), ctx)
    return ctx


def _partial(env: jinja2.Environment, name: str, ctx: dict):
    try:
        return env.get_template(name).make_module(ctx)
    except jinja2.TemplateNotFound:
        raise CodegenError(f"templates/{name}: missing (every block kind needs one partial per target)") from None


def _check_python(text: str, template_name: str, where: str) -> None:
    try:
        libcst.parse_module(text)
    except libcst.ParserSyntaxError as e:
        raise CodegenError(
            f"templates/{template_name} rendered invalid Python for {where}:{e.raw_line}:{e.raw_column}): {e.message}"
        ) from None


def render_package(ir: ModelIR, target: str) -> dict[str, str]:
    """Relative path (under generated/) -> content, for one model on one target."""
    check_target(target)
    env = _environment()
    files: dict[str, str] = {}
    ctx: dict | None = None
    for out_name, template_name in PACKAGE_FILES[target].items():
        try:
            ctx = ctx or _context(ir, target, env)  # loads the kinds' partials: their errors are template errors too
            text = env.get_template(template_name).render(**ctx)
        except jinja2.TemplateError as e:
            line = getattr(e, "lineno", None)
            raise CodegenError(f"{_template_name(e, template_name)}{f':{line}' if line else ''}: "
                               f"{type(e).__name__}: {e}") from None
        text = _normalise(text)
        if out_name.endswith(".py"):
            _check_python(text, template_name, f"{ir.spec_path} ({target}/{ir.name}/{out_name}")
        files[f"{target}/{ir.name}/{out_name}"] = text
    try:
        drafted = render_mtp(ir, target, env, ctx or _context(ir, target, env))  # mtp.py when the spec has `mtp:`
    except jinja2.TemplateError as e:
        raise CodegenError(f"{_template_name(e, 'draft')}: {type(e).__name__}: {e}") from None
    if drafted is not None:
        template_name, text = drafted
        text = _normalise(text)
        _check_python(text, template_name, f"{ir.spec_path} ({target}/{ir.name}/mtp.py")
        files[f"{target}/{ir.name}/mtp.py"] = text
    return files


def _template_name(e: jinja2.TemplateError, default: str) -> str:
    """templates/<file> of the template that failed (a partial, when the error is in one)."""
    filename = getattr(e, "filename", None)
    if not filename:
        return f"templates/{default}"
    try:
        return "templates/" + Path(filename).resolve().relative_to(Path(TEMPLATES_DIR).resolve()).as_posix()
    except ValueError:
        return filename


def _target_init(target: str, irs: Iterable[ModelIR]) -> str:
    """The target package's index: architecture -> model package, as literal data, so the engine's registry imports
    only the package it runs (importing every generated package would run code of models nobody asked for)."""
    index: dict[str, ModelIR] = {}
    for ir in sorted(irs, key=lambda i: i.name):
        for arch in ir.architectures:
            if arch in index:
                raise CodegenError(f"{ir.spec_path}: hf.architectures: {arch} is already served by "
                                   f"{index[arch].spec_path}; one spec per architecture")
            index[arch] = ir
    lines = [f'"""Generated model packages for the {target} target (one per spec in specs/). Do not edit."""', "",
             "# HF architecture (config.json `architectures`) -> model package under this one.", "MODELS = {"]
    lines += [f"    {pylit(arch)}: {pylit(ir.name)}," for arch, ir in sorted(index.items())]
    return "\n".join(lines + ["}", ""])


def render_fixed(targets: tuple[str, ...] = TARGETS, irs: Iterable[ModelIR] | None = None) -> dict[str, str]:
    """The package markers around the model packages; each target's ``__init__`` indexes every spec in specs/
    (``irs``: the specs' IRs, or their compile-cache summaries, when the caller has them already)."""
    irs = list(irs) if irs is not None else [compile_spec(p) for p in sorted(SPECS_DIR.glob("*.yaml"))]
    files = {"__init__.py": ROOT_INIT}
    for t in targets:
        files[f"{t}/__init__.py"] = _target_init(t, irs)
    return files
