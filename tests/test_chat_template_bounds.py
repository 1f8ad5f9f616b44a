"""Chat-template limits added by issue 27 (runtime/tokenizer.py), checked on the Tokenizer itself: bytes charged like
strings, format widths summed over all fields, the time limit enforced inside one long operation, and a failed
render's memory released at once (no reference cycle keeps its frames). The server-side view of the same limits is
tests/test_server_hostile.py."""
from __future__ import annotations

import gc
import sys
import time

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import WordLevel

from modelgen.runtime.tokenizer import ChatTemplateError, Tokenizer


def _tokenizer(template: str) -> Tokenizer:
    return Tokenizer(HFTokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")), {}, template, "/ckpt/chat_template.jinja")


def _render(template: str, messages=None, **kw) -> str:
    return _tokenizer(template).apply_chat_template(messages or [{"role": "user", "content": "hi"}], **kw)


@pytest.mark.parametrize("template, pattern", [
    ("{{ ('x' * 10**6).encode() * 2500 }}", r"'\*' operator would produce about 2500000000"),
    ("{{ ('x' * 10**6).encode() + ('x' * 10**6).encode() * 8 }}", r"the '\+' operator would produce about 9000000"),
    ("{% set b = ('x' * 10**6).encode() %}{{ b.join([b] * 20) }}", r"would produce"),
    ("{{ ('x' * 10**6).encode().center(10**8) }}", r"bytes.center\(\) would produce"),
    ("{{ ('%9999999s' * 250) % (('x',) * 250) }}", r"width 2499999750 in the format string"),
    ("{{ ('{:>9999999}' * 250).format(*(['x'] * 250)) }}", r"width 2499999750 in the format string"),
    ("{{ ('%*s' * 250) % ((9999999, 'x') * 250) }}", r"numeric argument 9999999 \(width arguments 250"),
    ("{{ ('%.9999999f' * 3) % (1.0, 2.0, 3.0) }}", r"width 29999997 in the format string"),
    ("{{ {}.fromkeys(range(100000), 'x' * 1000) }}", r"fromkeys\(\) would produce"),
])
def test_bytes_and_summed_widths_are_charged(template, pattern):
    t0 = time.perf_counter()
    with pytest.raises(ChatTemplateError, match=pattern) as info:
        _render(template)
    assert time.perf_counter() - t0 < 1.0
    assert str(info.value).startswith("/ckpt/chat_template.jinja: chat template exceeded a render limit")


def test_numbers_in_plain_text_are_not_widths():
    """A date or a count in a format string's text is not a width (only %-field and {:spec} numbers are)."""
    assert _render("{{ 'Today is 20241231, %s' % 'hi' }}") == "Today is 20241231, hi"
    assert _render("{{ '{0} of 99999999 {1:>3}'.format('a', 'b') }}") == "a of 99999999   b"


class _SlowItems:
    """An iterable the template consumes inside one filter call: 0.2 ms per item, 10,000 items (2 s in all)."""

    def __iter__(self):
        for i in range(10_000):
            time.sleep(0.0002)
            yield "x"

    def __str__(self):
        return "slow"


def test_time_limit_holds_inside_one_long_operation():
    """`join` over a slow lazy sequence is one operation: the clock is read while it materialises, so the render
    stops near its 0.2 s limit instead of after the whole 2 s."""
    t0 = time.perf_counter()
    with pytest.raises(ChatTemplateError, match="render time limit"):
        _render("{{ messages[0]['content'] | join(',') }}", [{"role": "user", "content": _SlowItems()}],
                time_limit=0.2)
    assert time.perf_counter() - t0 < 0.8


@pytest.mark.parametrize("failing", [
    "{{ raise_exception('refused') }}",
    "{{ 1 / 0 }}",
    "{{ undefined_thing.attr }}",
    "{{ big ~ big ~ big }}",  # over the size budget
    "{% macro m(a) %}{{ raise_exception('in a macro ' ~ a[:3]) }}{% endmacro %}{{ m(big) }}",
])
def test_failed_render_keeps_nothing_alive(failing):
    """What a failed render referenced is let go when the error is raised, without the garbage collector: nothing
    in a reference cycle (Jinja's rewritten tracebacks, the exception's frames, a macro's closure over the
    context). ``big`` (7 MB) is in the template's globals, as the messages would be; its reference count after the
    failure must be what it was before."""
    big = "x" * 7_000_000
    tok = _tokenizer("{% set kept = [big, big] %}{% set ns = namespace(b=big) %}" + failing)
    template = tok._template()
    before = sys.getrefcount(big)
    gc.disable()
    try:
        template.globals["big"] = big
        with pytest.raises(ChatTemplateError):
            tok.apply_chat_template([{"role": "user", "content": "hi"}])
        del template.globals["big"]
        assert sys.getrefcount(big) == before, "the failed render still holds references to what it used"
    finally:
        gc.enable()
