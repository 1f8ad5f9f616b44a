"""Block kinds are plug-ins (codegen/blocks/ + one partial per target), the IR is typed, and `decoder:` gives the
residual and norms once for every block."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import pytest

from modelgen.codegen import ir
from modelgen.codegen.blocks import KINDS
from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import TEMPLATES_DIR, compile_spec
from modelgen.codegen.render import TARGETS, render_package
from modelgen.codegen.yaml_source import load_yaml

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"
MACROS = {"rocm": {"imports", "module_class", "construct"},
          "neuron": {"imports", "module_class", "construct", "mapping_function", "map_call", "config_checks"}}


def test_registry_finds_every_kind_with_its_partials():
    assert {"gqa", "gated", "moe"} <= set(KINDS)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)))
    for kind in KINDS.values():
        assert kind.slot in ("attention", "mlp")
        for target in TARGETS:
            source = (TEMPLATES_DIR / kind.partial(target)).read_text()
            defined = {n.name for n in env.parse(source).find_all(jinja2.nodes.Macro)}
            assert MACROS[target] <= defined, f"{kind.partial(target)} lacks {MACROS[target] - defined}"


def test_package_templates_name_no_kind():
    """Only a kind's own module and partials know it: the package templates and the core codegen modules never test
    `kind ==`, so a new kind touches no shared file."""
    shared = [p for p in TEMPLATES_DIR.rglob("*.j2") if "blocks" not in p.parts]
    shared += [REPO / "codegen" / f for f in ("lower.py", "render.py", "schema.py")]
    for path in shared:
        text = path.read_text()
        for kind in KINDS:
            assert not re.search(rf"""kind\s*==\s*["']{kind}["']""", text), f"{path} branches on kind {kind!r}"


def test_templates_never_compare_rendered_strings():
    for path in TEMPLATES_DIR.rglob("*.j2"):
        text = path.read_text()
        assert not re.search(r"""(==|!=|in)\s*\(?["'](True|False|None|1\.0|1)["']""", text), path
        assert "| cfg" not in text and "replace(\"config.\"" not in text, path


def test_ir_values_are_typed():
    llama = compile_spec(SPECS / "llama.yaml")
    attn = llama.blocks[0].attention
    assert isinstance(attn.qkv_bias, ir.Code) and attn.qkv_bias.py == "config.attention_bias"
    assert attn.qkv_bias.spec == "attention_bias" and attn.scale is None and attn.qk_norm is None
    assert attn.rope.partial_factor is None and attn.rope.scaling.py == "config.rope_scaling"
    # Shard ids stay data: the str 'q' and the int 0, as the spec wrote them.
    assert llama.checkpoint.modules("qkv_proj", {}) == {"q": "q_proj", "k": "k_proj", "v": "v_proj"}
    assert llama.checkpoint.modules("gate_up_proj", {}) == {0: "gate_proj", 1: "up_proj"}
    glm = compile_spec(SPECS / "glm4_moe.yaml")
    gattn = glm.blocks[0].attention
    assert gattn.o_bias == ir.Const(False) and gattn.o_bias.never and not gattn.o_bias.always
    assert isinstance(gattn.qk_norm.enabled, ir.Code) and gattn.rope.partial_factor is not None
    mixtral = compile_spec(SPECS / "mixtral.yaml")
    assert mixtral.moe.router.routed_scaling_factor is None and mixtral.moe.router.n_group is None
    with pytest.raises(TypeError):
        str(attn.num_heads)  # a template must say .py or .spec


def write_spec(tmp_path: Path, data: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=1))
    return path


def without_hash(files: dict[str, str]) -> dict[str, str]:
    return {k: re.sub(r"source hash.*", "", v) for k, v in files.items()}


def test_decoder_defaults_generate_the_same_model(tmp_path):
    data, _ = load_yaml(SPECS / "glm4_moe.yaml")
    original = {t: without_hash(render_package(compile_spec(write_spec(tmp_path, data)), t)) for t in TARGETS}
    first = data["blocks"]["dense"]
    data["decoder"] = {k: first[k] for k in ("residual", "attention_norm", "mlp_norm")}
    for block in data["blocks"].values():
        for k in ("residual", "attention_norm", "mlp_norm"):
            del block[k]
    for t in TARGETS:
        assert without_hash(render_package(compile_spec(write_spec(tmp_path, data)), t)) == original[t]


def test_decoder_defaults_errors_are_located(tmp_path):
    data, _ = load_yaml(SPECS / "llama.yaml")
    del data["blocks"]["decoder"]["mlp_norm"]
    with pytest.raises(SpecError, match=r"spec.yaml:\d+:\d+: blocks.decoder: no mlp_norm: give it in this block or "
                                        r"under `decoder:`"):
        compile_spec(write_spec(tmp_path, data))
    data, _ = load_yaml(SPECS / "glm4_moe.yaml")
    data["decoder"] = {"attention_norm": data["blocks"]["dense"].pop("attention_norm")}
    data["blocks"]["sparse"]["attention_norm"]["eps"] = 1e-6  # an override the single decoder class cannot honour
    with pytest.raises(SpecError, match=r"blocks.sparse.attention_norm: attention_norm must be the same in every block"):
        compile_spec(write_spec(tmp_path, data))


def test_unknown_kind_lists_the_registered_ones(tmp_path):
    data, _ = load_yaml(SPECS / "llama.yaml")
    data["blocks"]["decoder"]["mlp"]["kind"] = "swiglu"
    with pytest.raises(SpecError) as e:
        compile_spec(write_spec(tmp_path, data))
    assert re.search(r"spec.yaml:\d+:\d+: blocks.decoder.mlp.kind: got 'swiglu'; expected one of 'gated', 'moe'",
                     str(e.value)), str(e.value)


def test_attention_declares_its_cache():
    """get_kv_spec collects each attention's kv_spec(); the engine allocates what they declare."""
    import torch

    from modelgen.generated.rocm.llama import CONFIG_CLASS, MODEL_CLASS
    from modelgen.runtime.kv_cache import allocate_kv_cache

    config = CONFIG_CLASS.from_hf_config({"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
                                          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})
    model = MODEL_CLASS(config)
    spec = model.get_kv_spec()
    assert [(s.name, s.kind, s.num_kv_heads, s.head_size) for s in spec.layers] == [
        ("layers.0.self_attn", "paged_kv", 2, 4), ("layers.1.self_attn", "paged_kv", 2, 4)]
    caches = allocate_kv_cache(spec, num_blocks=3, block_size=8, device="cpu")
    model.bind_kv_cache(caches)
    assert model.model.layers[1].self_attn.attn.k_cache is caches["layers.1.self_attn"][0]
    assert caches["layers.0.self_attn"][1].shape == (3, 2, 8, 4) and caches["layers.0.self_attn"][1].dtype == torch.float32
