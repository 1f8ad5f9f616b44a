"""Text-level results of the Python API: one :class:`RequestOutput` per prompt, :class:`StreamDelta` per streamed
token, and the incremental detokenizer that both the CLI and :meth:`LLM.stream` use."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestStats:
    """Per-request figures, measured by the engine loop (seconds from the call that submitted the request)."""

    prompt_tokens: int
    generated_tokens: int
    time_to_first_token_s: float | None  # None when nothing was generated (max_new_tokens 0)
    total_s: float

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first over the time after the first (the first token's time is prefill)."""
        if self.time_to_first_token_s is None or self.generated_tokens < 2:
            return None
        span = self.total_s - self.time_to_first_token_s
        return (self.generated_tokens - 1) / span if span > 0 else None

    def as_dict(self) -> dict:
        return {**self.__dict__, "decode_tokens_per_s": self.decode_tokens_per_s}


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str | None  # None when the checkpoint has no tokenizer
    finish_reason: str  # "stop": an EOS / stop token was sampled; "length": max_new_tokens reached
    stats: RequestStats


@dataclass
class StreamDelta:
    """What one engine step added to a streamed request: the new token ids and the text they completed.

    ``text`` may be empty for a token that ends inside a multi-byte character (it is emitted with the token that
    completes it). ``finish_reason`` is set on the last delta only."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


class IncrementalDecoder:
    """Decode the whole output so far and hand out the new suffix (as HF's TextStreamer and vLLM's detokenizer do):
    decoding tokens one at a time would break byte-level BPE characters split over several tokens and drop the
    spaces that SentencePiece-style decoders attach to the following token. Text ending in U+FFFD (an incomplete
    UTF-8 sequence) is held back until the next token completes it; :meth:`flush` returns whatever is left."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = 0  # characters of the decoded text handed out so far

    def push(self, token_ids: list[int]) -> str:
        self.ids.extend(token_ids)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        return self._take(text)

    def flush(self) -> str:
        return self._take(self.tokenizer.decode(self.ids)) if self.ids else ""

    def _take(self, text: str) -> str:
        # A decoder may rewrite earlier text (rare: a cleanup rule over a token boundary); only the part beyond what
        # was already emitted can still be printed.
        new = text[self.emitted:]
        self.emitted = max(self.emitted, len(text))
        return new
