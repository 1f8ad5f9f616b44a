"""The loader protocol (runtime/loader/protocol.py): one ``load_weights(checkpoint)`` on every generated model of both
targets; the packed loader reads names only from the model's tables (a model whose expert / shared-expert names differ
from FusedMoE's loads), and a hand-written model exposing only the protocol loads through the target's glue."""
from __future__ import annotations

import importlib
import inspect

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError
from modelgen.runtime.loader.mapped import load_mapped_weights
from modelgen.runtime.loader.packed import load_packed_weights
from modelgen.runtime.loader.protocol import ExpertMapping, LoadsWeights
from modelgen.runtime.targets import ENGINE_TARGETS as TARGETS, get_target  # the vllm target: tests/vllm/


def _generated_models(target: str):
    index = importlib.import_module(f"modelgen.generated.{target}").MODELS
    for name in sorted(set(index.values())):
        yield name, importlib.import_module(f"modelgen.generated.{target}.{name}").MODEL_CLASS


@pytest.mark.parametrize("target", TARGETS)
def test_every_generated_model_has_the_one_signature_and_its_tables(target):
    for name, cls in _generated_models(target):
        params = list(inspect.signature(cls.load_weights).parameters)
        assert params == ["self", "checkpoint"], f"{target}/{name}: load_weights{params}"
        assert isinstance(cls.ignored_keys, tuple) and isinstance(cls.renames, tuple), f"{target}/{name}"
        if target == "rocm":  # ATOM's names, read by the packed loader
            assert all(len(v) == 2 for v in cls.packed_modules_mapping.values()), name  # (fused param, shard)
            assert "lm_head.weight" in cls.tied_parameters, name
            assert callable(cls.get_expert_mapping)
        else:
            assert callable(cls.checkpoint_mappings)


@pytest.mark.parametrize("target", TARGETS)
def test_both_targets_load_through_the_same_call(llama_checkpoint, target):
    """The engine's glue (Target.load) calls model.load_weights(checkpoint) and nothing else, on either target."""
    path, hf = llama_checkpoint("gqa")
    from modelgen.runtime.engine.registry import find_model

    module = find_model(["LlamaForCausalLM"], target)
    import json

    config = module.CONFIG_CLASS.from_hf_config(json.loads((path / "config.json").read_text()))
    model = module.MODEL_CLASS(config)
    assert isinstance(model, LoadsWeights)
    with Checkpoint(path) as ckpt:
        get_target(target).load(model, ckpt)
    params = dict(model.named_parameters())
    norm = params["model.layers.1.post_attention_layernorm.weight"]
    assert torch.equal(norm, hf.model.layers[1].post_attention_layernorm.weight)
    embed = params["model.embed_tokens.weight" if target == "rocm" else "model.embed_tokens_weight"]
    assert torch.equal(embed, hf.model.embed_tokens.weight)


# --------------------------------------------------------------------------------- a MoE with other names
class _Stack(nn.Module):
    """Stacked experts named unlike FusedMoE (``gate_up``/``down``, shard ids ``g``/``u``/``d``, shared slots
    ``sg``/``su``/``sd``), with the expert-module interface the packed loader uses."""

    def __init__(self, num_experts: int, hidden: int, inter: int, num_shared: int):
        super().__init__()
        self.num_local_experts, self.expert_offset, self.inter, self.num_shared = num_experts, 0, inter, num_shared
        rows = num_experts + 1  # one extra slot holding the shared expert(s)
        self.gate_up = nn.Parameter(torch.zeros(rows, 2 * inter, hidden), requires_grad=False)
        self.down = nn.Parameter(torch.zeros(rows, hidden, inter), requires_grad=False)
        for p in (self.gate_up, self.down):
            p.weight_loader = self.weight_loader

    def local_index(self, expert: int) -> int | None:
        return expert if 0 <= expert < self.num_local_experts else None

    def _target(self, param, shard: str, e: int) -> torch.Tensor:
        I = self.inter
        return {"g": param.data[e, :I], "u": param.data[e, I:], "d": param.data[e]}[shard]

    def weight_loader(self, param, loaded, shard: str, expert: int | None = None) -> None:
        if shard.startswith("s"):  # shared expert -> the last slot
            self._target(param, shard[1:], self.num_local_experts).copy_(loaded)
        else:
            self._target(param, shard, expert).copy_(loaded)

    def load_stacked(self, param, stacked: dict[str, torch.Tensor]) -> None:
        full = torch.cat([stacked["g"], stacked["u"]], dim=1) if "g" in stacked else stacked["d"]
        param.data[: self.num_local_experts].copy_(full)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ffn = nn.Module()
        self.ffn.bank = _Stack(3, 4, 2, 1)


class _OddMoE(nn.Module):
    ignored_keys = ("model.rotary.*",)
    renames = ((".feed_forward.", ".ffn."),)
    packed_modules_mapping: dict = {}
    tied_parameters: dict = {}

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([_Block()])

    def get_expert_mapping(self) -> ExpertMapping:
        return ExpertMapping(
            per_expert=(("bank.gate_up", "experts.{e}.wg.weight", "g"), ("bank.gate_up", "experts.{e}.wu.weight", "u"),
                        ("bank.down", "experts.{e}.wd.weight", "d")),
            shared=(("bank.gate_up", "common.wg.weight", "sg"), ("bank.gate_up", "common.wu.weight", "su"),
                    ("bank.down", "common.wd.weight", "sd")),
        )

    def load_weights(self, checkpoint) -> None:
        load_packed_weights(self, checkpoint, num_threads=self.num_threads)


def _odd_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    t = {"model.rotary.inv_freq": torch.ones(2)}
    pre = "model.layers.0.feed_forward."
    for e in range(3):
        for w, shape in (("wg", (2, 4)), ("wu", (2, 4)), ("wd", (4, 2))):
            t[f"{pre}experts.{e}.{w}.weight"] = torch.randn(*shape, generator=g)
    for w, shape in (("wg", (2, 4)), ("wu", (2, 4)), ("wd", (4, 2))):
        t[f"{pre}common.{w}.weight"] = torch.randn(*shape, generator=g)
    return t


@pytest.mark.parametrize("num_threads", [1, 2])  # per-expert copies, and staged stacks through load_stacked
def test_packed_loader_follows_the_tables_not_fusedmoe_names(tmp_path, num_threads):
    tensors = _odd_tensors()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    model = _OddMoE()
    model.num_threads = num_threads
    with Checkpoint(tmp_path) as ckpt:
        model.load_weights(ckpt)
    bank = model.model.layers[0].ffn.bank
    pre = "model.layers.0.feed_forward."
    for e in range(3):
        assert torch.equal(bank.gate_up[e, :2], tensors[f"{pre}experts.{e}.wg.weight"])
        assert torch.equal(bank.gate_up[e, 2:], tensors[f"{pre}experts.{e}.wu.weight"])
        assert torch.equal(bank.down[e], tensors[f"{pre}experts.{e}.wd.weight"])
    assert torch.equal(bank.gate_up[3, 2:], tensors[f"{pre}common.wu.weight"])
    assert torch.equal(bank.down[3], tensors[f"{pre}common.wd.weight"])


def test_packed_loader_names_a_missing_shared_slot_and_a_missing_expert(tmp_path):
    tensors = _odd_tensors()
    (tmp_path / "a").mkdir()
    save_file({k: v for k, v in tensors.items() if not k.endswith("common.wu.weight")}, str(tmp_path / "a" / "x.safetensors"))
    model = _OddMoE()
    model.num_threads = 1
    with Checkpoint(tmp_path / "a") as ckpt, pytest.raises(CheckpointError, match=r"model\.layers\.0\.ffn\.bank\.gate_up \(shard 'su'\)"):
        model.load_weights(ckpt)
    (tmp_path / "b").mkdir()
    save_file({k: v for k, v in tensors.items() if "experts.2.wd" not in k}, str(tmp_path / "b" / "x.safetensors"))
    model.num_threads = 2
    with Checkpoint(tmp_path / "b") as ckpt, pytest.raises(CheckpointError, match=r"bank\.down: experts \[2\] missing shard 'd'"):
        model.load_weights(ckpt)


# --------------------------------------------------------------------------------- protocol-only models
class _Fused(nn.Module):
    """A [q; k] fused projection whose loader takes shard ids, like QKVParallelLinear."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(4, 3), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param, loaded, shard):
        param.data[{"q": slice(0, 2), "k": slice(2, 4)}[shard]].copy_(loaded)


class _TinyPacked(nn.Module):
    packed_modules_mapping = {"q": ("qk", "q"), "k": ("qk", "k")}
    ignored_keys = ("extra.**",)
    renames = (("transformer.", "body."),)
    tied_parameters = {"head.weight": "body.embed.weight"}

    def __init__(self, tie: bool):
        super().__init__()
        self.body = nn.Module()
        self.body.embed = nn.Embedding(5, 3)
        self.body.qk = _Fused()
        self.head = nn.Linear(3, 5, bias=False)
        if tie:
            self.head.weight = self.body.embed.weight

    def get_expert_mapping(self) -> ExpertMapping:
        return ExpertMapping()

    def load_weights(self, checkpoint) -> None:
        load_packed_weights(self, checkpoint)


def test_a_model_exposing_only_the_protocol_loads(tmp_path):
    g = torch.Generator().manual_seed(1)
    tensors = {"transformer.embed.weight": torch.randn(5, 3, generator=g), "transformer.q.weight": torch.randn(2, 3, generator=g),
               "transformer.k.weight": torch.randn(2, 3, generator=g), "head.weight": torch.randn(5, 3, generator=g),
               "extra.vision.0.weight": torch.ones(1)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    for tie in (True, False):
        model = _TinyPacked(tie)
        with Checkpoint(tmp_path) as ckpt:
            get_target("rocm").load(model, ckpt)
        assert torch.equal(model.body.qk.weight[:2], tensors["transformer.q.weight"])
        assert torch.equal(model.body.qk.weight[2:], tensors["transformer.k.weight"])
        # Tied: the head is the embedding (its checkpoint copy ignored); untied: its own tensor.
        want = tensors["transformer.embed.weight"] if tie else tensors["head.weight"]
        assert torch.equal(model.head.weight, want)
    (tmp_path / "no_head").mkdir()
    save_file({k: v for k, v in tensors.items() if k != "head.weight"}, str(tmp_path / "no_head" / "m.safetensors"))
    with Checkpoint(tmp_path / "no_head") as ckpt, pytest.raises(CheckpointError, match=r"missing[\s\S]*head\.weight"):
        _TinyPacked(tie=False).load_weights(ckpt)  # declared tied, but not aliased: needs its own tensor


class _TinyMapped(nn.Module):
    ignored_keys = ("extra.**",)
    renames = (("transformer.", "body."),)

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3, 4), requires_grad=False)  # stored [in, out]: a transposing loader

        class _T:
            @staticmethod
            def transform(slices, rank):
                return torch.cat([s[:] for s in slices], dim=0).t()

        self.w.weight_loader = _T()

    def checkpoint_mappings(self, available: set[str]) -> dict[str, list[str]]:
        return {"w": ["body.a.weight", "body.b.weight"]}

    def load_weights(self, checkpoint) -> None:
        load_mapped_weights(self, checkpoint)


def test_a_neuron_style_model_exposing_only_the_protocol_loads(tmp_path):
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    save_file({"transformer.a.weight": a, "transformer.b.weight": b, "extra.x": torch.ones(1)},
              str(tmp_path / "model.safetensors"))
    model = _TinyMapped()
    with Checkpoint(tmp_path) as ckpt:
        get_target("neuron").load(model, ckpt)
    assert torch.equal(model.w, torch.cat([a, b]).t())
    assert model.w.device.type == "cpu"
    tensors = load_file(tmp_path / "model.safetensors")
    (tmp_path / "bad").mkdir()
    save_file({k: v for k, v in tensors.items() if k != "transformer.b.weight"}, str(tmp_path / "bad" / "m.safetensors"))
    with Checkpoint(tmp_path / "bad") as ckpt, pytest.raises(CheckpointError, match=r"missing[\s\S]*\bw\b"):
        model.load_weights(ckpt)
