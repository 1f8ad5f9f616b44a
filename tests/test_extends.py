"""Spec inheritance (`extends:`): merge semantics, errors located in the file that set the value, cycles, confinement.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import compile_spec
from modelgen.codegen.yaml_source import load_yaml

SPECS = Path(__file__).resolve().parent.parent / "specs"

CHILD_HEAD = """\
extends: base.yaml
name: child
class_prefix: Child
description: A test child.
hf: {architectures: [ChildForCausalLM], model_type: child, modeling: none}
"""


@pytest.fixture()
def specdir(tmp_path: Path) -> Path:
    shutil.copy(SPECS / "llama.yaml", tmp_path / "base.yaml")
    return tmp_path


def write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text)
    return p


def line_of(path: Path, needle: str) -> tuple[int, int]:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i, line.index(needle) + 1
    raise AssertionError(needle)


def spec_error(path: Path) -> str:
    with pytest.raises(SpecError) as e:
        compile_spec(path)
    return str(e.value)


def yaml_error(path: Path) -> str:
    with pytest.raises(SpecError) as e:
        load_yaml(path)
    return str(e.value)


# ------------------------------------------------------------------------------------------------ merge semantics
def test_committed_children_are_deltas_over_llama():
    llama, _ = load_yaml(SPECS / "llama.yaml")
    qwen3, smap = load_yaml(SPECS / "qwen3.yaml", "specs/qwen3.yaml")
    # identity keys are the child's own
    assert qwen3["name"] == "qwen3" and qwen3["hf"]["architectures"] == ["Qwen3ForCausalLM"]
    # mapping keys merge: the override keeps the base's type and position, new fields come last
    assert qwen3["config"]["head_dim"] == {"type": "int", "default": 128}
    assert list(qwen3["config"])[:6] == list(llama["config"])[:6]
    assert list(qwen3["config"])[-1] == "use_sliding_window"
    assert "mlp_bias" not in qwen3["config"] and "bias" not in qwen3["blocks"]["decoder"]["mlp"]  # !remove
    assert "ignore" not in qwen3["checkpoint"] and qwen3["checkpoint"]["fuse"] == llama["checkpoint"]["fuse"]
    # inherited values are located in llama.yaml, overridden/added ones in qwen3.yaml
    assert smap.file_of(("blocks", "decoder", "attention", "rope", "style")) == "specs/llama.yaml"
    assert smap.file_of(("blocks", "decoder", "attention", "qk_norm", "eps")) == "specs/qwen3.yaml"
    assert smap.file_of(("config", "max_position_embeddings", "default")) == "specs/qwen3.yaml"
    assert smap.file_of(("config", "max_position_embeddings", "type")) == "specs/llama.yaml"


def test_chain_and_inner_extends_qwen3_moe():
    qwen3, _ = load_yaml(SPECS / "qwen3.yaml")
    moe, smap = load_yaml(SPECS / "qwen3_moe.yaml", "specs/qwen3_moe.yaml")
    assert list(moe["blocks"]) == ["dense", "sparse"]  # decoder: !remove; the two new blocks in the child's order
    assert moe["blocks"]["dense"] == qwen3["blocks"]["decoder"]  # inner `extends: blocks.decoder`, unchanged
    sparse = moe["blocks"]["sparse"]
    assert sparse["attention"] == qwen3["blocks"]["decoder"]["attention"]
    assert sparse["mlp"]["kind"] == "moe" and "bias" not in sparse["mlp"]  # !replace: nothing of the dense MLP left
    assert "block" not in moe["layers"] and "block_rule" in moe["layers"]
    assert moe["requires"] == qwen3["requires"]  # inherited through two levels
    # three files in one document: attention from llama, qk_norm from qwen3, the router from qwen3_moe
    assert smap.file_of(("blocks", "sparse", "attention", "num_heads")) == "specs/llama.yaml"
    assert smap.file_of(("blocks", "dense", "attention", "qk_norm", "kind")) == "specs/qwen3.yaml"
    assert smap.file_of(("blocks", "sparse", "mlp", "router", "top_k")) == "specs/qwen3_moe.yaml"
    assert [name for name, _ in smap.sources] == ["specs/qwen3_moe.yaml", "specs/qwen3.yaml", "specs/llama.yaml"]


def test_source_text_covers_every_base_and_is_unchanged_without_extends():
    _, smap = load_yaml(SPECS / "qwen3_moe.yaml")
    text = smap.source_text()
    for name in ("qwen3_moe.yaml", "qwen3.yaml", "llama.yaml"):
        assert (SPECS / name).read_text() in text
    _, plain = load_yaml(SPECS / "llama.yaml")
    assert plain.source_text() == (SPECS / "llama.yaml").read_text()  # llama's source hash does not move


def test_editing_the_base_changes_the_childs_source_hash(specdir):
    child = write(specdir, "child.yaml", CHILD_HEAD)
    before = compile_spec(child).source_hash
    base = specdir / "base.yaml"
    base.write_text(base.read_text() + "\n# an edit\n")
    assert compile_spec(child).source_hash != before


# ----------------------------------------------------------------------------------------- errors in the right file
def test_error_on_inherited_value_names_the_base_file(specdir):
    base = specdir / "base.yaml"
    base.write_text(base.read_text().replace("style: rotate_half", "style: rotate_quarter"))
    child = write(specdir, "child.yaml", CHILD_HEAD)
    line, col = line_of(base, "rotate_quarter")
    msg = spec_error(child)
    assert f"base.yaml:{line}:{col}: blocks.decoder.attention.rope.style: got 'rotate_quarter'" in msg, msg
    assert "child.yaml" not in msg


def test_error_on_overridden_value_names_the_child_file(specdir):
    child = write(specdir, "child.yaml", CHILD_HEAD + "blocks:\n  decoder:\n    attention:\n      rope:\n"
                                                      "        style: rotate_quarter\n")
    line, col = line_of(child, "rotate_quarter")
    msg = spec_error(child)
    assert f"child.yaml:{line}:{col}: blocks.decoder.attention.rope.style: got 'rotate_quarter'" in msg, msg


def test_expression_error_in_override_is_located_in_child(specdir):
    child = write(specdir, "child.yaml", CHILD_HEAD + "config:\n  head_dim: {default: hidden_size // nope}\n")
    line, _ = line_of(child, "hidden_size // nope")
    assert re.search(rf"child.yaml:{line}:\d+: config.head_dim.default: undefined config field 'nope'",
                     spec_error(child))


def test_removing_a_field_still_used_by_the_base_is_located_at_the_use(specdir):
    child = write(specdir, "child.yaml", CHILD_HEAD + "config:\n  mlp_bias: !remove\n")
    base = specdir / "base.yaml"
    line, col = line_of(base, "bias: mlp_bias")
    msg = spec_error(child)
    assert f"base.yaml:{line}:{col + len('bias: ')}: blocks.decoder.mlp.bias: undefined config field 'mlp_bias'" in msg


def test_identity_keys_are_not_inherited(specdir):
    child = write(specdir, "child.yaml", "extends: base.yaml\nclass_prefix: Child\n")
    msg = spec_error(child)
    assert re.search(r"child.yaml:1:1: name: missing required key 'name'", msg), msg
    assert "missing required key 'hf'" in msg


def test_config_ignore_is_not_inherited(specdir):
    """A key the base family ignores may change the child's forward pass: each spec lists its own config_ignore."""
    assert compile_spec(specdir / "base.yaml").config_ignore == ("pretraining_tp",)
    assert compile_spec(write(specdir, "child.yaml", CHILD_HEAD)).config_ignore == ()
    # restated: exactly the child's list, not merged with the base's
    own = compile_spec(write(specdir, "own.yaml", CHILD_HEAD + "config_ignore: [sliding_window]\n"))
    assert own.config_ignore == ("sliding_window",)
    # a grandchild starts empty again
    grand = CHILD_HEAD.replace("extends: base.yaml", "extends: own.yaml").replace("child", "grand").replace(
        "Child", "Grand")
    assert compile_spec(write(specdir, "grand.yaml", grand)).config_ignore == ()


def test_committed_children_state_their_own_config_ignore():
    """The generated config classes: Qwen3-MoE restates Qwen3's gated sliding-window keys; Llama's children whose
    transformers configs have no pretraining_tp no longer carry Llama's ignore of it, so a checkpoint that has the
    key is warned about there instead of passing silently."""
    from modelgen.generated.rocm.llama import CONFIG_CLASS as LLAMA
    from modelgen.generated.rocm.mistral import CONFIG_CLASS as MISTRAL
    from modelgen.generated.rocm.qwen3_moe import CONFIG_CLASS as QWEN3_MOE
    from modelgen.runtime.hf_config import unread_config_keys

    assert "pretraining_tp" in LLAMA.CONFIG_KEYS_IGNORED and MISTRAL.CONFIG_KEYS_IGNORED == ()
    assert {"sliding_window", "max_window_layers", "layer_types"} <= set(QWEN3_MOE.CONFIG_KEYS_IGNORED)
    cfg = {"hidden_size": 8, "pretraining_tp": 1}
    assert unread_config_keys(cfg, MISTRAL.CONFIG_KEYS_READ, MISTRAL.CONFIG_KEYS_IGNORED) == ["pretraining_tp"]
    assert unread_config_keys(cfg, LLAMA.CONFIG_KEYS_READ, LLAMA.CONFIG_KEYS_IGNORED) == []


@pytest.mark.parametrize(
    "body, needle, fragment",
    [
        ("config:\n  no_such_field: !remove\n", "no_such_field", "the base spec has no 'no_such_field' here to remove"),
        ("extra: {a: !replace {b: 1}}\n", "!replace", "the base spec has no value here to replace"),
        ("blocks:\n  dense: {extends: blocks.decodr}\n", "blocks.decodr", "the base spec has no 'blocks.decodr'"),
        ("blocks:\n  dense: {extends: name}\n", "extends: name", "is a str, not a mapping"),
        ("ignore_me:\n  - !remove\n", "!remove", "must be the value of a mapping key"),
        ("config_ignore: !remove\n", "config_ignore", "'config_ignore' is never inherited (each spec lists its own)"),
    ],
)
def test_bad_override_is_located_in_child(specdir, body, needle, fragment):
    child = write(specdir, "child.yaml", CHILD_HEAD + body)
    msg = yaml_error(child)
    line, _ = line_of(child, needle)
    assert re.search(rf"child.yaml:{line}:\d+: .*{re.escape(fragment)}", msg), msg


@pytest.mark.parametrize("tagged", ["config:\n  mlp_bias: !remove\n", "config: !replace {a: int}\n",
                                    "blocks:\n  dense: {extends: blocks.decoder}\n"])
def test_override_syntax_needs_a_top_level_extends(tmp_path, tagged):
    p = write(tmp_path, "alone.yaml", "name: alone\n" + tagged)
    assert re.search(r"alone.yaml:\d+:\d+: .*needs a spec that extends another", yaml_error(p))


# ------------------------------------------------------------------------------------------ chains and confinement
def test_cycle_is_located_at_the_extends_that_closes_it(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\nname: a\n")
    b = write(tmp_path, "b.yaml", "name: b\nextends: a.yaml\n")
    msg = yaml_error(tmp_path / "a.yaml")
    assert re.search(r"b.yaml:2:10: extends: circular extends: a.yaml -> b.yaml -> a.yaml", msg), msg
    assert b.exists()
    write(tmp_path, "self.yaml", "extends: self.yaml\n")
    assert "circular extends: self.yaml -> self.yaml" in yaml_error(tmp_path / "self.yaml")


def test_chain_length_is_bounded(tmp_path):
    for n in range(12):
        write(tmp_path, f"s{n}.yaml", f"extends: s{n + 1}.yaml\nname: s{n}\n")
    write(tmp_path, "s12.yaml", "name: s12\n")
    assert "extends chain longer than" in yaml_error(tmp_path / "s0.yaml")


@pytest.mark.parametrize(
    "target, fragment",
    [
        ("/etc/passwd.yaml", "no absolute paths"),
        ("../specs/llama.yaml", "no '..'"),
        ("sub/../../x.yaml", "no '..'"),
        ("llama.txt", "relative path to a .yaml spec"),
        ("missing.yaml", "base spec 'missing.yaml' not found"),
        ("[1, 2]", "expected a relative path"),
    ],
)
def test_extends_path_is_confined(tmp_path, target, fragment):
    p = write(tmp_path, "child.yaml", f"name: c\nextends: {target}\n")
    msg = yaml_error(p)
    assert re.search(r"child.yaml:2:10: extends: ", msg) and fragment in msg, msg


def test_symlink_escaping_the_spec_directory_is_refused(tmp_path):
    inner = tmp_path / "specs"
    inner.mkdir()
    shutil.copy(SPECS / "llama.yaml", tmp_path / "outside.yaml")
    (inner / "base.yaml").symlink_to(tmp_path / "outside.yaml")
    p = write(inner, "child.yaml", "extends: base.yaml\n")
    assert "resolves outside the spec directory" in yaml_error(p)


def test_base_in_a_subdirectory(tmp_path):
    (tmp_path / "common").mkdir()
    shutil.copy(SPECS / "llama.yaml", tmp_path / "common" / "base.yaml")
    child = write(tmp_path, "child.yaml", CHILD_HEAD.replace("base.yaml", "common/base.yaml"))
    data, smap = load_yaml(child, "specs/child.yaml")
    assert data["blocks"]["decoder"]["mlp"]["kind"] == "gated"
    assert smap.file_of(("blocks", "decoder", "mlp", "kind")) == "specs/common/base.yaml"
    assert compile_spec(child).name == "child"
