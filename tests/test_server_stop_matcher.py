"""The server's stop-string matching (runtime/server/stop_matcher.py and the server's per-choice text): the same cut
and the same hold-back as a whole-text search, fed in any chunking, in time linear in the text generated (a 60k-
character stop string cost 0.6 s per token before)."""
from __future__ import annotations

import time

import pytest

from modelgen.runtime.server.app import _Choice
from modelgen.runtime.server.stop_matcher import StopMatcher

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _first_stop_end(text: str, stops: list[str]) -> int | None:
    """Reference: where the first stop string to complete (in reading order) starts, by brute force."""
    for end in range(1, len(text) + 1):
        hits = [s for s in stops if text[:end].endswith(s)]
        if hits:
            return end - max(map(len, hits))
    return None


def _partial(text: str, stops: list[str]) -> int:
    """Reference: the longest tail of ``text`` that is a proper prefix of a stop string."""
    return max((j for s in stops for j in range(1, len(s)) if text.endswith(s[:j])), default=0)


_ALPHABET = st.sampled_from("abab c")  # few letters: overlapping, self-similar stops (KMP's failure links)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.text(_ALPHABET, max_size=6), max_size=12),
       stops=st.lists(st.text(_ALPHABET, min_size=1, max_size=6), min_size=1, max_size=4))
def test_matcher_equals_brute_force(text, stops):
    matcher = StopMatcher(stops)
    fed = ""
    for chunk in text:
        found = matcher.feed(chunk)
        fed += chunk
        assert found == _first_stop_end(fed, stops), (fed, stops)  # no stop completed in the earlier chunks
        if found is not None:
            return
        assert matcher.partial == _partial(fed, stops), (fed, stops)


class _CharTokenizer:
    """Token id i decodes to chr(i): one character per token."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(map(chr, ids))


def test_choice_cuts_before_the_stop_and_holds_back_partial_matches():
    choice = _Choice(_CharTokenizer(), ["cat", "at!"])
    out = [choice.push([ord(c)], None) for c in "a ca"]
    assert "".join(out) == "a " and choice.finish_reason is None  # "ca" may become "cat": held back
    out.append(choice.push([ord("t")], None))
    assert choice.finish_reason == "stop" and choice.text == "a " and "".join(out) == "a "


def test_choice_releases_the_held_tail_at_the_end():
    choice = _Choice(_CharTokenizer(), ["xyz"])
    assert choice.push([ord("a"), ord("x"), ord("y")], None) == "a"
    assert choice.push([ord("q")], "length") == "xyq" and choice.text == "axyq"


def test_long_stop_strings_cost_linear_time():
    """Four 60,000-character stop strings, 2,000 tokens of text that keeps matching their prefix: well under a
    second in all (the quadratic check took ~0.6 s per token)."""
    stop = "ab" * 30_000
    choice = _Choice(_CharTokenizer(), [stop, stop[:-1] + "c", "ba" * 30_000, stop + "!"][:4])
    t0 = time.perf_counter()
    sent = "".join(choice.push([ord("a" if i % 2 == 0 else "b")], None) for i in range(2_000))
    elapsed = time.perf_counter() - t0
    assert choice.finish_reason is None and sent == ""  # all of it could still be the start of a stop string
    assert elapsed < 1.0, f"{elapsed:.2f} s for 2,000 tokens"
