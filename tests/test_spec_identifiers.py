"""Identifiers and outputs (issue 27 item 6 / 11): names that would replace internals are refused at build, located;
a spec cannot take another spec's package; spec text in the generated README is escaped for Markdown and HTML."""
from __future__ import annotations

import ast
import re
import shutil
import time
from pathlib import Path

import pytest

from modelgen.codegen import build as build_module
from modelgen.codegen import reserved
from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import compile_spec
from tests.test_spec_bounds import llama_with
from modelgen.codegen.markdown import md_code, md_comment, md_text
from modelgen.codegen.render import render_package

REPO = Path(__file__).resolve().parent.parent
LLAMA = REPO / "specs" / "llama.yaml"
LOCATED = re.compile(r"^[^\n]+\.yaml:\d+:\d+: [^\n]+$")


def refused(p: Path, field: str, fragment: str, marker: str) -> str:
    """One located line, at the line holding ``marker``, naming ``field`` and saying ``fragment``."""
    start = time.perf_counter()
    with pytest.raises(SpecError) as e:
        compile_spec(p)
    assert time.perf_counter() - start < 10
    msg = str(e.value)
    assert LOCATED.match(msg), msg
    line = next(i for i, text in enumerate(p.read_text().splitlines(), 1) if marker in text)
    assert msg.startswith(f"{p}:{line}:") and f": {field}: " in msg and fragment in msg, msg
    return msg


ADDED_FIELD = "mlp_bias: {type: bool, default: false}"


# ------------------------------------------------------------------------------------------------- config fields
@pytest.mark.parametrize("name, fragment", [
    ("CONFIG_KEYS_READ", "uses itself"), ("from_hf_config", "uses itself"), ("CONFIG_KEYS_IGNORED", "uses itself"),
    ("layer_block", "uses itself"), ("neuron_config", "uses itself"), ("cfg", "uses itself"),
    ("read_int", "uses itself"), ("len", "Python builtin"), ("list", "Python builtin"), ("print", "Python builtin"),
    ("_private", "private"),
])
def test_config_fields_that_clash_are_refused(tmp_path, name, fragment):
    p = llama_with(tmp_path, ADDED_FIELD, f"{ADDED_FIELD}\n  {name}: {{type: bool, default: false}}")
    refused(p, f"config.{name}", fragment, f"  {name}: ")


# -------------------------------------------------------------------------------------------------- module names
@pytest.mark.parametrize("old, new, field, fragment", [
    ("name: self_attn", "name: forward", "blocks.decoder.attention.name", "torch.nn.Module"),
    ("name: self_attn", "name: training", "blocks.decoder.attention.name", "torch.nn.Module"),
    ("name: self_attn", "name: state_dict", "blocks.decoder.attention.name", "torch.nn.Module"),
    ("name: input_layernorm", "name: _parameters", "blocks.decoder.attention_norm.name", "private"),
    ("name: mlp", "name: compute_logits", "blocks.decoder.mlp.name", "engine calls"),
    ("name: lm_head", "name: load_weights", "lm_head.name", "engine calls"),
    ("{name: embed_tokens,", "{name: layers,", "embedding.name", "engine calls"),
    ("final_norm: {name: norm,", "final_norm: {name: config,", "final_norm.name", "engine calls"),
])
def test_module_names_that_clash_are_refused(tmp_path, old, new, field, fragment):
    refused(llama_with(tmp_path, old, new), field, fragment, new)


def test_class_prefix_that_shadows_an_import_is_refused(tmp_path):
    refused(llama_with(tmp_path, "class_prefix: Llama", "class_prefix: NeuronModel"), "class_prefix",
            "NeuronModelConfig", "class_prefix:")


def test_ordinary_names_still_build(tmp_path):
    compile_spec(llama_with(tmp_path, "name: self_attn", "name: attention"))


def test_nn_module_list_covers_torch():
    torch = pytest.importorskip("torch")
    public = {n for n in dir(torch.nn.Module()) if not n.startswith("_")}
    assert public <= reserved.NN_MODULE_ATTRIBUTES, sorted(public - reserved.NN_MODULE_ATTRIBUTES)


def test_generated_imports_list_matches_generated_code():
    imported = set()
    for path in (REPO / "generated").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                imported |= {a.asname or a.name for a in node.names}
    classes = {n for n in imported if n[:1].isupper() and not n.isupper()}
    # Model classes imported from a sibling module of the same package are the package's own, not a clash.
    own = {n for n in classes if any(n.startswith(p) and n != p for p in _prefixes())}
    assert classes - own <= reserved.GENERATED_IMPORTS, sorted(classes - own - reserved.GENERATED_IMPORTS)


def _prefixes() -> set[str]:
    return set(re.findall(r"^class_prefix: (\w+)", "\n".join(p.read_text() for p in (REPO / "specs").glob("*.yaml")),
                          re.M))


# ---------------------------------------------------------------------------------------------- package ownership
def test_out_of_tree_spec_named_like_a_committed_one_is_refused_into_generated(tmp_path, monkeypatch):
    generated = tmp_path / "generated"
    monkeypatch.setattr(build_module, "GENERATED_DIR", generated)
    p = tmp_path / "mine.yaml"
    shutil.copy(LLAMA, p)  # name: llama, outside specs/
    start = time.perf_counter()
    with pytest.raises(SpecError) as e:
        build_module.build([p], ("rocm",), out_dir=generated)
    assert time.perf_counter() - start < 30
    msg = str(e.value)
    assert LOCATED.match(msg) and msg.startswith(f"{p}:3:") and "belongs to specs/llama.yaml" in msg, msg
    assert not generated.exists()  # nothing written
    # Renamed, it builds (its own package, beside the committed ones).
    p.write_text(LLAMA.read_text().replace("name: llama", "name: my_llama", 1))
    written = build_module.build([p], ("rocm",), out_dir=generated)
    assert generated / "rocm" / "my_llama" / "model.py" in written


def test_a_spec_in_specs_must_be_named_after_its_file(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    specs.mkdir()
    monkeypatch.setattr(build_module, "SPECS_DIR", specs)
    shutil.copy(LLAMA, specs / "llama.yaml")
    shutil.copy(LLAMA, specs / "other.yaml")  # a second spec generating the llama package
    with pytest.raises(SpecError) as e:
        build_module.build([specs / "other.yaml"], ("rocm",), out_dir=tmp_path / "out")
    msg = str(e.value)
    assert LOCATED.match(msg) and msg.startswith(f"{specs / 'other.yaml'}:3:") and "named after its file" in msg
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ README escaping
HOSTILE = '<img src=x onerror=alert(1)> [click](javascript:alert(1)) | col `code` **bold** _em_ # & ~~s~~ <!-- x -->'


def test_markdown_filters():
    text = md_text(HOSTILE)
    assert "<" not in text and ">" not in text and "&lt;img" in text
    assert "\\[click\\]" in text and "\\|" in text and "\\`code\\`" in text and "\\*\\*bold" in text
    assert "\\_em\\_" in text and "clip_qkv" in md_text("optional clip_qkv")  # intraword _ stays readable
    assert md_text("# heading").startswith("\\#") and md_text("1. item").startswith("1\\.")
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``" and md_code("a|b", cell=True) == "`a\\|b`"
    assert "-->" not in md_comment("x --> y") and "\n" not in md_comment("a\nb")


def test_readme_escapes_spec_text(tmp_path):
    p = llama_with(tmp_path, "description: Dense decoder-only transformer with grouped-query attention, RoPE, a "
                             "SwiGLU MLP and RMSNorm.", f"description: {HOSTILE!r}")
    text = p.read_text()
    old_eps = "attention_norm: {name: input_layernorm, kind: rms, eps: rms_norm_eps}"
    assert old_eps in text
    text = text.replace(old_eps, old_eps.replace(
        "eps: rms_norm_eps", "eps: \"rms_norm_eps if hidden_act != 'a`|<b>' else 1e-5\""))
    p.write_text(text.replace("  model_type: llama", '  model_type: "llama`<b>|"'))
    files = render_package(compile_spec(p), "rocm")
    readme = next(t for rel, t in files.items() if rel.endswith("README.md"))
    # Free text: no raw HTML, no live link, emphasis or code.
    assert "<img" not in readme and "&lt;img src=x onerror=alert(1)&gt;" in readme
    assert "\\[click\\](javascript" in readme
    # Expression text: the string constant's markup characters are \x escapes, so its code span holds.
    assert r"eps `rms_norm_eps if hidden_act != 'a\x60\x7c\x3cb\x3e' else 1e-05` |" in readme, readme
    # Every table row keeps its column count: no cell text adds a `|`.
    for line in readme.splitlines():
        if line.startswith("|"):
            assert len(re.split(r"(?<!\\)\|", line)) in (4, 5), line
    # Other strings: a code span fenced longer than any backtick run inside.
    assert "(``model_type: llama`<b>|``)" in readme
    outside_code = readme.replace("``model_type: llama`<b>|``", "")  # inside a code span `<b>` is literal text
    assert outside_code.count("<") == outside_code.count("<!--") == 1  # the banner comment is the only markup
