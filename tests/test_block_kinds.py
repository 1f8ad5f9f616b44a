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
from modelgen.runtime.targets import ENGINE_TARGETS
from modelgen.codegen.yaml_source import load_yaml

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"
MACROS = {"rocm": {"imports", "module_class", "construct"},
          "neuron": {"imports", "module_class", "construct", "mapping_function", "map_call"},
          "vllm": {"imports", "module_class", "construct"}}
# Optional: rocm weight_tables/loader_tables (tables of the kind's own in weights.py), neuron config_checks.


def test_registry_finds_every_kind_with_its_partials():
    assert {"gqa", "gated", "moe"} <= set(KINDS)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)))
    for kind in KINDS.values():
        assert kind.slot in ("attention", "mlp", "shared")  # shared: a block run before the mixer (shared_block)
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


def test_unknown_key_inside_a_kind_suggests_its_fields(tmp_path):
    """Inside a union of kinds pydantic's error location carries the kind tag; the suggestion still finds the
    kind's own fields."""
    data, _ = load_yaml(SPECS / "glm4_moe.yaml")
    data["blocks"]["dense"]["mlp"]["activaton"] = data["blocks"]["dense"]["mlp"].pop("activation")
    with pytest.raises(SpecError, match=r"blocks.dense.mlp.activaton: unknown key 'activaton' \(did you mean "
                                        r"'activation'\?\)"):
        compile_spec(write_spec(tmp_path, data))


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


# -------------------------------------------------------------------------------------------- a kind added as a plug-in
PLAIN_KIND = '''"""plain: the ungated MLP ``down(gelu_tanh(up(x)))`` (GPT-2 / Phi style), added by the plug-in test."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext


class PlainSpec(Strict):
    name: Identifier
    kind: Literal["plain"]
    intermediate_size: Expression


@dataclass(frozen=True, kw_only=True)
class PlainMLP(Module):
    kind = "plain"
    slot = "mlp"
    class_suffix = "PlainMLP"

    intermediate_size: Value


def lower(ctx: LoweringContext, p: tuple[Any, ...], m: PlainSpec) -> PlainMLP:
    return PlainMLP(name=m.name, intermediate_size=ctx.value(p + ("intermediate_size",), m.intermediate_size))


KIND = Kind(name="plain", spec=PlainSpec, ir=PlainMLP, lower=lower)
'''
PLAIN_ROCM = '''{% macro imports(m) %}
from modelgen.runtime.layers.linear import ColumnParallelLinear, RowParallelLinear
{% endmacro %}
{% macro module_class(m) %}
class {{ m.class_name | ident }}(nn.Module):
    def __init__(self, config: {{ P }}Config):
        super().__init__()
        self.up_proj = ColumnParallelLinear({{ ir.hidden_size.py }}, {{ m.intermediate_size.py }}, bias=False)
        self.down_proj = RowParallelLinear({{ m.intermediate_size.py }}, {{ ir.hidden_size.py }}, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.gelu(self.up_proj(x), approximate="tanh"))
{% endmacro %}
{% macro construct(m) %}{{ m.class_name }}(config){% endmacro %}
'''
PLAIN_VLLM = '''{% macro imports(m) %}
from vllm.model_executor.layers.linear import ColumnParallelLinear, RowParallelLinear
{% endmacro %}
{% macro module_class(m) %}
class {{ m.class_name | ident }}(nn.Module):
    def __init__(self, config: {{ P }}Config, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        self.up_proj = ColumnParallelLinear({{ ir.hidden_size.py }}, {{ m.intermediate_size.py }}, bias=False, prefix=f"{prefix}.up_proj")
        self.down_proj = RowParallelLinear({{ m.intermediate_size.py }}, {{ ir.hidden_size.py }}, bias=False, prefix=f"{prefix}.down_proj")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.up_proj(x)
        x, _ = self.down_proj(nn.functional.gelu(x, approximate="tanh"))
        return x
{% endmacro %}
{% macro construct(m) %}{{ m.class_name }}(config, vllm_config, f"{prefix}.{{ m.name }}"){% endmacro %}
'''
PLAIN_NEURON = '''{% macro imports(m) %}
from modelgen.runtime.neuron.weight_loader import set_weight_loader, sharding_weight_loader
{% endmacro %}
{% macro module_class(m) %}
class {{ m.class_name | ident }}(nn.Module):
    def __init__(self, config: {{ P }}Config):
        super().__init__()
        world = dist.tp_size()
        inter = dist.divide({{ m.intermediate_size.py }}, world, "intermediate_size")
        self.up_proj_weight = _param({{ ir.hidden_size.py }}, inter)
        set_weight_loader(self.up_proj_weight, sharding_weight_loader(1, inter, world, is_storage_transposed=True))
        self.down_proj_weight = _param(inter, {{ ir.hidden_size.py }})
        set_weight_loader(self.down_proj_weight, sharding_weight_loader(0, inter, world, is_storage_transposed=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(NF.linear(x, self.up_proj_weight), approximate="tanh")
        return dist.all_reduce(NF.linear(h, self.down_proj_weight))
{% endmacro %}
{% macro construct(m) %}{{ m.class_name }}(config){% endmacro %}
{% macro mapping_function(m) %}
def _{{ m.class_name | snake }}_mappings(mappings: dict[str, list[str]], module: str, config: {{ P }}Config) -> None:
    for proj in ("up_proj", "down_proj"):
        mappings[f"{module}.{proj}_weight"] = [f"{module}.{proj}.weight"]
{% endmacro %}
{% macro map_call(m, module) %}_{{ m.class_name | snake }}_mappings(mappings, {{ module }}, config){% endmacro %}
'''
PLAIN_CHECK = '''
import importlib, torch
hf = {"vocab_size": 32, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2}
torch.manual_seed(0)
x = torch.randn(3, 16)
up, down = torch.randn(24, 16), torch.randn(16, 24)
want = torch.nn.functional.gelu(x @ up.T, approximate="tanh") @ down.T
rocm = importlib.import_module("modelgen.generated.rocm.plain_llama")
model = rocm.MODEL_CLASS(rocm.CONFIG_CLASS.from_hf_config(hf))
mlp = model.model.layers[1].mlp
mlp.up_proj.weight.data.copy_(up); mlp.down_proj.weight.data.copy_(down)
assert type(mlp).__name__ == "PlainLlamaPlainMLP"
assert torch.allclose(mlp(x), want, atol=1e-5)
neuron = importlib.import_module("modelgen.generated.neuron.plain_llama")
nmodel = neuron.MODEL_CLASS(neuron.CONFIG_CLASS.from_hf_config(hf))
nmlp = nmodel.model.layers[1].mlp
nmlp.up_proj_weight.data.copy_(up.T); nmlp.down_proj_weight.data.copy_(down.T)
assert torch.allclose(nmlp(x), want, atol=1e-5)
maps = importlib.import_module("modelgen.generated.neuron.plain_llama.weights").checkpoint_mappings(nmodel.config)
assert maps["model.layers.1.mlp.up_proj_weight"] == ["model.layers.1.mlp.up_proj.weight"]
print("ok")
'''


def test_a_new_kind_is_one_module_and_three_partials(tmp_path):
    """Add an MLP kind to a copy of the repo by writing only codegen/blocks/plain.py and its partial per target (plus
    a spec that uses it): it builds for every target, lints clean, and computes down(gelu(up(x))) on the two targets
    modelgen's engine runs (the vllm target's models run inside vLLM: tests/vllm/)."""
    import shutil
    import subprocess
    import sys

    repo = tmp_path / "repo"
    for name in ("modelgen", "cli", "codegen", "runtime", "specs", "templates", "generated"):
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "codegen" / "blocks" / "plain.py").write_text(PLAIN_KIND)
    (repo / "templates" / "rocm" / "blocks" / "plain.py.j2").write_text(PLAIN_ROCM)
    (repo / "templates" / "neuron" / "blocks" / "plain.py.j2").write_text(PLAIN_NEURON)
    (repo / "templates" / "vllm" / "blocks" / "plain.py.j2").write_text(PLAIN_VLLM)
    data, _ = load_yaml(SPECS / "llama.yaml")
    data.update(name="plain_llama", class_prefix="PlainLlama")
    data["hf"]["architectures"] = ["PlainLlamaForCausalLM"]
    data["blocks"]["decoder"]["mlp"] = {"name": "mlp", "kind": "plain", "intermediate_size": "intermediate_size"}
    (repo / "specs" / "plain_llama.yaml").write_text(json.dumps(data, indent=1))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=repo, capture_output=True, text=True)

    built = run("-m", "modelgen.cli", "build", "--all")
    assert built.returncode == 0, built.stderr
    source = (repo / "generated" / "rocm" / "plain_llama" / "model.py").read_text()
    assert "class PlainLlamaPlainMLP(nn.Module)" in source and "self.mlp = PlainLlamaPlainMLP(config)" in source
    assert "self.mlp = PlainLlamaPlainMLP(config, vllm_config, f\"{prefix}.mlp\")" in (
        repo / "generated" / "vllm" / "plain_llama" / "model.py").read_text()
    lint = run("-m", "pyflakes", "generated/rocm/plain_llama", "generated/neuron/plain_llama",
               "generated/vllm/plain_llama")
    assert lint.returncode == 0 or "No module named pyflakes" in lint.stderr, lint.stdout
    checked = run("-c", PLAIN_CHECK)
    assert checked.returncode == 0 and checked.stdout.strip() == "ok", checked.stderr


def test_blocks_may_name_their_attention_differently(tmp_path):
    """Qwen3-Next style: the sparse block's attention is `mixer`, the dense one's `self_attn`. The layer reaches it
    through get_attention(); KV specs, cache binding and checkpoint names follow each layer's own name."""
    import importlib.util
    import sys

    data, _ = load_yaml(SPECS / "glm4_moe.yaml")
    data["blocks"]["sparse"]["attention"] = {**data["blocks"]["sparse"]["attention"], "name": "mixer"}
    model_ir = compile_spec(write_spec(tmp_path, data))
    assert model_ir.slot_name("attention") is None and model_ir.slot_name("mlp") == "mlp"
    out = tmp_path / "pkg"
    for target in TARGETS:
        for rel, text in render_package(model_ir, target).items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
    source = (out / "rocm" / "glm4_moe" / "model.py").read_text()
    assert "def get_attention(self) -> nn.Module:" in source and "self.get_attention()(positions" in source

    def load(target: str):
        name = f"plugin_test_{target}"
        spec = importlib.util.spec_from_file_location(name, out / target / "glm4_moe" / "__init__.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    hf = {"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 3,
          "num_attention_heads": 4, "num_key_value_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 8, "first_k_dense_replace": 1, "head_dim": 4}
    try:
        for target in ENGINE_TARGETS:  # the vllm package needs vLLM to build its model (tests/vllm/)
            pkg = load(target)
            model = pkg.MODEL_CLASS(pkg.CONFIG_CLASS.from_hf_config(hf))
            names = [s.name for s in model.get_kv_spec().layers]
            assert names == ["layers.0.self_attn", "layers.1.mixer", "layers.2.mixer"], names
            params = dict(model.named_parameters())
            assert any(k.startswith("model.layers.1.mixer.") for k in params)
            assert not any(k.startswith("model.layers.1.self_attn.") for k in params)
        weights = sys.modules["plugin_test_neuron.weights"]
        keys = weights.checkpoint_mappings(model.config, set())
        assert keys["model.layers.2.mixer.o_proj_weight"] == ["model.layers.2.mixer.o_proj.weight"]
        assert keys["model.layers.0.self_attn.o_proj_weight"] == ["model.layers.0.self_attn.o_proj.weight"]
    finally:
        for name in [n for n in sys.modules if n.startswith("plugin_test_")]:
            del sys.modules[name]
