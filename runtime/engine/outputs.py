"""Text-level results of the Python API: one :class:`RequestOutput` (of :class:`CompletionOutput` samples) per prompt, :class:`StreamDelta` per streamed
token, and the incremental detokenizer that both the CLI and :meth:`LLM.stream` use."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestStats:
    """Per-request figures, measured by the engine loop for this request alone (seconds from the call that
    submitted it); for ``n`` > 1 a :class:`RequestOutput`'s stats sum the samples' tokens and span their times."""

    prompt_tokens: int
    generated_tokens: int
    time_to_first_token_s: float | None  # None when nothing was generated (max_tokens 0)
    total_s: float
    queued_s: float | None = None  # submission to first admission into the running batch (None: never admitted)
    preemptions: int = 0  # times this request was preempted (its blocks freed, its tokens recomputed)

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
class Logprob:
    """One token's log-probability (vLLM's ``Logprob`` fields): ``rank`` is 1 for the most likely token, None when
    the sampled token is outside the top ``logprobs``; ``decoded_token`` None without a tokenizer."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """One generated sample of a request (vLLM's ``CompletionOutput`` fields).

    ``text`` is None without a tokenizer.json; with a ``stop`` string it ends before the stop string, while
    ``token_ids`` keep every generated token. ``finish_reason``: ``"stop"`` (EOS, a stop token or a stop string) or
    ``"length"`` (``max_tokens``); ``stop_reason`` the stop string or token id that ended it (None for EOS or
    length). ``logprobs``: with ``SamplingParams(logprobs=k)``, one ``{token id: Logprob}`` per output token (the
    sampled token and the ``k`` most likely), else None; ``cumulative_logprob`` their sum over the sampled tokens."""

    index: int
    text: str | None
    token_ids: list[int]
    finish_reason: str
    stop_reason: str | int | None = None
    logprobs: list[dict[int, Logprob]] | None = None
    cumulative_logprob: float | None = None
    stats: RequestStats | None = None

    def finished(self) -> bool:
        return True


@dataclass
class RequestOutput:
    """One prompt's result (vLLM's ``RequestOutput`` shape): ``outputs`` holds its ``n`` samples.

    ``text``, ``token_ids``, ``finish_reason`` are the first sample's (``outputs[0]``), the shorter spelling of the
    common ``n = 1`` case; ``stats`` are this request's own (:class:`RequestStats`)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    stats: RequestStats
    finished: bool = True

    @property
    def text(self) -> str | None:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str:
        return self.outputs[0].finish_reason

    @property
    def metrics(self) -> RequestStats:
        """vLLM's attribute name for :attr:`stats`."""
        return self.stats


@dataclass
class StreamDelta:
    """What one engine step added to a streamed request: the new token ids and the text they completed.

    ``text`` may be empty for a token that ends inside a multi-byte character (it is emitted with the token that
    completes it). ``finish_reason`` is set on the last delta only."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


class IncrementalDecoder:
    """Hand out the text each new token adds, decoding only a bounded tail of the output (vLLM's detokenizer:
    a prefix and a read offset into the ids).

    Decoding tokens one at a time would break byte-level BPE characters split over several tokens and drop the
    spaces that SentencePiece-style decoders attach to the following token; decoding the whole output on every
    token (as HF's TextStreamer does) costs time quadratic in its length. So the window ``ids[prefix:]`` is decoded
    twice, with and without the tokens since the last emission (``ids[read:]``), and the difference is the new
    text: ``ids[prefix:read]`` gives those tokens their left context (a SentencePiece space, a character's first
    bytes). Text ending in U+FFFD (an incomplete UTF-8 sequence) is held back until a token completes it; only then
    does the window move on (``prefix`` to ``read``), always at a character boundary, so the pieces join to exactly
    the full decode. :meth:`flush` returns whatever is left."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # ids before it are never decoded again
        self.read = 0  # ids[prefix:read]: already emitted, decoded again only as context

    def push(self, token_ids: list[int]) -> str:
        self.ids.extend(token_ids)
        return self._advance(final=False)

    def flush(self) -> str:
        return self._advance(final=True) if self.ids else ""

    def _advance(self, final: bool) -> str:
        context = self.tokenizer.decode(self.ids[self.prefix:self.read])
        text = self.tokenizer.decode(self.ids[self.prefix:])
        if not final and (len(text) <= len(context) or text.endswith("\ufffd")):
            return ""  # nothing new yet, or a character still incomplete: the window stays where it is
        # A decoder may rewrite the context's text (rare: a cleanup rule over a token boundary); only the part
        # beyond it can still be printed.
        new = text[len(context):]
        self.prefix, self.read = self.read, len(self.ids)
        return new
