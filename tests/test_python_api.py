"""The text-level Python API (``LLM.complete`` / ``chat`` / ``stream``) on a tiny Llama checkpoint with a word-level
tokenizer: outputs equal the token-level ``generate``, finish reasons and stats are right, streams free their blocks
when abandoned, the incremental decoder never splits a multi-byte character, and README's "Python API" example runs."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from modelgen import LLM, RequestOutput, SamplingParams
from modelgen.runtime.engine.outputs import IncrementalDecoder

VOCAB = 160  # tests.llama_fixtures: vocab_size
TEMPLATE = "{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}<s> assistant"


def make_api_checkpoint(llama_checkpoint, tmp_path_factory) -> Path:
    """The tiny Llama plus a word-level tokenizer covering all 160 ids (every generated id decodes to a word)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    src, _ = llama_checkpoint("gqa")
    d = tmp_path_factory.mktemp("api")
    for f in src.iterdir():
        shutil.copy(f, d / f.name)
    words = ["[UNK]", "<s>", "</s>", "user", "assistant", "hello", "world"] + [f"w{i}" for i in range(7, VOCAB)]
    tok = HFTokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()  # "<s>" stays one word
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>",
                                                         "eos_token": "</s>"}))
    return d


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory) -> Path:
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)


@pytest.fixture(scope="module")
def llm(ckpt) -> LLM:
    return LLM(ckpt, target="rocm", device="cpu", max_num_seqs=4, progress=False)


PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)


def test_complete_equals_generate(llm):
    prompts = ["hello world", "world hello hello w9 w33"]
    outs = llm.complete(prompts, PARAMS)
    ids = [llm.tokenizer.encode(p) for p in prompts]
    assert [o.prompt_token_ids for o in outs] == ids
    assert [o.token_ids for o in outs] == llm.generate_ids(ids, PARAMS)
    for o in outs:
        assert isinstance(o, RequestOutput)
        assert o.text == llm.tokenizer.decode(o.token_ids) and o.text
        assert o.finish_reason == "length"
        s = o.stats
        assert (s.prompt_tokens, s.generated_tokens) == (len(o.prompt_token_ids), 6)
        assert 0 < s.time_to_first_token_s <= s.total_s
        assert s.decode_tokens_per_s is not None and s.decode_tokens_per_s > 0
    # A single string is one prompt; token ids are accepted as they are.
    (single,) = llm.complete(prompts[0], PARAMS)
    assert single.token_ids == outs[0].token_ids
    assert llm.complete([ids[1]], PARAMS)[0].token_ids == outs[1].token_ids


def test_finish_reason_stop(llm):
    first = llm.generate_ids([[5, 6, 7]], PARAMS)[0]
    # Stop at the 3rd generated token: the output keeps it (as at EOS) and says "stop".
    out = llm.complete([[5, 6, 7]], SamplingParams(max_tokens=6, stop_token_ids=(first[2],)))[0]
    k = first.index(first[2])
    assert out.token_ids == first[: k + 1] and out.finish_reason == "stop"
    zero = llm.complete([[5, 6, 7]], SamplingParams(max_tokens=0))[0]
    assert zero.token_ids == [] and zero.finish_reason == "length" and zero.stats.time_to_first_token_s is None


def test_chat_applies_template(llm):
    messages = [{"role": "user", "content": "hello world"}]
    reply = llm.chat(messages, PARAMS)
    rendered = llm.tokenizer.apply_chat_template(messages)
    ids = llm.tokenizer.encode(rendered, add_special_tokens=False)
    assert reply.prompt_token_ids == ids == [1, 3, 5, 6, 2, 1, 4]
    assert reply.token_ids == llm.generate_ids([ids], PARAMS)[0]
    both = llm.chat([messages, [{"role": "user", "content": "world"}]], PARAMS)
    assert [o.token_ids for o in both][0] == reply.token_ids and len(both) == 2
    with pytest.raises(ValueError, match="conversation 0"):
        llm.chat([[]], PARAMS)
    with pytest.raises(ValueError, match="messages: expected a non-empty list"):
        llm.chat([], PARAMS)


def test_stream_matches_generate_and_frees_blocks(llm):
    free = llm.blocks.num_free
    deltas = list(llm.stream("hello world w12", PARAMS))
    want = llm.generate_ids([llm.tokenizer.encode("hello world w12")], PARAMS)[0]
    assert [t for d in deltas for t in d.token_ids] == want
    assert all(len(d.token_ids) == 1 for d in deltas)  # one token per engine step
    assert "".join(d.text for d in deltas) == llm.tokenizer.decode(want)
    assert [d.finish_reason for d in deltas] == [None] * 5 + ["length"]
    assert llm.blocks.num_free == free
    # Abandoned after two deltas: closing the iterator releases the request's blocks at once.
    it = llm.stream("hello world w12", SamplingParams(max_tokens=40, ignore_eos=True))
    next(it), next(it)
    assert llm.blocks.num_free < free
    it.close()
    assert llm.blocks.num_free == free
    # The instance still serves after the abandoned stream.
    assert llm.generate_ids([llm.tokenizer.encode("hello world w12")], PARAMS)[0] == want


def test_progress_bar_loads_the_same_weights(ckpt, llm):
    """progress=True wraps the checkpoint in the tensor-counting view: same weights, same outputs."""
    import torch

    other = LLM(ckpt, target="rocm", device="cpu", max_num_seqs=4, progress=True)
    for (n, a), (_, b) in zip(llm.model.named_parameters(), other.model.named_parameters()):
        assert torch.equal(a, b), n


class _ByteTokenizer:
    """Ids are UTF-8 bytes; decode replaces an incomplete sequence with U+FFFD, as byte-level BPE decoders do."""

    def decode(self, ids):
        return bytes(ids).decode("utf-8", errors="replace")


def test_incremental_decoder_never_splits_a_character():
    text = "Paris é 東京 👋!"
    ids = list(text.encode())
    dec = IncrementalDecoder(_ByteTokenizer())
    pieces = [dec.push([i]) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert "" in pieces  # the first bytes of multi-byte characters were held back


def test_readme_python_api_example(ckpt, monkeypatch):
    """The README's "Python API" block, run as written with the default checkpoint replaced by the tiny one."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    import modelgen.runtime.convert.smollm2 as smollm2

    monkeypatch.setattr(smollm2, "ensure_smollm2_checkpoint", lambda *a, **k: ckpt)
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md:Python API", "exec"), namespace)  # noqa: S102 (our own README)
    llm, outputs, reply, streamed, ids = (namespace[k] for k in ("llm", "outputs", "reply", "streamed", "ids"))
    assert [o.token_ids for o in outputs] == ids
    assert streamed == reply.text  # same conversation, greedy: the stream spells the chat reply
    printed = out.getvalue()
    for o in outputs:
        assert repr(o.text) in printed
