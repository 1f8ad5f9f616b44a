"""`modelgen new --from-hf` (cli/draft.py): drafts for tiny checkpoints of existing families build (lowering
succeeds) with at most a few TODOs; onboarding a family as if it were new (its own spec excluded from the bases)
still builds, with its TODOs naming what the base lacks."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from modelgen.cli import main
from modelgen.cli.draft import draft_spec
from modelgen.codegen.lower import compile_spec
from modelgen.codegen.spec_file import REPO_ROOT
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

FAMILIES = ["LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"]


def _builds(tmp_path: Path, text: str) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(REPO_ROOT / "specs", specs)  # the draft extends a spec beside it
    path = specs / "zz_draft.yaml"
    path.write_text(text)
    compile_spec(path)


@pytest.mark.parametrize("arch", FAMILIES)
def test_draft_of_an_existing_family_builds_with_no_todo(tmp_path, arch):
    # without a sliding window: the Mixtral spec refuses one (that refusal is a TODO of its own)
    make_tiny_checkpoint(tmp_path / "ck", arch, num_hidden_layers=2, without=("sliding_window",))
    draft = draft_spec(tmp_path / "ck")
    assert arch in draft.base.ir.architectures, draft.text
    assert draft.todos == 0, draft.text
    _builds(tmp_path, draft.text)


@pytest.mark.slow
@pytest.mark.parametrize("arch, own", [("MixtralForCausalLM", "mixtral"), ("Qwen3ForCausalLM", "qwen3"),
                                       ("Qwen3MoeForCausalLM", "qwen3_moe")])
def test_draft_of_a_family_treated_as_new_builds_and_lists_what_differs(tmp_path, arch, own):
    make_tiny_checkpoint(tmp_path / "ck", arch, num_hidden_layers=2, without=("sliding_window",))
    draft = draft_spec(tmp_path / "ck", exclude=(own,))
    assert draft.base.spec.stem != own
    assert 1 <= draft.todos <= 4, draft.text  # what the base does not generate, named
    _builds(tmp_path, draft.text)


def test_unknown_config_keys_become_todos_and_bindings_use_other_specs_spelling(tmp_path, capsys):
    import json

    ck = tmp_path / "ck"
    make_tiny_checkpoint(ck, "MixtralForCausalLM", num_hidden_layers=2, without=("sliding_window",))
    cfg = json.loads((ck / "config.json").read_text())
    cfg["num_experts"] = cfg.pop("num_local_experts")  # the spelling gpt_oss.yaml also reads into num_local_experts
    cfg["logit_scale"] = 0.5
    cfg["sliding_window"] = 4  # refused by mixtral.yaml's requires:
    (ck / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "draft.yaml"
    assert main(["new", "--from-hf", str(ck), "-o", str(out)]) == 0
    text = out.read_text()
    assert "# TODO config: 'logit_scale' = 0.5" in text
    assert "num_local_experts: {type: int, read: [num_experts, num_local_experts]}" in text
    assert "# TODO requires: mixtral.yaml refuses this config: specs/mixtral.yaml: sliding-window" in text
    assert "TODO(s) to review" in capsys.readouterr().err
    assert main(["new", "--from-hf", str(ck), "-o", str(out)]) == 2  # no silent overwrite
