"""The runtime's layer-kind seam (runtime/layers/kind.py): the engine asks each layer through ``LayerKind`` instead of
checking its type. An AST scan keeps every ``isinstance`` on a kind's class inside the kind's own folder; the protocol's
defaults, each kind's answers and the engine code that combines them are checked on small layers."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from torch import nn

from modelgen.runtime.layers.attention import PagedAttention
from modelgen.runtime.layers.gated_deltanet import GatedDeltaNet
from modelgen.runtime.layers.kind import STEP_LAYOUTS, LayerKind, layer_kinds
from modelgen.runtime.layers.mla import MLAttention
from modelgen.runtime.layers.moe import FusedMoE
from modelgen.runtime.targets.rocm.cuda_graphs import has_recurrent_state, multi_token_layout

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
LAYERS = RUNTIME / "layers"
KIND_DIRS = sorted(d for d in LAYERS.iterdir() if (d / "__init__.py").is_file())


# ---------------------------------------------------------------------------------------- no type checks outside
def kind_classes() -> dict[str, Path]:
    """Every class defined in a kind folder -> that folder."""
    out: dict[str, Path] = {}
    for folder in KIND_DIRS:
        for f in folder.glob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.ClassDef):
                    out[node.name] = folder
    return out


def _names(node: ast.AST) -> list[str]:
    """Class names an isinstance/issubclass second argument (or a ``type(x) is`` operand) mentions."""
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _names(elt)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]  # type(m).__name__ == "MLAttention"
    return []


def type_checks(source: str, filename: str, classes: set[str]) -> list[str]:
    """``file:line: ClassName`` for each isinstance / issubclass / ``type(x) is`` / ``type(x).__name__ ==`` on one of
    ``classes`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if call and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            names = _names(node.args[1])
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            typed = any(isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "type" for s in sides)
            named = any(isinstance(s, ast.Attribute) and s.attr == "__name__" for s in sides)
            if typed or named:
                names = [n for s in sides for n in _names(s)]
        found += [f"{filename}:{node.lineno}: {n}" for n in names if n in classes]
    return found


def test_scan_finds_a_type_check():
    """The scan below can fail: it flags each form of a layer-kind type check, and not the protocol's own class."""
    src = (
        "isinstance(m, MLAttention)\n"
        "isinstance(m, (nn.Linear, layers.GatedDeltaNet))\n"
        "type(m) is FusedMoE\n"
        "type(m).__name__ == 'PagedAttention'\n"
        "isinstance(m, LayerKind)\n"
    )
    got = type_checks(src, "x.py", {"MLAttention", "GatedDeltaNet", "FusedMoE", "PagedAttention"})
    assert got == ["x.py:1: MLAttention", "x.py:2: GatedDeltaNet", "x.py:3: FusedMoE", "x.py:4: PagedAttention"]


def test_no_layer_kind_type_check_outside_its_folder():
    classes = kind_classes()
    for expected in ("PagedAttention", "MLAttention", "GatedDeltaNet", "FusedMoE", "TopKRouter"):
        assert expected in classes  # the scan looks for the real classes (a moved folder would empty it)
    offenders = []
    for f in sorted(RUNTIME.rglob("*.py")):
        own = {name for name, folder in classes.items() if folder in f.parents}
        offenders += type_checks(f.read_text(), str(f.relative_to(RUNTIME.parent)), set(classes) - own)
    assert not offenders, "ask the layer (runtime/layers/kind.py), not its type:\n" + "\n".join(offenders)


def test_state_metadata_lives_with_the_state_cache():
    """The runners build StateMetadata; it belongs to the state pool, not to one layer kind's file."""
    from modelgen.runtime import state_cache

    assert state_cache.StateMetadata.__module__ == "modelgen.runtime.state_cache"
    runner = (RUNTIME / "targets" / "rocm" / "runner.py").read_text()
    assert "from ...state_cache import StateMetadata" in runner


# ------------------------------------------------------------------------------------------------ the defaults
class Plain(LayerKind):
    pass


class Recurrent(LayerKind):
    cache_kind = "recurrent_state"


def test_protocol_defaults_describe_a_layer_that_needs_nothing_special():
    layer = Plain()
    assert layer.cache_kind is None and not layer.holds_request_state()
    assert layer.decode_graph_capturable()
    assert layer.step_graph_layouts(1) == layer.step_graph_layouts(4) == STEP_LAYOUTS == {"rows", "varlen"}
    assert layer.sequence_parallel_refusal() is None and not layer.sequence_parallel_gathers_tokens()
    assert not layer.step_metadata_writes() and layer.step_metadata_reads() is None
    assert layer.linears_read_as_matrix() == []
    with pytest.raises(NotImplementedError, match="Plain declares no cache"):
        layer.kv_spec()
    with pytest.raises(NotImplementedError, match="Plain binds no cache"):
        layer.bind_kv_cache({})
    assert Recurrent().holds_request_state()  # derived from the cache kind: a state-pool slot per request


def test_layer_kinds_finds_nested_layers_only():
    inner, other = Plain(), Recurrent()
    model = nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.Sequential(inner), other]))
    assert list(layer_kinds(model)) == [inner, other]


# ------------------------------------------------------------------------------------------- each kind's answers
def mla(**index) -> MLAttention:
    return MLAttention(
        hidden_size=16, num_heads=2, q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
        v_head_dim=4, bias=False, latent_norm_eps=1e-6, rope_interleave=False, rope_style="rotate_half",
        max_position=64, rope_theta=10000.0, rope_scaling=None, scale=None, layer_name="layers.0.self_attn", **index,
    )


def test_kind_answers():
    gqa = PagedAttention(2, 1, 4, 0.5, "layers.0.self_attn")
    assert gqa.cache_kind == "paged_kv" and not gqa.holds_request_state()
    assert gqa.step_graph_layouts(1) == STEP_LAYOUTS and gqa.step_graph_layouts(3) == {"varlen"}
    assert gqa.sequence_parallel_refusal() is None

    m = mla()
    assert m.cache_kind == m.latent_cache_spec().kind == "paged_latent"
    assert m.step_graph_layouts(3) == {"rows"}
    assert "latent-cache writes" in m.sequence_parallel_refusal()
    assert m.linears_read_as_matrix() == [m.kv_b_proj]
    assert not m.step_metadata_writes() and m.step_metadata_reads() is None
    dsa = dict(index_heads=2, index_head_dim=4, index_topk=2)
    assert mla(**dsa).step_metadata_writes() and mla(**dsa).step_metadata_reads() is None
    shared = mla(**dsa, index_shared=True)
    assert not shared.step_metadata_writes()
    assert shared.step_metadata_reads() == "DSA layer {layer} shares the top-k of an indexer"

    gdn = GatedDeltaNet(16, 2, 2, 4, 4, 4, 1e-6, layer_name="layers.0.linear_attn")
    assert gdn.cache_kind == gdn.state_spec().kind and gdn.holds_request_state()
    assert gdn.step_graph_layouts(1) == {"varlen"}
    assert "state writes" in gdn.sequence_parallel_refusal()

    moe = FusedMoE(4, 16, 8)
    assert moe.cache_kind is None and moe.sequence_parallel_gathers_tokens()
    assert moe.sequence_parallel_refusal() is None and moe.step_graph_layouts(3) == STEP_LAYOUTS


# ------------------------------------------------------------------------------ the engine combines the answers
class Layouts(LayerKind):
    def __init__(self, layouts):
        super().__init__()
        self.layouts = frozenset(layouts)

    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        return self.layouts


@pytest.mark.parametrize("layers, want", [
    ([], "rows"),
    ([{"rows", "varlen"}], "rows"),  # rows preferred when every layer takes both
    ([{"rows", "varlen"}, {"varlen"}], "varlen"),
    ([{"rows"}, {"rows", "varlen"}], "rows"),
    ([{"rows"}, {"varlen"}], None),  # no common layout: the step runs eagerly
])
def test_multi_token_layout_takes_what_every_layer_accepts(layers, want):
    assert multi_token_layout(nn.ModuleList([Layouts(s) for s in layers]), 3) == want


def test_multi_token_layout_of_real_kinds():
    gqa = PagedAttention(2, 1, 4, 0.5, "layers.0.self_attn")
    gdn = GatedDeltaNet(16, 2, 2, 4, 4, 4, 1e-6, layer_name="layers.1.linear_attn")
    assert multi_token_layout(nn.ModuleList([gqa]), 1) == "rows"
    assert multi_token_layout(nn.ModuleList([gqa]), 3) == "varlen"
    assert multi_token_layout(nn.ModuleList([mla()]), 3) == "rows"
    assert multi_token_layout(nn.ModuleList([mla(), gqa]), 3) is None
    hybrid = nn.ModuleList([gqa, gdn])  # Qwen3-Next: varlen even for one token (the state's fixed-shape path)
    assert multi_token_layout(hybrid, 1) == "varlen" and has_recurrent_state(hybrid)
    assert not has_recurrent_state(nn.ModuleList([gqa, mla()]))


def test_quantization_leaves_the_linears_a_layer_reads_as_a_matrix():
    """loader/quantization.py keeps a linear dequantized when its layer reads the weight as a matrix (MLA kv_b_proj)."""
    from modelgen.runtime.loader.quantization import _linear_targets

    model = nn.Module()
    model.self_attn = mla()
    keys = [f"self_attn.{n}.weight" for n in ("kv_b_proj", "o_proj", "kv_a_proj_with_mqa")]
    assert sorted(_linear_targets(model, keys)) == ["self_attn.kv_a_proj_with_mqa", "self_attn.o_proj"]


def test_pipeline_refuses_a_stage_that_reads_before_any_writer():
    from types import SimpleNamespace

    from modelgen.runtime.parallel.pipeline import _check_shared_index

    dsa = dict(index_heads=2, index_head_dim=4, index_topk=2)

    def staged(*layers, start=1):  # a stage of a generated model: <Prefix>ForCausalLM.model.layers, from `start`
        model, model.model = nn.Module(), nn.Module()
        model.model.layers = nn.ModuleList(layers)
        model.pp_stage = SimpleNamespace(start=start, end=len(layers))
        return model

    _check_shared_index(staged(mla(**dsa), mla(**dsa), mla(**dsa, index_shared=True)), 1)  # a writer first: fine
    with pytest.raises(ValueError, match=r"whose DSA layer 1 shares the top-k of an indexer on an earlier stage"):
        _check_shared_index(staged(mla(**dsa), mla(**dsa, index_shared=True), mla(**dsa)), 1)
