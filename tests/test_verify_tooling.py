"""`modelgen verify`'s own machinery (cli/verify.py): tiny sizes under a spec's own key names, and a failing
transformers reference reported as the reference's failure, not modelgen's."""
from __future__ import annotations

import shutil

from modelgen.cli.verify import size_aliases, verify_spec
from modelgen.codegen.lower import REPO_ROOT, compile_spec
from modelgen.runtime.testing import tiny_models

DBRX_SIZES = """\
extends: llama.yaml
name: dbrx_sizes
class_prefix: DbrxSizes
description: "Llama's forward with its sizes read under DBRX's key names"
hf: {architectures: [DbrxForCausalLM], model_type: dbrx, modeling: "transformers/models/dbrx/modeling_dbrx.py"}
config:
  hidden_size: {type: int, read: [d_model]}
  num_attention_heads: {type: int, read: [n_heads]}
  num_hidden_layers: {type: int, read: [n_layers]}
  intermediate_size: {type: int, read: [ffn_config.ffn_hidden_size]}
"""


def test_tiny_config_uses_the_specs_own_size_keys(tmp_path):
    specs = tmp_path / "specs"
    shutil.copytree(REPO_ROOT / "specs", specs)
    (specs / "dbrx_sizes.yaml").write_text(DBRX_SIZES)
    aliases = size_aliases(compile_spec(specs / "dbrx_sizes.yaml"))
    assert aliases["d_model"] == "hidden_size" and aliases["ffn_config.ffn_hidden_size"] == "intermediate_size"
    cfg = tiny_models.tiny_config("DbrxForCausalLM", aliases=aliases)
    sizes = tiny_models.TINY_SIZES
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers) == (sizes["hidden_size"], sizes["num_attention_heads"],
                                                         sizes["num_hidden_layers"])
    assert cfg.ffn_config.ffn_hidden_size == sizes["intermediate_size"]
    # without the aliases the "tiny" DBRX keeps transformers' default width (the 2.3B model of issue 26)
    assert tiny_models.tiny_config("DbrxForCausalLM").d_model > 10 * sizes["hidden_size"]


def test_a_failing_reference_is_named_as_the_reference(monkeypatch):
    def broken(*args, **kwargs):
        raise IndexError("mrope_section does not fit head_dim")

    monkeypatch.setattr(tiny_models, "make_tiny_checkpoint", broken)
    report = verify_spec(REPO_ROOT / "specs" / "llama.yaml", ("rocm",), bf16=False)
    assert not report.passed
    # the base tiny config and the +features one (llama reads attention_bias, mlp_bias, a RoPE scaling)
    assert [(c.architecture, c.name) for c in report.checks] == [
        ("LlamaForCausalLM", "reference"), ("LlamaForCausalLM +features", "reference")], report.format()
    assert {c.detail for c in report.checks} == {
        "transformers' reference failed: IndexError: mrope_section does not fit head_dim"}


def test_features_config_catches_a_feature_the_spec_reads_but_drops(tmp_path):
    # o_proj without its bias: the default tiny config (attention_bias false) cannot tell; the +features one has
    # o_proj.bias tensors the generated model has no parameter for
    spec = tmp_path / "llama.yaml"
    spec.write_text((REPO_ROOT / "specs" / "llama.yaml").read_text().replace("o_bias: attention_bias",
                                                                              "o_bias: false"))
    report = verify_spec(spec, ("rocm",), bf16=False)
    failed = {(c.architecture, c.name) for c in report.failures()}
    assert ("LlamaForCausalLM +features", "run") in failed, report.format()
    assert "o_proj.bias" in next(c.detail for c in report.failures() if c.name == "run")
    assert not any(arch == "LlamaForCausalLM" for arch, _ in failed), report.format()
