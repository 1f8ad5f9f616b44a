"""runtime/engine/outputs.py IncrementalDecoder: the streamed pieces join to exactly the full decode (random ids of
a byte-level BPE vocabulary, so multi-byte UTF-8 characters split over tokens and invalid sequences; a
SentencePiece-style Metaspace vocabulary, whose spaces ride on the next token), and the cost per token is bounded:
each step decodes a tail of the output, not all of it (issue 27: a whole decode per token is quadratic)."""
from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models

from modelgen.runtime.convert.gguf_llama import _bytes_to_unicode  # GPT-2's byte -> character table
from modelgen.runtime.engine.outputs import IncrementalDecoder
from modelgen.runtime.tokenizer import Tokenizer


def _byte_level() -> Tokenizer:
    table = _bytes_to_unicode()
    pieces = [bytes([b]) for b in range(256)]
    # multi-byte tokens, some a whole character, some a character's first or last bytes
    pieces += ["é".encode(), "東".encode()[:2], "京".encode(), "👋".encode()[:2], "👋".encode()[2:], b" the", b"ing"]
    vocab = {"".join(table[b] for b in p): i for i, p in enumerate(pieces)}
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.ByteLevel()
    return Tokenizer(tok, {})


def _metaspace() -> Tokenizer:
    words = ["[UNK]", "▁Hello", "▁world", "!", "▁", "ing", "▁a", "b", "▁é", "東"]
    tok = HFTokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.decoder = decoders.Metaspace()
    return Tokenizer(tok, {})


def _stream(tokenizer, ids: list[int], rng: random.Random) -> list[str]:
    dec = IncrementalDecoder(tokenizer)
    pieces, i = [], 0
    while i < len(ids):
        n = rng.choice([1, 1, 1, 2, 3])  # an engine step may add several tokens (speculative decoding)
        pieces.append(dec.push(ids[i:i + n]))
        i += n
    return pieces + [dec.flush()]


@pytest.mark.parametrize("make, vocab", [(_byte_level, 263), (_metaspace, 10)])
@pytest.mark.parametrize("seed", range(20))
def test_streamed_text_equals_the_full_decode(make, vocab, seed):
    tokenizer, rng = make(), random.Random(seed)
    ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 300))]
    pieces = _stream(tokenizer, ids, rng)
    assert "".join(pieces) == tokenizer.decode(ids)


def test_a_split_character_is_held_back_not_broken():
    tokenizer = _byte_level()
    ids = list("Paris é 東京 👋!".encode())
    pieces = _stream(tokenizer, ids, random.Random(0))
    assert "".join(pieces) == "Paris é 東京 👋!"
    assert not any("\ufffd" in p for p in pieces)
    assert "" in pieces


class _Counting:
    """A tokenizer that counts the ids it is asked to decode."""

    def __init__(self, tokenizer):
        self.tokenizer, self.decoded = tokenizer, 0

    def decode(self, ids):
        self.decoded += len(ids)
        return self.tokenizer.decode(ids)


def test_decode_cost_per_token_is_bounded():
    rng = random.Random(1)
    counts = {}
    for n in (2_000, 20_000):
        tokenizer = _Counting(_byte_level())
        dec = IncrementalDecoder(tokenizer)
        text = []
        for _ in range(n):
            text.append(dec.push([rng.randrange(263)]))
        text.append(dec.flush())
        counts[n] = tokenizer.decoded / n
        # random bytes hold back at most a few tokens (a 4-byte sequence), so each step decodes a short window;
        # the whole output per token would be ~n / 2 ids per token here
        assert counts[n] < 16, counts
    assert counts[20_000] < 2 * counts[2_000], counts  # flat in the output's length, not growing with it
