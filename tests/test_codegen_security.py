"""Hostile specs never become code: every string of a spec, set to an injection payload, is either refused with a
located ``file:line:col`` SpecError or reaches the generated modules only inside string literals (and comments).

Each payload carries MARKER; a generated file is safe when every token holding MARKER is a string or a comment, no
f-string holds it (f-strings evaluate), and no name, attribute or definition holds it.
"""
from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any, Iterator

import pytest

from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import compile_spec
from modelgen.codegen.render import TARGETS, render_package
from modelgen.codegen.yaml_source import load_yaml

REPO = Path(__file__).resolve().parent.parent
MARKER = "PWNED"
PAYLOADS = [
    f'a"{MARKER}',
    f"a'{MARKER}",
    f"{MARKER}\\",
    f"{MARKER}\nimport os",
    f'"""{MARKER}',
    "{" + MARKER + "}",
    "{__import__('os').system('" + MARKER + "')}",
    "\\N{" + MARKER + "}",
    f"x\u2028{MARKER} = 1",
    f'dense" or {MARKER} or "',
    f"{MARKER}\u2029\r\x0b\x85",
]
COMBINED = "".join(PAYLOADS)  # every class at once: escaping is per character, so one render checks them all
LOCATED = re.compile(r"^\S+\.yaml:\d+:\d+: ", re.M)
# Mappings whose keys the spec author names (config fields, blocks, fusions, renames): one site stands for all keys.
USER_KEYED = {("config",), ("derived",), ("blocks",), ("checkpoint", "fuse"), ("checkpoint", "fuse", "*"),
              ("checkpoint", "rename")}


def spec_data(name: str) -> dict[str, Any]:
    data, _ = load_yaml(REPO / "specs" / f"{name}.yaml")
    return data


def string_sites(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(path, "value" | "key") for every string value and every string mapping key of the spec."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str):
                yield path + (k,), "key"
            yield from string_sites(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from string_sites(v, path + (i,))
    elif isinstance(node, str):
        yield path, "value"


def schema_sites(data: dict) -> list[tuple[tuple, str]]:
    """One site per schema field (``config.*.default`` once, not once per config field), both specs' fields."""
    seen: dict[tuple, tuple[tuple, str]] = {}
    for path, site in string_sites(data):
        norm: tuple = ()
        for part in path:
            norm += ("*",) if norm in USER_KEYED or isinstance(part, int) else (part,)
        seen.setdefault((norm, site), (path, site))
    return list(seen.values())


def hostile_base() -> dict:
    """GLM4-MoE (router, shared and fused experts, QK norm, a block rule) plus Llama's ignore/rename/scale fields."""
    data = spec_data("glm4_moe")
    llama = spec_data("llama")
    data["checkpoint"]["ignore"] = llama["checkpoint"]["ignore"]
    data["checkpoint"]["rename"] = llama["checkpoint"]["rename"]
    data["derived"] = {"kv_groups": "num_attention_heads // num_key_value_heads"}
    data["requires"] = [{"check": "n_group >= 1", "message": "needs a group"}]
    data["config"]["head_dim"]["doc"] = "width of one head"
    data["blocks"]["sparse"]["attention"]["scale"] = "head_dim ** -0.5"
    return data


def with_payload(data: Any, path: tuple, site: str, payload: str) -> Any:
    data = json.loads(json.dumps(data))  # deep copy
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if site == "value":
        parent[last] = payload
    else:  # rename the key, keeping its position
        items = list(parent.items())
        parent.clear()
        parent.update({(payload if k == last else k): v for k, v in items})
    return data


def assert_payload_is_data(source: str, where: str) -> None:
    tree = ast.parse(source)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if MARKER in tok.string:
            assert tok.type in (tokenize.STRING, tokenize.COMMENT), f"{where}:{tok.start[0]}: {tok.string!r} is code"
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            assert MARKER not in ast.unparse(node), f"{where}:{node.lineno}: payload inside an f-string"
        names = [getattr(node, attr, None) for attr in ("id", "attr", "name", "asname", "arg", "module")]
        assert not any(isinstance(n, str) and MARKER in n for n in names), f"{where}: payload as a name: {node}"


def build_or_refuse(tmp_path: Path, data: dict, filename: str = "hostile.yaml") -> dict[str, str] | None:
    """Generated files, or None when the spec was refused with located errors."""
    spec = tmp_path / filename
    spec.write_text(json.dumps(data, ensure_ascii=True))  # JSON is YAML; \uXXXX keeps odd characters intact
    try:
        model = compile_spec(spec)
    except SpecError as e:
        assert e.issues and all(LOCATED.match(str(i)) for i in e.issues), str(e)
        return None
    files: dict[str, str] = {}
    for target in TARGETS:
        files.update(render_package(model, target))
    return files


def check_sites(tmp_path: Path, payloads: list[str]) -> tuple[int, int]:
    data = hostile_base()
    sites = schema_sites(data)
    assert len(sites) > 40  # the walk reaches the whole spec language
    accepted = refused = 0
    for path, site in sites:
        for payload in payloads:
            files = build_or_refuse(tmp_path, with_payload(data, path, site, payload))
            if files is None:
                refused += 1
                continue
            accepted += 1
            for rel, text in files.items():
                if rel.endswith(".py"):
                    assert_payload_is_data(text, f"{rel} ({'.'.join(map(str, path))} {site} = {payload!r})")
    return accepted, refused


def test_every_string_field_with_all_payload_classes(tmp_path):
    accepted, refused = check_sites(tmp_path, [COMBINED])
    # Free text (descriptions, messages, docs) is accepted and rendered; names, patterns and expressions are refused.
    assert accepted >= 5 and refused >= 40


@pytest.mark.slow
def test_every_string_field_with_each_payload(tmp_path):
    accepted, refused = check_sites(tmp_path, PAYLOADS)
    assert accepted and refused


def test_description_payloads_survive_as_text(tmp_path):
    """A description with ``\\N``, quotes and line separators builds, parses, and reads back unchanged."""
    text = 'Trained on C:\\Nets data; """quoted""" \\N{BULLET} \u2028 line {braces} \'single\''
    data = spec_data("llama")
    data["description"] = text
    files = build_or_refuse(tmp_path, data)
    assert files is not None
    for target in TARGETS:
        doc = ast.get_docstring(ast.parse(files[f"{target}/llama/model.py"]))
        assert " ".join(text.split()) in " ".join(doc.split())


def test_identifier_fields_are_located_errors(tmp_path):
    data = spec_data("llama")
    data["final_norm"]["name"] = "norm; import os"
    with pytest.raises(SpecError) as e:
        build_or_refuse_strict(tmp_path, data)
    assert re.search(r"hostile.yaml:\d+:\d+: final_norm.name: 'norm; import os' is not a Python identifier", str(e.value))
    data = spec_data("llama")
    data["blocks"]["decoder"]["mlp"]["name"] = "__class__"
    with pytest.raises(SpecError, match=r"blocks.decoder.mlp.name: '__class__' is a dunder name"):
        build_or_refuse_strict(tmp_path, data)
    data = spec_data("llama")
    data["checkpoint"]["prefix"] = "lambda"
    with pytest.raises(SpecError, match=r"checkpoint.prefix: 'lambda' is a Python keyword"):
        build_or_refuse_strict(tmp_path, data)


def test_tensor_name_grammar(tmp_path):
    data = spec_data("glm4_moe")
    data["checkpoint"]["experts"]["per_expert"]["gate"] = "experts.{i}.gate_proj.weight"
    with pytest.raises(SpecError, match=r"checkpoint.experts.per_expert.gate: .* is not an expert tensor-name pattern"):
        build_or_refuse_strict(tmp_path, data)
    data = spec_data("llama")
    data["checkpoint"]["ignore"] = ["model.{e}.x"]
    with pytest.raises(SpecError, match=r"checkpoint.ignore.0: .* is not a checkpoint key pattern"):
        build_or_refuse_strict(tmp_path, data)
    data = spec_data("llama")
    data["checkpoint"]["fuse"]["qkv_proj"]["q"] = "q_proj*"
    with pytest.raises(SpecError, match=r"checkpoint.fuse.qkv_proj.q: .* is not a tensor name"):
        build_or_refuse_strict(tmp_path, data)


def build_or_refuse_strict(tmp_path: Path, data: dict) -> None:
    spec = tmp_path / "hostile.yaml"
    spec.write_text(json.dumps(data, indent=1))
    compile_spec(spec)


def test_hostile_spec_file_name(tmp_path):
    """The spec's file name reaches banners (comments) and ``SPEC = ...`` (a literal) escaped."""
    name = "evil\"'\\{__import__('os')}\u2028" + MARKER + ".yaml"
    files = build_or_refuse(tmp_path, spec_data("llama"), filename=name)
    assert files is not None
    for rel, text in files.items():
        if rel.endswith(".py"):
            assert_payload_is_data(text, rel)
    init = ast.parse(files["rocm/llama/__init__.py"])
    spec_value = next(n.value.value for n in init.body if isinstance(n, ast.Assign) and n.targets[0].id == "SPEC")
    assert spec_value.endswith(name)


def test_registry_imports_only_the_model_it_runs():
    code = (
        "import sys\n"
        "from modelgen.runtime.engine.registry import find_model, model_index\n"
        "assert 'MixtralForCausalLM' in model_index('rocm')\n"
        "m = find_model(['LlamaForCausalLM'], 'rocm')\n"
        "loaded = sorted(n for n in sys.modules if n.startswith('modelgen.generated.rocm.') and n.count('.') == 3)\n"
        "print(m.__name__, loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "modelgen.generated.rocm.llama ['modelgen.generated.rocm.llama']"
