"""Bad specs fail with ``file:LINE:COL: field: message`` and a failed build leaves generated/ untouched."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from modelgen.codegen.build import build
from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import compile_spec

LLAMA = Path(__file__).resolve().parent.parent / "specs" / "llama.yaml"


def broken(tmp_path: Path, old: str, new: str) -> Path:
    text = LLAMA.read_text()
    assert old in text, old
    p = tmp_path / "broken.yaml"
    p.write_text(text.replace(old, new, 1))
    return p


def line_col_of(path: Path, needle: str, on_line: str | None = None) -> tuple[int, int]:
    """1-based position of ``needle`` on the first line containing ``on_line`` (default: ``needle``)."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if (on_line or needle) in line:
            return i, line.index(needle) + 1
    raise AssertionError(needle)


def error_of(path: Path) -> str:
    with pytest.raises(SpecError) as e:
        compile_spec(path)
    return str(e.value)


def test_unknown_key_names_position_and_suggests(tmp_path):
    p = broken(tmp_path, "      qkv_bias: attention_bias", "      qkv_bais: attention_bias")
    line, col = line_col_of(p, "qkv_bais")
    msg = error_of(p)
    assert f"broken.yaml:{line}:{col}: blocks.decoder.attention.qkv_bais: unknown key 'qkv_bais'" in msg
    assert "did you mean 'qkv_bias'" in msg


def test_wrong_type(tmp_path):
    p = broken(tmp_path, "architectures: [LlamaForCausalLM]", "architectures: LlamaForCausalLM")
    line, col = line_col_of(p, "LlamaForCausalLM")
    msg = error_of(p)
    assert re.search(rf"broken.yaml:{line}:{col}: hf.architectures: .*(list|array)", msg), msg


def test_unknown_enum_value(tmp_path):
    p = broken(tmp_path, "style: rotate_half", "style: rotate_quarter")
    line, col = line_col_of(p, "rotate_quarter")
    msg = error_of(p)
    assert f"broken.yaml:{line}:{col}: blocks.decoder.attention.rope.style: got 'rotate_quarter'" in msg
    assert "rotate_half" in msg and "pairwise" in msg


def test_bad_expression(tmp_path):
    p = broken(tmp_path, "default: hidden_size // num_attention_heads", "default: __import__('os').system('x')")
    line, col = line_col_of(p, "__import__")
    msg = error_of(p)
    assert f"broken.yaml:{line}:{col}: config.head_dim.default:" in msg
    assert "not allowed" in msg or "only calls to" in msg


def test_expression_syntax_error(tmp_path):
    p = broken(tmp_path, "default: hidden_size // num_attention_heads", "default: hidden_size // ")
    assert re.search(r"broken.yaml:\d+:\d+: config.head_dim.default: invalid expression", error_of(p))


def test_undefined_config_field(tmp_path):
    p = broken(tmp_path, "num_kv_heads: num_key_value_heads", "num_kv_heads: num_key_value_head")
    line, col = line_col_of(p, "num_key_value_head", on_line="num_kv_heads:")
    msg = error_of(p)
    assert f"broken.yaml:{line}:{col}: blocks.decoder.attention.num_kv_heads: undefined config field" in msg
    assert "did you mean 'num_key_value_heads'" in msg


def test_missing_required_key(tmp_path):
    p = broken(tmp_path, "  model_type: llama\n", "")
    assert re.search(r"broken.yaml:\d+:\d+: hf.model_type: missing required key 'model_type'", error_of(p))


def test_fusion_must_match_generated_parameters(tmp_path):
    p = broken(tmp_path, "qkv_proj: {q: q_proj", "qkv_prj: {q: q_proj")
    assert "no fused parameter 'qkv_prj'" in error_of(p)


def test_yaml_syntax_error_has_position(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: llama\nconfig: {a: [1, 2}\n")
    assert re.search(r"broken.yaml:2:\d+: YAML syntax error", error_of(p))


def test_failed_build_leaves_generated_untouched(tmp_path):
    out = tmp_path / "generated"
    build([LLAMA], ("rocm",), out_dir=out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = broken(tmp_path, "style: rotate_half", "style: nope")
    with pytest.raises(SpecError):
        build([LLAMA, bad], ("rocm", "neuron"), out_dir=out)  # the good spec must not be written either
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not list(out.rglob("*.tmp"))


def test_template_bug_is_a_codegen_error_naming_the_template(tmp_path, monkeypatch):
    from modelgen.codegen import lower as codegen_lower
    from modelgen.codegen import render as codegen_render
    from modelgen.codegen.errors import CodegenError

    templates = tmp_path / "templates"
    shutil.copytree(codegen_lower.TEMPLATES_DIR, templates)
    model = templates / "rocm" / "weights.py.j2"
    model.write_text(model.read_text() + "\ndef broken(:\n")
    monkeypatch.setattr(codegen_render, "TEMPLATES_DIR", templates)
    with pytest.raises(CodegenError, match=r"templates/rocm/weights.py.j2 rendered invalid Python"):
        build([LLAMA], ("rocm",), out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_derived_values_are_compiled_into_the_config_class(tmp_path):
    """`derived:` expressions become plain Python in the generated from_hf_config (no spec read at run time)."""
    import sys
    import types

    from modelgen.codegen.render import render_package

    p = broken(tmp_path, "layers:\n", "derived:\n  num_kv_groups: num_attention_heads // num_key_value_heads\n"
               "  wide: \"'yes' if max(hidden_size, intermediate_size) > 100 else 'no'\"\nlayers:\n")
    files = render_package(compile_spec(p), "rocm")
    source = files["rocm/llama/config.py"]
    assert "num_kv_groups = num_attention_heads // num_key_value_heads" in source
    module = types.ModuleType("generated_config_under_test")
    sys.modules[module.__name__] = module  # dataclasses resolve annotations through sys.modules
    try:
        exec(compile(source, "config.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    cfg = module.LlamaConfig.from_hf_config({
        "vocab_size": 10, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 8, "num_key_value_heads": 2,
    })
    assert cfg.num_kv_groups == 4 and cfg.wide == "yes" and cfg.head_dim == 8


def test_circular_definition(tmp_path):
    p = broken(tmp_path, "default: hidden_size // num_attention_heads", "default: head_dim * 2 // num_attention_heads + vocab_size * 0 + head_dim")
    assert "circular definition: head_dim -> head_dim" in error_of(p)


def test_block_rule_must_name_blocks(tmp_path):
    p = broken(tmp_path, "  block: decoder", "  block_rule: \"'decoder' if i < 2 else 'encoder'\"")
    assert "rule yields 'encoder', which is not a block" in error_of(p)


def test_unsupported_config_is_refused_by_generated_code():
    from modelgen.generated.rocm.qwen3.config import Qwen3Config
    from modelgen.runtime.hf_config import ConfigError

    base = {"vocab_size": 10, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 4}
    assert Qwen3Config.from_hf_config(base).head_dim == 128
    with pytest.raises(ConfigError, match="specs/qwen3.yaml: sliding-window attention"):
        Qwen3Config.from_hf_config({**base, "use_sliding_window": True})
    with pytest.raises(ConfigError, match="'num_attention_heads'.*expected an integer"):
        Qwen3Config.from_hf_config({**base, "num_attention_heads": "four"})
