"""`modelgen new --from-hf` (cli/draft.py): drafts for tiny checkpoints of existing families build (lowering
succeeds) with at most a few TODOs; onboarding a family as if it were new (its own spec excluded from the bases)
still builds, with its TODOs naming what the base lacks."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from modelgen.cli import main
from modelgen.cli.draft import draft_spec
from modelgen.codegen.lower import compile_spec
from modelgen.codegen.spec_file import REPO_ROOT
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

SPECS = REPO_ROOT / "specs"

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


def _write_config(path: Path, config: dict) -> Path:
    import json

    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_gpt_neox_like_config_gets_a_non_gated_layernorm_parallel_base(tmp_path):
    # GPT-NeoX's shape (gelu MLP without a gate, LayerNorm, parallel residual): by model_type alone nothing is
    # close, and the key overlap once picked gpt_oss (a MoE with gated experts).
    ck = _write_config(tmp_path / "neox", {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": 64,
        "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "rotary_pct": 0.25,
        "rotary_emb_base": 10000, "layer_norm_eps": 1e-5, "use_parallel_residual": True, "hidden_act": "gelu",
        "attention_bias": True, "vocab_size": 128, "max_position_embeddings": 256, "tie_word_embeddings": False})
    draft = draft_spec(ck)
    assert "ungated" in draft.base.ir.kinds and "moe" not in draft.base.ir.kinds, draft.text
    assert "LayerNorm" in draft.base.ir.norm_classes, draft.text
    assert "TODO layer kind" not in draft.text
    assert "class_prefix: GPTNeoX" in draft.text and "TODO class_prefix" not in draft.text


MAMBA2_CONFIG = {
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 64, "num_heads": 4,
    "head_dim": 32, "state_size": 16, "expand": 2, "conv_kernel": 4, "n_groups": 1, "time_step_min": 0.001,
    "time_step_max": 0.1, "layer_norm_epsilon": 1e-5, "rms_norm": True, "num_hidden_layers": 2,
    "vocab_size": 128, "chunk_size": 64, "hidden_act": "silu"}


def test_mamba2_like_config_drafts_from_a_mamba2_base(tmp_path):
    """A state-space config is told apart as Mamba-2 (n_groups, chunk_size) and drafted from a spec whose blocks are
    `kind: mamba2` mixers -- with mamba2.yaml itself hidden too, as a newcomer onboarding a new Mamba-2 family."""
    ck = _write_config(tmp_path / "mamba2", MAMBA2_CONFIG)
    for exclude in ((), ("mamba2",)):
        draft = draft_spec(ck, exclude=exclude)
        assert "TODO layer kind" not in draft.text, draft.text
        assert "kind: mamba2" in load_base_text(draft), draft.text


def test_mamba1_like_config_drafts_from_a_mamba_base(tmp_path):
    """Without Mamba-2's keys a state-space config is Mamba-1: drafted from mamba.yaml; with mamba.yaml hidden (and
    jamba's MoE hybrid no closer than a transformer) the draft says in one line which mixer kind to start from."""
    ck = _write_config(tmp_path / "mamba", {
        "architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 64, "state_size": 16,
        "expand": 2, "conv_kernel": 4, "time_step_rank": 4, "layer_norm_epsilon": 1e-5, "num_hidden_layers": 2,
        "vocab_size": 128, "use_bias": False, "use_conv_bias": True})
    draft = draft_spec(ck)
    assert "TODO layer kind" not in draft.text, draft.text
    assert re.search(r"kind: mamba\b(?!2)", load_base_text(draft)), draft.text
    hidden = draft_spec(ck, exclude=("mamba",))
    if not re.search(r"kind: mamba\b(?!2)", load_base_text(hidden)):
        todo = [line for line in hidden.text.splitlines() if line.startswith("# TODO layer kind:")]
        assert len(todo) == 1 and "`kind: mamba` blocks" in todo[0], hidden.text


def test_state_space_config_over_a_base_without_the_mixer_says_so(tmp_path):
    """--base llama for a Mamba-2 config: the one line says the base has no mamba2 mixer and where to start."""
    ck = _write_config(tmp_path / "mamba2", MAMBA2_CONFIG)
    draft = draft_spec(ck, base=SPECS / "llama.yaml")
    todo = [line for line in draft.text.splitlines() if line.startswith("# TODO layer kind:")]
    assert len(todo) == 1, draft.text
    assert "mamba2 mixer" in todo[0] and "conv_kernel" in todo[0] and "state_size" in todo[0]


def load_base_text(draft) -> str:
    """The text of the spec a draft extends (its `extends:` line), followed down the chain."""
    m = re.search(r"^extends: (\S+)", draft.text, re.M)
    assert m, draft.text
    seen, text, name = [], "", m.group(1)
    while name and name not in seen:
        seen.append(name)
        part = (SPECS / name).read_text()
        text += part
        m = re.search(r"^extends: (\S+)", part, re.M)
        name = m.group(1) if m else None
    return text


def test_made_up_class_prefix_is_a_todo(tmp_path):
    ck = _write_config(tmp_path / "odd", {
        "architectures": ["lowercase_arch"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "vocab_size": 128})
    draft = draft_spec(ck)
    assert "class_prefix: Todo" in draft.text
    assert "# TODO class_prefix: 'Todo' is a placeholder" in draft.text, draft.text


def test_config_json_that_is_a_fifo_is_refused_not_read(tmp_path):
    import os

    from modelgen.cli.draft import DraftError

    (tmp_path / "ck").mkdir()
    os.mkfifo(tmp_path / "ck" / "config.json")
    with pytest.raises(DraftError, match="FIFO"):
        draft_spec(tmp_path / "ck")
