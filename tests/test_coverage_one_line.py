"""`modelgen run`'s coverage failure is one line (README: "fails in one line"), naming each group of mismatched
names with its count and first name and where in the spec to fix it; `--verbose` prints the whole report."""
from __future__ import annotations

import pytest

from modelgen.cli import main
from modelgen.cli.coverage import CoverageError


@pytest.fixture()
def broken_checkpoint(tmp_path):
    from safetensors.torch import load_file, save_file

    from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

    d = tmp_path / "ck"
    make_tiny_checkpoint(d, "LlamaForCausalLM", num_hidden_layers=2)
    f = next(d.glob("*.safetensors"))
    tensors = load_file(f)
    for name in [n for n in tensors if n.endswith("self_attn.o_proj.weight")]:
        tensors.pop(name)
    tensors["model.layers.0.mlp.extra_scale"] = tensors["model.norm.weight"].clone()
    save_file(tensors, str(f), metadata={"format": "pt"})
    return d


def test_run_prints_the_coverage_failure_in_one_line(broken_checkpoint, capsys):
    assert main(["run", "--checkpoint", str(broken_checkpoint), "--prompt-ids", "5,6"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "missing): 2, first model.layers.0.self_attn.o_proj.weight" in err
    assert "unexpected; add to checkpoint.ignore if intended): 1, first model.layers.0.mlp.extra_scale" in err
    assert "fix at specs/llama.yaml:" in err and "--verbose for the full report" in err


def test_run_verbose_gives_the_full_list(broken_checkpoint):
    with pytest.raises(CoverageError) as e:  # --verbose: raised whole, with its traceback
        main(["run", "--checkpoint", str(broken_checkpoint), "--prompt-ids", "5,6", "--verbose"])
    text = str(e.value)
    assert all(f"model.layers.{i}.self_attn.o_proj.weight" in text for i in range(2))
    assert "coverage: FAILED" in text
