"""``modelgen run`` on bad checkpoints, configs, tokenizers, chat templates and requests: exit 1 and one line on
stderr naming the file/field/value and what is expected; a traceback only with ``--verbose``.

A representative set runs ``python -m modelgen.cli`` in a subprocess (the real entry point, interpreter
exit code and stderr); the rest call ``cli.main`` in-process with captured stderr, which is the same code path
minus ~3 s of interpreter start per case on this 2-core machine. ``MODELGEN_CLI_SUBPROCESS=1`` runs every case in
a subprocess."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import traceback

import pytest
import torch

VOCAB = 160  # tests.llama_fixtures: vocab_size


ALL_SUBPROCESS = os.environ.get("MODELGEN_CLI_SUBPROCESS") == "1"


def _run(*args: str, subprocess_: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = ["run", "--device", "cpu", *args]  # pinned (`auto` picks a GPU where there is one); a later --device wins
    if subprocess_ or ALL_SUBPROCESS:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        return subprocess.run([sys.executable, "-m", "modelgen.cli", *argv], capture_output=True,
                              text=True, timeout=timeout, env=env)
    from modelgen.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse usage errors
            rc = e.code
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc(file=err)
            rc = 1
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, f"rc {proc.returncode}; stderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture(scope="module")
def base_checkpoint(llama_checkpoint, tmp_path_factory):
    """The tiny Llama checkpoint plus a word-level tokenizer.json and a ChatML template."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    src, _ = llama_checkpoint("gqa")
    d = tmp_path_factory.mktemp("cli_base")
    for f in src.iterdir():
        shutil.copy(f, d / f.name)
    tok = HFTokenizer(WordLevel({w: i for i, w in enumerate(["[UNK]", "<s>", "</s>", "hello", "world"])},
                                unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}",
        "bos_token": "<s>", "eos_token": "</s>",
    }))
    return d


@pytest.fixture
def checkpoint(base_checkpoint, tmp_path):
    """A fresh copy to corrupt; ``checkpoint(config=..., files=...)`` edits config.json keys and writes files."""

    def make(config: dict | None = None, files: dict[str, str | bytes] | None = None, drop=()):
        d = tmp_path / "ckpt"
        shutil.copytree(base_checkpoint, d)
        if config:
            cfg = json.loads((d / "config.json").read_text())
            cfg.update(config)
            (d / "config.json").write_text(json.dumps(cfg))
        for name, content in (files or {}).items():
            (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        for name in drop:
            (d / name).unlink()
        return d

    return make


def test_baseline_runs(checkpoint):
    d = checkpoint()
    proc = _run("--checkpoint", str(d), "--prompt", "hello world", "--max-new-tokens", "2", "--json", subprocess_=True)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["outputs"][0]["token_ids"]) == 2


def test_missing_checkpoint_dir(tmp_path):
    missing = tmp_path / "nope"
    _assert_one_line_error(_run("--checkpoint", str(missing), "--prompt", "hi", subprocess_=True),
                           str(missing), "no such checkpoint directory")


def test_checkpoint_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _assert_one_line_error(_run("--checkpoint", str(f), "--prompt-ids", "1,2"), "not a directory")


@pytest.mark.parametrize(
    "files, args, needles",
    [
        ({"tokenizer.json": "{not json"}, ["--prompt", "hello"], ["tokenizer.json", "not a valid tokenizers file"]),
        ({"tokenizer.json": b"\xff\xfe\x00"}, ["--prompt", "hello"], ["tokenizer.json"]),
        ({"tokenizer_config.json": "{broken"}, ["--prompt", "hello"], ["tokenizer_config.json", "not valid JSON"]),
        ({"tokenizer_config.json": "[1, 2]"}, ["--prompt", "hello"], ["tokenizer_config.json", "expected a JSON object"]),
        ({"tokenizer_config.json": '{"chat_template": "{% for %}"}'}, ["--prompt", "hello", "--chat"],
         ["tokenizer_config.json", "chat template syntax error: line 1"]),
        ({"tokenizer_config.json": '{"chat_template": "{{ messages.__class__.__mro__ }}"}'},
         ["--prompt", "hello", "--chat"], ["tokenizer_config.json", "chat template attempted an unsafe operation"]),
        ({"tokenizer_config.json": '{"chat_template": "{{ nothing.here }}"}'}, ["--prompt", "hello", "--chat"],
         ["tokenizer_config.json", "chat template uses an undefined value: 'nothing' is undefined"]),
        ({"tokenizer_config.json": '{"chat_template": "{{ \'x\'*100000*100000 }}"}'}, ["--prompt", "hello", "--chat"],
         ["tokenizer_config.json", "render size limit"]),
        ({"chat_template.jinja": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
         ["--prompt", "hello", "--chat"], ["chat_template.jinja", "render time limit"]),
        ({"tokenizer_config.json": '{"chat_template": 5}'}, ["--prompt", "hello", "--chat"],
         ["tokenizer_config.json", "field 'chat_template': expected a string"]),
    ],
    ids=["tokenizer-json", "tokenizer-binary", "tokenizer-config-json", "tokenizer-config-array", "template-syntax",
         "template-security", "template-undefined", "template-size-bomb", "template-time-bomb", "template-type"],
)
def test_tokenizer_and_template_errors(checkpoint, files, args, needles):
    d = checkpoint(files=files)
    subprocess_ = "template-size-bomb" in os.environ.get("PYTEST_CURRENT_TEST", "")  # the bomb of issue 13, for real
    _assert_one_line_error(_run("--checkpoint", str(d), *args, subprocess_=subprocess_), *needles)


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--prompt-ids", f"1,2,{VOCAB}"], [f"prompt 0: token id {VOCAB} at position 2", f"vocab_size {VOCAB}"]),
        (["--prompt-ids", "1,2", "--prompt-ids=-3,4"], ["prompt 1: token id -3 at position 0", "[0, 159]"]),
        (["--prompt-ids", "1", "--temperature", "nan"], ["temperature = nan", "expected a finite number >= 0"]),
        (["--prompt-ids", "1", "--temperature", "inf"], ["temperature = inf"]),
        (["--prompt-ids", "1", "--temperature", "-1"], ["temperature = -1.0"]),
        (["--prompt-ids", "1", "--top-p", "0"], ["top_p = 0.0", "expected a number in (0, 1]"]),
        (["--prompt-ids", "1", "--top-p", "1.5"], ["top_p = 1.5"]),
        (["--prompt-ids", "1", "--top-p", "nan"], ["top_p = nan"]),
        (["--prompt-ids", "1", "--seed", str(2**70)], [f"seed = {2**70}", "expected an integer in [0, 2**64 - 1]"]),
        (["--prompt-ids", "1", "--max-new-tokens", "-1"], ["max_tokens = -1"]),
        (["--prompt-ids", "1", "--max-num-seqs", "0"], ["max_num_seqs = 0: expected a positive integer"]),
        (["--prompt-ids", "1", "--block-size", "0"], ["block_size = 0: expected a positive integer"]),
        (["--prompt-ids", "1", "--num-blocks", "0"], ["num_blocks = 0: expected a positive integer"]),
        (["--prompt-ids", "1", "--max-model-len", "-5"], ["max_model_len = -5"]),
        (["--prompt-ids", "1", "--num-blocks", "1000000000"], ["the KV cache would take 8192.0 GB (1000000000 blocks",
                                                              "lower max_model_len, max_num_seqs or num_blocks"]),
        (["--prompt-ids", "1", "--device", "tpu"], ["device 'tpu': expected cpu or cuda"]),
    ],
    ids=["id-over-vocab", "id-negative", "temperature-nan", "temperature-inf", "temperature-negative", "top-p-0",
         "top-p-1.5", "top-p-nan", "seed-2**70", "max-new-tokens", "max-num-seqs-0", "block-size-0",
         "num-blocks-0", "max-model-len", "kv-cache-too-big", "device-unknown"],
)
def test_request_errors(checkpoint, args, needles):
    _assert_one_line_error(_run("--checkpoint", str(checkpoint()), *args), *needles)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_device_cuda_without_gpu(checkpoint):
    _assert_one_line_error(_run("--checkpoint", str(checkpoint()), "--prompt-ids", "1", "--device", "cuda",
                                subprocess_=True),
                           "device 'cuda': no CUDA GPU is available", "use --device cpu")


@pytest.mark.parametrize(
    "config, needles",
    [
        ({"torch_dtype": "float8"}, ["config.json: field 'torch_dtype' = 'float8'", "expected one of float32"]),
        ({"torch_dtype": None, "dtype": 7}, ["config.json: field 'dtype' = 7"]),
        ({"max_position_embeddings": 0}, ["config.json: field 'max_position_embeddings' = 0: expected a positive"]),
        ({"max_position_embeddings": 1e9},
         ["config.json: field 'max_position_embeddings' = 1000000000", "RoPE table alone would take 64.0 GB"]),
        ({"num_hidden_layers": 0}, ["config.json: field 'num_hidden_layers' = 0: expected a positive integer"]),
        ({"num_hidden_layers": -1}, ["config.json: field 'num_hidden_layers' = -1"]),
        ({"num_attention_heads": 0}, ["config.json: field 'num_attention_heads' = 0"]),
        ({"vocab_size": "many"}, ["config.json: field 'vocab_size' = 'many'"]),
        ({"hidden_size": 64.5}, ["config.json: field 'hidden_size' = 64.5"]),
        ({"rms_norm_eps": float("nan")}, ["config.json", "'rms_norm_eps'", "expected a finite number"]),
        ({"architectures": ["NoSuchForCausalLM"]}, ["NoSuchForCausalLM"]),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 1e7, "rope_theta": 1e4}, "max_position_embeddings": 4096},
         ["config.json: field 'max_position_embeddings' = 4096: its RoPE table alone would take"]),
    ],
    ids=["dtype-float8", "dtype-int", "max-pos-0", "max-pos-1e9", "layers-0", "layers-neg", "heads-0", "vocab-str",
         "hidden-float", "eps-nan", "unknown-arch", "dynamic-rope-factor"],
)
def test_config_errors(checkpoint, config, needles):
    subprocess_ = config.get("max_position_embeddings") == 1e9  # would have allocated 64 GB: prove it in a process
    _assert_one_line_error(_run("--checkpoint", str(checkpoint(config=config)), "--prompt-ids", "1,2",
                                subprocess_=subprocess_), *needles)


def test_eos_token_id_of_wrong_type(checkpoint):
    d = checkpoint(config={"eos_token_id": ["x"]}, drop=["generation_config.json"])
    _assert_one_line_error(_run("--checkpoint", str(d), "--prompt-ids", "1,2"),
                           "config.json: field 'eos_token_id' = ['x']", "expected a non-negative integer or a list")


def test_corrupt_config_json(checkpoint):
    d = checkpoint(files={"config.json": "{oops"})
    _assert_one_line_error(_run("--checkpoint", str(d), "--prompt-ids", "1"), "config.json: not valid JSON")


def test_missing_config_json(checkpoint):
    d = checkpoint(drop=["config.json"])
    _assert_one_line_error(_run("--checkpoint", str(d), "--prompt-ids", "1"), "checkpoint directory has no config.json")


def test_nan_weight_is_named(checkpoint):
    from safetensors.torch import load_file, save_file

    d = checkpoint()
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.1.mlp.down_proj.weight"][3, 5] = float("nan")
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    _assert_one_line_error(_run("--checkpoint", str(d), "--prompt-ids", "1,2", subprocess_=True), "model.safetensors",
                           "tensor 'model.layers.1.mlp.down_proj.weight' holds 1 NaN/Inf value(s)", "(3, 5)")
    proc = _run("--checkpoint", str(d), "--prompt-ids", "1,2", "--max-new-tokens", "1", "--check-finite", "off")
    assert proc.returncode == 0, proc.stderr


def test_external_shard_refused_then_allowed(checkpoint, tmp_path):
    d = checkpoint()
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(d / "model.safetensors", outside / "model.safetensors")
    (d / "model.safetensors").symlink_to(outside / "model.safetensors")
    _assert_one_line_error(_run("--checkpoint", str(d), "--prompt-ids", "1,2"),
                           "shard file resolves to", "outside the checkpoint directory", "--allow-external-shards")
    proc = _run("--checkpoint", str(d), "--prompt-ids", "1,2", "--max-new-tokens", "1", "--allow-external-shards")
    assert proc.returncode == 0, proc.stderr


def test_verbose_shows_the_traceback(checkpoint):
    proc = _run("--checkpoint", str(checkpoint(config={"num_hidden_layers": 0})), "--prompt-ids", "1", "--verbose",
                subprocess_=True)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "num_hidden_layers" in proc.stderr
