"""Hostile checkpoint directories (issue 27, item 5): every case is refused within a time bound, with one line that
names the file and the field.

* file kinds: a FIFO, ``/dev/zero`` (through a symlink) or a directory in place of each file modelgen reads from a
  checkpoint -- refused without blocking and without reading. These run in a child process with a timeout (a
  regression would block in ``open()`` or read ``/dev/zero`` forever, which must fail the test, not hang it) and
  an address-space limit (so such a regression cannot fill this machine's memory first).
* config values: wrong types, values past any tensor's size, values outside their mathematical domain, missing
  RoPE parameters, deep nesting, huge integers -- each a ConfigError / CheckpointError naming the field, raised
  before the model is built (elapsed-time bound).
* layer counts: ``num_hidden_layers: 1e9`` beside a 2-layer checkpoint is refused from the safetensors headers in
  well under a second, in-process and through ``modelgen run`` (subprocess with a timeout).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from modelgen.runtime.checkpoint_dir import CheckpointDir
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.loader.checkpoint import CheckpointError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def base(llama_checkpoint, tmp_path_factory):
    """The tiny Llama (2 layers, llama3 RoPE so its parameters can be broken) plus tokenizer files."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel

    src, _ = llama_checkpoint("llama3_rope")
    d = tmp_path_factory.mktemp("hostile_base")
    for f in src.iterdir():
        shutil.copy(f, d / f.name)
    HFTokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    (d / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    return d


@pytest.fixture
def copy(base, tmp_path):
    def make(config: dict | None = None, text: str | None = None) -> Path:
        d = tmp_path / "ckpt"
        shutil.copytree(base, d)
        if config is not None or text is not None:
            cfg = json.loads((d / "config.json").read_text())
            cfg.update(config or {})
            (d / "config.json").write_text(text if text is not None else json.dumps(cfg))
        return d

    return make


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text, text
    assert len(text) < 1000, f"{len(text)} characters: {text[:300]}"
    return text


# ------------------------------------------------------------------------------------------------------ file kinds
# The child: for each file name, replace it by the hostile kind in a fresh copy, then do what `modelgen run` does
# with a checkpoint (open the directory, read EOS ids, the tokenizer and its template, open the weights) and print
# the one error it got. An address-space cap is set once the imports are done.
_CHILD = textwrap.dedent("""
    import json, os, resource, shutil, sys, time
    from pathlib import Path
    import torch
    from modelgen.runtime.checkpoint_dir import CheckpointDir
    base, work, kind = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    names = json.loads(sys.argv[4])
    used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (used + (2 << 30), resource.RLIM_INFINITY))
    for name in names:
        d = work / name
        shutil.copytree(base, d)
        target = d / name
        if target.exists():
            target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        elif kind == "device":
            os.symlink("/dev/zero", target)
        else:
            target.mkdir()
        t0 = time.perf_counter()
        try:
            ckpt = CheckpointDir(d)
            ckpt.eos_token_ids()
            tok = ckpt.tokenizer()
            if tok is not None:
                tok.has_chat_template()
            with ckpt.open_weights(torch.float32):
                pass
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        print(json.dumps({"name": name, "error": error, "seconds": time.perf_counter() - t0}), flush=True)
""")

CHECKPOINT_FILES = ["config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
                    "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
KIND_WORDS = {"fifo": "a FIFO", "device": "a character device", "directory": "a directory"}


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_only_regular_files_are_opened(base, tmp_path, kind):
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(base), str(tmp_path), kind, json.dumps(CHECKPOINT_FILES)],
                          capture_output=True, text=True, timeout=90, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert sorted(results) == sorted(CHECKPOINT_FILES)
    for name, r in results.items():
        assert r["error"] is not None, f"{name} as {kind} was accepted"
        assert "\n" not in r["error"]
        assert f"/{name}: " in r["error"], r["error"]
        assert f"is {KIND_WORDS[kind]}" in r["error"] and "not a regular file" in r["error"], r["error"]
        assert r["seconds"] < 5, f"{name} as {kind}: {r['seconds']:.1f} s"


def test_checkpoint_path_itself_may_not_be_a_fifo(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    from modelgen.runtime.loader.checkpoint import Checkpoint

    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        Checkpoint(fifo)
    assert "model.safetensors" in _one_line(e.value) and "FIFO" in str(e.value)
    assert time.perf_counter() - t0 < 1


def test_json_files_are_read_with_a_byte_bound(copy):
    from modelgen.runtime.loader import files

    d = copy()
    with open(d / "config.json", "ab") as f:  # valid JSON followed by 17 MB of whitespace
        f.write(b" " * (files.MAX_CONFIG_BYTES + 1))
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        CheckpointDir(d)
    assert "config.json" in _one_line(e.value) and "larger than 16 MiB" in str(e.value)
    assert time.perf_counter() - t0 < 2


def test_tokenizer_json_is_parsed_from_a_bounded_read(copy, monkeypatch):
    """The byte bound holds for tokenizer.json too (lowered here instead of writing 512 MB)."""
    from modelgen.runtime import tokenizer

    d = copy()
    assert CheckpointDir(d).tokenizer() is not None  # the real file loads through the bounded read
    monkeypatch.setattr(tokenizer, "MAX_TOKENIZER_BYTES", (d / "tokenizer.json").stat().st_size - 1)
    with pytest.raises(tokenizer.TokenizerFileError) as e:
        CheckpointDir(d).tokenizer()
    assert "tokenizer.json" in _one_line(e.value) and "larger than" in str(e.value)


# ---------------------------------------------------------------------------------------------------- config values
def _rope(**changes):
    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    params.update(changes)
    return {"rope_parameters": {k: v for k, v in params.items() if v is not ...}}


HOSTILE_VALUES = [
    # name, config.json changes, words the one-line error must hold
    ("architectures-dict", {"architectures": [{"a": 1}]}, ["'architectures'", "list of class-name strings"]),
    ("architectures-int", {"architectures": 5}, ["'architectures'"]),
    ("dtype-dict", {"dtype": {"a": 1}}, ["'dtype'", "expected a string"]),
    ("torch-dtype-dict", {"torch_dtype": {"a": 1}}, ["'torch_dtype'", "expected a string"]),
    ("model-type-list", {"model_type": ["llama"]}, ["'model_type'"]),
    ("hidden-1e300", {"hidden_size": 1e300}, ["'hidden_size' = 1e+300"]),
    ("hidden-true", {"hidden_size": True}, ["'hidden_size'", "positive integer"]),
    ("hidden-string", {"hidden_size": "64"}, ["'hidden_size'", "positive integer"]),
    ("hidden-huge-int", {"hidden_size": 10**300}, ["'hidden_size'", "integer of 997 bits"]),
    ("hidden-long-string", {"hidden_size": "x" * 10**6}, ["'hidden_size'", "(1000002 characters)"]),
    # sizes no tensor axis reaches (small enough that, were the check gone, the build would still be cheap here)
    ("vocab-past-tensors", {"vocab_size": 10**4}, ["'vocab_size'", "larger than every dimension", "160"]),
    ("intermediate-past-tensors", {"intermediate_size": 10**4}, ["'intermediate_size'", "larger than every"]),
    ("heads-zero", {"num_attention_heads": 0}, ["'num_attention_heads'", "positive integer"]),
    ("kv-heads-negative", {"num_key_value_heads": -2}, ["'num_key_value_heads'", "positive integer"]),
    ("positions-past-int32", {"max_position_embeddings": 2**40}, ["'max_position_embeddings'", "2**31 - 1"]),
    ("rms-eps-negative", {"rms_norm_eps": -1}, ["'rms_norm_eps'", "> 0"]),
    ("rms-eps-zero", {"rms_norm_eps": 0}, ["'rms_norm_eps'", "> 0"]),
    ("rope-theta-zero", _rope(rope_theta=0), ["'rope_parameters.rope_theta'", "> 0"]),
    ("rope-theta-negative", _rope(rope_theta=-5.0), ["'rope_parameters.rope_theta'", "> 0"]),
    ("rope-theta-string", _rope(rope_theta="1e4"), ["'rope_parameters.rope_theta'", "a number"]),
    ("llama3-no-low-freq-factor", _rope(low_freq_factor=...), ["'rope_parameters'", "'low_freq_factor'", "missing"]),
    ("llama3-no-factor", _rope(factor=...), ["'rope_parameters'", "'factor'", "missing"]),
    ("rope-factor-zero", _rope(factor=0), ["'rope_parameters.factor'", "finite number > 0"]),
    ("rope-factor-negative", _rope(factor=-8.0), ["'rope_parameters.factor'", "finite number > 0"]),
    ("rope-factor-string", _rope(factor="8"), ["'rope_parameters.factor'"]),
    ("rope-factor-inf", _rope(factor=math.inf), ["'rope_parameters.factor'", "finite"]),
    ("rope-factor-nan", _rope(factor=math.nan), ["'rope_parameters.factor'", "finite"]),
    ("rope-low-equals-high", _rope(low_freq_factor=4.0), ["'rope_parameters.high_freq_factor'", "different"]),
    ("rope-original-zero", _rope(original_max_position_embeddings=0),
     ["'rope_parameters.original_max_position_embeddings'", "positive integer"]),
    ("rope-type-dict", _rope(rope_type={"a": 1}), ["'rope_parameters.rope_type'", "a string"]),
    ("yarn-beta-negative", _rope(rope_type="yarn", beta_fast=-1), ["'rope_parameters.beta_fast'"]),
    ("yarn-mscale-negative", _rope(rope_type="yarn", mscale=-1.0), ["'rope_parameters.mscale'", ">= 0"]),
    # 1e9 and 10**6 layers: test_layer_count_* below (here, were the check gone, LLM would build them in-process)
    ("layers-3", {"num_hidden_layers": 3}, ["'num_hidden_layers' = 3", "only 2 layer(s)"]),
]


@pytest.mark.parametrize("changes, words", [c[1:] for c in HOSTILE_VALUES], ids=[c[0] for c in HOSTILE_VALUES])
def test_hostile_config_values_are_refused_by_name(copy, changes, words):
    from modelgen.runtime.engine.llm import LLM

    d = copy(changes)
    t0 = time.perf_counter()
    with pytest.raises((ConfigError, CheckpointError)) as e:
        LLM(d, device="cpu")
    elapsed = time.perf_counter() - t0
    message = _one_line(e.value)
    assert str(d / "config.json") in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert elapsed < 10, f"{elapsed:.1f} s"  # refused before any model is built; the bound is for a loaded machine


def test_the_unbroken_copy_loads(copy):
    """The cases above break one value each of a checkpoint that otherwise loads (so each refusal is that value's)."""
    from modelgen.runtime.engine.llm import LLM

    llm = LLM(copy(), device="cpu")
    assert llm.config.num_hidden_layers == 2 and llm.config.rope_scaling["rope_type"] == "llama3"


@pytest.mark.parametrize("text, words", [
    ('{"a":' * 100000 + "1" + "}" * 100000, ["nests deeper than Python's JSON parser"]),
    ('{"a":' * 100 + "1" + "}" * 100, ["nests deeper than 64 levels"]),
    (', "hidden_size": ' + "9" * 5000, ["4300 digits"]),
    (', "vocab_size": 1e99999', ["'vocab_size' = inf", "positive integer"]),  # the literal parses as inf
    ("[1, 2]", ["expected a JSON object"]),
    ("\xff", ["not valid JSON"]),
], ids=["deep-recursion", "deep-64", "huge-int-literal", "float-overflow", "not-an-object", "not-json"])
def test_config_json_text_is_refused_in_one_line(copy, text, words):
    """config.json replaced by ``text``, or (``text`` starting with a comma) the real one with ``text`` spliced in
    as its last field."""
    d = copy()
    if text.startswith(","):
        text = (d / "config.json").read_text().rstrip().removesuffix("}") + text + "}"
    (d / "config.json").write_text(text)
    t0 = time.perf_counter()
    with pytest.raises((CheckpointError, ConfigError)) as e:
        from modelgen.runtime.engine.llm import LLM

        LLM(d, device="cpu")
    message = _one_line(e.value)
    assert str(d / "config.json") in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert time.perf_counter() - t0 < 10


# ---------------------------------------------------------------------------------------------------- layer counts
def test_layer_count_is_checked_against_the_headers_in_well_under_a_second(copy):
    d = copy({"num_hidden_layers": 10**9})
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        CheckpointDir(d)
    assert time.perf_counter() - t0 < 1
    assert "'num_hidden_layers' = 1000000000" in _one_line(e.value) and "layers.0 .. layers.1" in str(e.value)


def test_layer_count_without_numbered_tensors_is_bounded_by_the_tensor_count():
    from modelgen.runtime.loader.header_check import check_config_against_headers

    class Headers:  # two tensors, named without a layers.<i> index
        def keys(self):
            return ["blocks_0_w", "blocks_1_w"]

        def shape(self, name):
            return (4, 4)

    check_config_against_headers({"num_hidden_layers": 2, "hidden_size": 4}, Headers())
    with pytest.raises(ConfigError, match=r"'num_hidden_layers' = 3: the checkpoint holds only 2 tensor"):
        check_config_against_headers({"num_hidden_layers": 3}, Headers())
    with pytest.raises(ConfigError, match=r"'hidden_size' = 5: larger than every dimension"):
        check_config_against_headers({"hidden_size": 5}, Headers())


def test_extra_layers_in_the_checkpoint_are_fine():
    """DeepSeek stores its MTP layer at index num_hidden_layers: more numbered layers than the config's is allowed."""
    from modelgen.runtime.loader.header_check import check_config_against_headers, layers_in

    names = [f"model.layers.{i}.mlp.weight" for i in range(4)] + ["mtp.layers.0.norm.weight"]
    assert layers_in(names) == 4

    class Headers:
        def keys(self):
            return names

        def shape(self, name):
            return (8,)

    check_config_against_headers({"num_hidden_layers": 3}, Headers())


@pytest.mark.parametrize("layers", ["1e9", str(10**6)])
def test_modelgen_run_refuses_a_billion_layers_quickly(copy, layers):
    d = copy()
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg)[:-1] + f', "num_hidden_layers": {layers}}}')
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "modelgen.cli", "run", "--device", "cpu", "--checkpoint",
                           str(d), "--prompt-ids", "1,2"], capture_output=True, text=True, timeout=60, env=env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
    assert "num_hidden_layers" in lines[0] and "only 2 layer(s)" in lines[0] and "Traceback" not in proc.stderr
    assert time.perf_counter() - t0 < 60
