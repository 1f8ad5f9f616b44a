"""One TARGETS list shared by codegen and runtime; the engine talks to target objects; CheckpointDir owns the
checkpoint directory (config.json with text_config flattening and quantization refusal, EOS ids, weights)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from modelgen.runtime.checkpoint_dir import CheckpointDir, flatten_text_config
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.loader.checkpoint import CheckpointError
from modelgen.runtime.loader.quantization import QuantizationError
from modelgen.runtime.targets import ENGINE_TARGETS, TARGETS, check_target, get_target

ROOT = Path(__file__).resolve().parent.parent


def test_targets_is_defined_once_and_shared():
    from modelgen.cli import command as cli
    from modelgen.codegen import render
    from modelgen.runtime.engine import registry

    assert render.TARGETS is TARGETS and cli.TARGETS is TARGETS
    assert set(render.PACKAGE_FILES) == set(TARGETS)  # each target's generated package files
    assert set(TARGETS) == {p.name for p in (ROOT / "generated").iterdir() if p.is_dir() and p.name != "__pycache__"}
    # No second definition anywhere in the code folders (a literal tuple of the target names, or TARGETS = ...).
    pattern = re.compile(r"^\s*TARGETS\s*[:=]|\(\s*['\"]rocm['\"]\s*,\s*['\"]neuron['\"]\s*\)", re.M)
    defs = [str(p.relative_to(ROOT)) for folder in ("codegen", "runtime", "cli", "modelgen")
            for p in (ROOT / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert defs == ["modelgen/targets.py"]
    with pytest.raises(ValueError, match=r"unknown target 'tpu'; expected one of rocm, neuron, vllm"):
        registry.model_index("tpu")
    with pytest.raises(ValueError, match=r"unknown target 'tpu'"):
        get_target("tpu")
    assert check_target("neuron") == "neuron"


def test_codegen_stays_torch_free():
    code = ("import sys; import modelgen.cli, modelgen.codegen.render, modelgen.codegen.build; "
            "from modelgen.runtime.targets import TARGETS; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_target_objects_and_the_engine_uses_them(llama_checkpoint):
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.targets.neuron import NeuronRunner
    from modelgen.runtime.targets.rocm import RocmRunner

    assert [get_target(t).name for t in ENGINE_TARGETS] == list(ENGINE_TARGETS) == ["rocm", "neuron"]
    with pytest.raises(ValueError, match="the vllm target is served by vLLM"):
        get_target("vllm")  # vLLM runs it, through modelgen's plugin
    path, _ = llama_checkpoint("gqa")
    for target, runner in (("rocm", RocmRunner), ("neuron", NeuronRunner)):
        llm = LLM(path, target=target, dtype="float32", max_model_len=64)
        assert llm.target is get_target(target) and type(llm.runner) is runner
    # The target-independent engine names no target.
    source = (ROOT / "runtime" / "engine" / "llm.py").read_text()
    assert not re.search(r"['\"](rocm|neuron)['\"]\s*[!=]=|==\s*['\"](rocm|neuron)['\"]", source)


def test_neuron_step_budget_is_the_targets():
    from modelgen.runtime.targets.base import RunnerOptions

    neuron, rocm = get_target("neuron"), get_target("rocm")
    opts = RunnerOptions(max_model_len=256, max_num_seqs=4, prefill_buckets=[64, 128])
    assert (neuron.step_budget(opts).max_num_batched_tokens, neuron.step_budget(opts).chunked_prefill) == (128, True)
    assert rocm.step_budget(opts).max_num_batched_tokens is None and rocm.step_budget(opts).chunked_prefill
    with pytest.raises(ValueError, match=r"max_num_batched_tokens 512 exceeds the largest prefill bucket 128"):
        neuron.step_budget(RunnerOptions(max_model_len=256, max_num_seqs=4, prefill_buckets=[64, 128],
                                         max_num_batched_tokens=512))


# ------------------------------------------------------------------------------------------------ CheckpointDir
def _write(d: Path, config: dict | None, **files: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    for name, content in files.items():
        (d / f"{name}.json").write_text(json.dumps(content))
    return d


def test_missing_directory_file_and_config(tmp_path):
    with pytest.raises(CheckpointError, match=r"nope: no such checkpoint directory"):
        CheckpointDir(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match=r"file: not a directory"):
        CheckpointDir(tmp_path / "file")
    with pytest.raises(CheckpointError, match=r"empty: checkpoint directory has no config.json"):
        CheckpointDir(_write(tmp_path / "empty", None))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"config.json: expected a JSON object"):
        CheckpointDir(tmp_path / "bad")


def test_text_config_is_flattened_for_conditional_generation(tmp_path):
    raw = {"architectures": ["Qwen3_5ForConditionalGeneration"], "hidden_size": 8, "vision_config": {"depth": 2},
           "text_config": {"hidden_size": 64, "num_hidden_layers": 2, "architectures": ["Inner"]}}
    ckpt = CheckpointDir(_write(tmp_path / "mm", raw))
    assert ckpt.hf_config["hidden_size"] == 64 and ckpt.hf_config["num_hidden_layers"] == 2
    assert ckpt.hf_config["vision_config"] == {"depth": 2}
    assert ckpt.architectures == ckpt.hf_config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert ckpt.raw_config == raw  # the stored file, untouched
    assert flatten_text_config({"hidden_size": 8}) == {"hidden_size": 8}


@pytest.mark.parametrize("nested", [False, True])
def test_quantized_checkpoint_is_refused_naming_the_method(tmp_path, nested):
    qc = {"quant_method": "awq", "bits": 4}
    raw = {"architectures": ["LlamaForCausalLM"]}
    raw.update({"text_config": {"quantization_config": qc}} if nested else {"quantization_config": qc})
    d = _write(tmp_path / "q", raw)
    where = "text_config.quantization_config" if nested else "quantization_config"
    with pytest.raises(QuantizationError, match=rf"config.json: {where}.quant_method 'awq' is not supported") as e:
        CheckpointDir(d)
    assert "\n" not in str(e.value)
    # The engine refuses it before building a model or opening weights: there are no weights here at all.
    from modelgen.runtime.engine.llm import LLM

    with pytest.raises(QuantizationError, match=r"'awq'"):
        LLM(d, target="rocm")


def test_eos_ids_generation_config_first_then_config(tmp_path):
    d = _write(tmp_path / "e", {"architectures": ["X"], "eos_token_id": 2}, generation_config={"eos_token_id": [7, 9]})
    assert CheckpointDir(d).eos_token_ids() == {7, 9}
    d2 = _write(tmp_path / "e2", {"architectures": ["X"], "eos_token_id": 2})
    assert CheckpointDir(d2).eos_token_ids() == {2}
    d3 = _write(tmp_path / "e3", {"architectures": ["X"]}, generation_config={"eos_token_id": "</s>"})
    with pytest.raises(ConfigError, match=r"generation_config.json: field 'eos_token_id' = '</s>'"):
        CheckpointDir(d3).eos_token_ids()


def test_open_weights_and_tokenizer(llama_checkpoint):
    import torch

    path, hf = llama_checkpoint("gqa")
    ckpt = CheckpointDir(path)
    assert ckpt.tokenizer() is None  # save_pretrained of a bare model writes no tokenizer.json
    with ckpt.open_weights(torch.float32) as weights:
        assert torch.equal(weights.get_tensor("model.norm.weight"), hf.model.norm.weight)


def test_cli_asks_the_target_about_on_device_sampling(llama_checkpoint, capsys):
    from modelgen.cli import main

    path, _ = llama_checkpoint("gqa")
    assert [t for t in ENGINE_TARGETS if get_target(t).on_device_sampling] == ["neuron"]
    rc = main(["run", "--checkpoint", str(path), "--target", "rocm", "--on-device-sampling", "--prompt-ids", "1,2"])
    assert rc == 2 and "--on-device-sampling applies to the neuron target" in capsys.readouterr().err
